package market

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Candidate is an offer as the matcher sees it: the contract plus the
// provider's record, which is not part of the offer.
type Candidate struct {
	Offer Offer
	// ReliabilityBP is the share of device-days the provider completed
	// without a host failure, in basis points; 0 means unknown and takes
	// DefaultReliabilityBP.
	ReliabilityBP int
	// InterruptionPPMPerHour is the chance per hour (parts per million)
	// that interruptible capacity is preempted; 0 means unknown and takes
	// DefaultInterruptionPPMPerHour. Ignored for on-demand bookings.
	InterruptionPPMPerHour int
}

// Piece is one part of a quote: devices of one offer over [Start, End).
type Piece struct {
	OfferID       int64
	ProviderID    int64
	AcceleratorID string
	RegionID      string
	Devices       int
	Hours         int
	Start         time.Time
	End           time.Time
	Interruptible bool  // booked at the interruptible price
	PriceCents    Cents // per device-hour, as booked
	Cost          CostBreakdown
	EmissionsG    int64
	// Gang is true for a training job's piece: its devices are tightly
	// coupled, so it is placed on one node, or on whole nodes of a
	// placement group (see Commitment).
	Gang bool
}

// Commitment returns the reservation the piece would hold; the booking
// places it on nodes (PlaceCommitments).
func (p Piece) Commitment() Commitment {
	return Commitment{OfferID: p.OfferID, Devices: p.Devices, Start: p.Start, End: p.End, Gang: p.Gang}
}

// Quote is one way to run the request, with its effective cost.
type Quote struct {
	Rank   int // 1 is best
	Pieces []Piece
	Cost   CostBreakdown
	// CentsPerRefDeviceHour is the effective cost per reference-device-hour
	// of work the pieces deliver (devices × hours × relative throughput).
	CentsPerRefDeviceHour Cents
	// EmissionsG estimates grams of CO2e: TDP × devices × hours × the
	// offer's carbon intensity, summed over pieces.
	EmissionsG    int64
	ReliabilityBP int // device-weighted mean of the pieces' providers
	Providers     int
	// Start is the earliest piece's start and End the latest piece's end:
	// the window [Start, End) covers every piece, and it is what the buyer
	// sees. A split's pieces may start at different times (each at its own
	// earliest); the start preference ranks by Start.
	Start time.Time
	End   time.Time
	// Score is the weighted preference score on fixed scales (see
	// scoreUnit; cost relative to the cheapest feasible quote); lower is
	// better. It does not depend on which other offers fit.
	Score int64
	// Exact is false when a split was chosen by the bounded search; then
	// LowerBound is a proven lower bound on the optimal split's cost, so
	// Cost.Total − LowerBound bounds the gap.
	Exact      bool
	LowerBound Cents
}

// EmissionsKg formats the emissions estimate in kg with one decimal.
func (q Quote) EmissionsKg() string {
	return strconv.FormatInt((q.EmissionsG+50)/100/10, 10) + "." + strconv.FormatInt((q.EmissionsG+50)/100%10, 10)
}

// Result is the matcher's answer.
type Result struct {
	Quotes []Quote
	// Total is the number of feasible quotes before Limit was applied;
	// a lower bound ("at least Total") unless Exhaustive.
	Total       int
	Explanation Explanation
	// Exhaustive is true when every offer the request could use was
	// evaluated, so Total and the explanation's counts are exact. It is
	// false when the search stopped early, once no offer left could rank
	// among the quotes (Explanation.Skipped), or a work budget left offers
	// out (Explanation.Cut): then Total, Fit and each Eliminated count are
	// lower bounds, while the quotes are exactly those an exhaustive search
	// ranks first (within the budget's offers, when cut).
	Exhaustive bool
}

// Constraint names a hard constraint in explanations, in the order the
// matcher checks them: an offer is counted against the first it fails.
type Constraint string

// Constraints, in checking order.
const (
	ConstraintModel        Constraint = "model"
	ConstraintMemory       Constraint = "memory"
	ConstraintRegion       Constraint = "region"
	ConstraintPrice        Constraint = "price"
	ConstraintOffer        Constraint = "offer"
	ConstraintInterconnect Constraint = "interconnect"
	ConstraintNetwork      Constraint = "network"
	ConstraintSoftware     Constraint = "software"
	ConstraintContainer    Constraint = "container"
	ConstraintVerified     Constraint = "verified"
	ConstraintReliability  Constraint = "reliability"
	ConstraintCarbon       Constraint = "carbon"
	ConstraintDevices      Constraint = "devices"
	ConstraintWindow       Constraint = "window"
	ConstraintBooked       Constraint = "booked"
	ConstraintBudget       Constraint = "budget"
	// Relaxation-only names.
	ConstraintInterruption Constraint = "interruption"
	ConstraintDeadline     Constraint = "deadline"
)

var reasons = [...]struct {
	c     Constraint
	label string
}{
	{ConstraintModel, "wrong model"},
	{ConstraintMemory, "too little memory"},
	{ConstraintRegion, "outside the allowed regions"},
	{ConstraintPrice, "over the maximum price"},
	{ConstraintOffer, "not the offers asked for"},
	{ConstraintInterconnect, "interconnect too weak"},
	{ConstraintNetwork, "network too slow"},
	{ConstraintSoftware, "driver or CUDA too old"},
	{ConstraintContainer, "do not run containers"},
	{ConstraintVerified, "no verified figures"},
	{ConstraintReliability, "reliability too low"},
	{ConstraintCarbon, "carbon intensity too high"},
	{ConstraintDevices, "too few devices"},
	{ConstraintWindow, "not available for the duration in the window"},
	{ConstraintBooked, "fully booked in the window"},
	{ConstraintBudget, "over budget"},
}

const (
	rModel = iota
	rMemory
	rRegion
	rPrice
	rOffer
	rInterconnect
	rNetwork
	rSoftware
	rContainer
	rVerified
	rReliability
	rCarbon
	rDevices
	rWindow
	rBooked
	rBudget
	numReasons
	rFit = -1
)

// Elimination counts the offers a constraint eliminated.
type Elimination struct {
	Constraint Constraint
	Label      string
	Count      int
}

// Relaxation is a change to one constraint that the engine re-ran and
// found to produce quotes.
type Relaxation struct {
	Constraint Constraint
	Message    string // e.g. "raise the maximum price to $2.41 per device-hour: 3 offers"
	Offers     int    // feasible quotes after the change
	// Request is the request with the change applied, so a person can
	// apply the relaxation with one click.
	Request Request
}

// Explanation says why offers were not used.
type Explanation struct {
	Considered int // listed offers looked at
	Fit        int // offers that passed every per-offer constraint
	// Eliminated has one entry per constraint that eliminated offers, most
	// first; the counts plus Fit add up to Considered.
	Eliminated []Elimination
	// Shortfall says why offers that fit could not be combined into a
	// quote (split jobs), or is empty.
	Shortfall string
	// Relaxations are computed by re-running the engine when no quote was
	// found, in the order market.relax tries them (price, budget,
	// deadline, interruption, then the other constraints).
	Relaxations []Relaxation
	// Cut is what a work budget left out (Index.MatchWithin); then
	// Fit, the Eliminated counts and Cut.Unexamined add up to Considered.
	Cut Cut
	// Skipped is the offers a gang request's search never evaluated
	// because it stopped early: walking offers from the lowest price, it
	// stops once a bound on the best score any offer left could reach is
	// worse than the last quote's. None of them could rank; some may fit.
	// Fit, the Eliminated counts, Cut.Unexamined and Skipped add up to
	// Considered.
	Skipped int
}

// Summary reads like "0 of 1,240 offers fit: 812 wrong model, 301 too
// little memory", or "at least 12 of 1,240 offers fit: …, 900 not
// evaluated (…)" when the search stopped early.
func (e Explanation) Summary() string {
	var b strings.Builder
	if e.Skipped > 0 {
		b.WriteString("at least ")
	}
	fmt.Fprintf(&b, "%s of %s offers fit", groupThousands(e.Fit), groupThousands(e.Considered))
	for i, el := range e.Eliminated {
		if i == 0 {
			b.WriteString(": ")
		} else {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %s", groupThousands(el.Count), el.Label)
	}
	if n := e.Cut.Unexamined; n > 0 {
		sep := ", "
		if len(e.Eliminated) == 0 {
			sep = ": "
		}
		fmt.Fprintf(&b, "%s%s not examined (over the work budget; the %s with the lowest prices were)", sep, groupThousands(n), groupThousands(e.Cut.Examined))
	}
	if n := e.Skipped; n > 0 {
		sep := ", "
		if len(e.Eliminated) == 0 && e.Cut.Unexamined == 0 {
			sep = ": "
		}
		fmt.Fprintf(&b, "%s%s not evaluated (none of them could rank among the best quotes)", sep, groupThousands(n))
	}
	return b.String()
}

func groupThousands(n int) string {
	s := strconv.Itoa(n)
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// Match runs the engine over candidates and commitments without an index:
// a plain scan. It gives the same result as an Index holding the same data.
func Match(cands []Candidate, commitments []Commitment, req Request, now time.Time) (Result, error) {
	idx := NewIndex()
	for _, c := range commitments {
		idx.AddCommitment(c)
	}
	for _, c := range cands {
		if err := idx.Upsert(c); err != nil {
			return Result{}, err
		}
	}
	return idx.Match(req, now)
}

// slot flags.
const (
	flagPlacement uint8 = 1 << iota
	flagInterruptible
	flagVerified
	flagContainers // runs buyer containers with CDI (ContainerSupport.RunsContainers)
)

// slot is an offer in the matcher's compact form. Prices in cents, times in
// compact seconds (see span). It holds no pointers: its commitments live in
// the index's span arena at [spanOff, spanOff+spanN), so the garbage
// collector never scans the index, and a bucket's spans lie together.
type slot struct {
	id, provider   int64
	from, until    uint32 // compact times, see span
	spanOff, spanN uint32
	committed      int32  // Σ devices over the spans, saturating: a cheap "never full" test
	spansEnd       uint32 // the latest span end (compact), 0 without spans: "all over by then"
	price          int32
	intrPrice      int32 // the interruptible price, or price: its lowest; buckets sort by it
	devices        int32
	driver, cuda   uint32 // version ids in the index's versionTable
	interruptPPM   int32
	storageC       uint16
	egressC        uint16
	carbon         uint16
	reliability    uint16
	relThroughput  uint16 // permille of the reference accelerator
	minRent        uint16
	maxRent        uint16
	provMins       uint16
	netGbps        uint16
	dpn            uint8
	acc, region    uint8
	flags          uint8
	interconnectRk uint8
}

func makeSlot(c Candidate) (slot, error) {
	o := c.Offer
	acc, region := -1, -1
	for i, a := range accelerators {
		if a.ID == o.AcceleratorID {
			acc = i
		}
	}
	for i, r := range regions {
		if r.ID == o.RegionID {
			region = i
		}
	}
	p := Problems{}
	if acc < 0 {
		p.Add("accelerator", "Unknown accelerator.")
	}
	if region < 0 {
		p.Add("region", "Unknown region.")
	}
	if o.Devices() < 1 || o.DevicesPerNode > 255 {
		p.Add("devices", "The offer has no devices.")
	}
	if o.PriceCentsPerDeviceHour < 1 || o.PriceCentsPerDeviceHour > MaxPriceCents {
		p.Add("price", "Price out of range.")
	}
	if c.ReliabilityBP < 0 || c.ReliabilityBP > 10000 {
		p.Add("reliability_bp", "Reliability must be between 0 and 10000 basis points.")
	}
	if c.InterruptionPPMPerHour < 0 || c.InterruptionPPMPerHour > 1_000_000 {
		p.Add("interruption_ppm", "The interruption rate must be between 0 and 1,000,000 per million.")
	}
	if err := p.Err(); err != nil {
		return slot{}, err
	}
	s := slot{
		id: o.ID, provider: o.ProviderID,
		from: compactTime(ceilUnix(o.AvailableFrom)), until: compactTime(o.AvailableUntil.Unix()),
		price: int32(o.PriceCentsPerDeviceHour), intrPrice: int32(o.PriceCentsPerDeviceHour),
		devices: int32(o.Devices()), dpn: uint8(o.DevicesPerNode),
		storageC: clampU16(int64(o.StorageCentsPerGBMonth)), egressC: clampU16(int64(o.EgressCentsPerGB)),
		carbon: clampU16(int64(o.CarbonGPerKWh)), minRent: clampU16(int64(o.MinRentalHours)),
		maxRent: clampU16(int64(o.MaxRentalHours)), provMins: clampU16(int64(o.ProvisioningMins)),
		netGbps: clampU16(int64(o.Network().Gbps)), acc: uint8(acc), region: uint8(region),
		interconnectRk: uint8(o.Interconnect.Rank()),
		reliability:    uint16(c.ReliabilityBP),
		interruptPPM:   int32(c.InterruptionPPMPerHour),
	}
	if s.reliability == 0 {
		s.reliability = DefaultReliabilityBP
	}
	if o.PlacementGroup {
		s.flags |= flagPlacement
	}
	if o.Containers.RunsContainers() {
		s.flags |= flagContainers
	}
	if o.Interruptible && o.InterruptibleCentsPerDH > 0 && o.InterruptibleCentsPerDH <= o.PriceCentsPerDeviceHour {
		s.flags |= flagInterruptible
		s.intrPrice = int32(o.InterruptibleCentsPerDH)
		if s.interruptPPM == 0 {
			s.interruptPPM = DefaultInterruptionPPMPerHour
		}
	}
	rel := accelerators[acc].RelativeThroughputPermille()
	for _, f := range o.Figures {
		if f.Basis == FigureVerified {
			s.flags |= flagVerified
		}
		if f.Kind == FigureRelThroughput && (f.Basis == FigureVerified || f.Basis == FigureGuaranteed) {
			rel = f.Value
		}
	}
	s.relThroughput = clampU16(max(rel, 1))
	return s, nil
}

func clampU16(v int64) uint16 {
	if v < 0 {
		return 0
	}
	if v > 65535 {
		return 65535
	}
	return uint16(v)
}

// query is a validated request compiled for the hot loop.
type query struct {
	req              Request
	split            bool
	devices          int64
	minPiece         int64
	hours            int64 // 0: derived per offer from workMilli
	workMilli        int64 // stated work in reference-device-hours × 1000
	modelMask        catSet
	memMask          catSet
	regionMask       catSet
	maxPrice         int32
	offers           []int64 // pinned offers (Constraints.OfferIDs); empty = any
	budget           int64
	minInterconnect  uint8
	minNet           uint16
	minDriver        uint32 // the version rank a slot needs (versionTable.atLeast), 0 = any
	minCUDA          uint32
	vrank            []uint32 // the index's version ranks while the query runs
	verified         bool
	containers       bool // the request has a runtime
	minReliability   uint16
	maxCarbon        uint16
	lo               int64 // earliest start, unix
	deadline         int64 // 0: none
	allowIntr        bool
	dataRegion       int
	datasetGB        int64
	checkpointMins   int64
	restartMins      int64
	prefAcc, prefReg catSet
	weights          [numMetrics]int64
	arena            []span // the index's span arena while the query runs
}

// spansOf returns the commitments of s.
func (q *query) spansOf(s *slot) []span {
	if s.spanN == 0 {
		return nil
	}
	return q.arena[s.spanOff : s.spanOff+s.spanN : s.spanOff+s.spanN]
}

// The matcher counts whole seconds. Times are normalised once, where they
// enter it: a bound on when work may run is rounded inward — a start (now,
// the earliest start, an offer's availability from) up to the next whole
// second, an end (the deadline, availability until) down — and a
// commitment outward, covering every second it touches (its start down,
// its end up; see appendSpans). So no piece starts before now or outside
// its offer's window or overlaps a commitment, and FitsCapacity, which
// checks the exact times, accepts every piece the matcher quotes.

// ceilUnix is t in unix seconds, rounded up to a whole second.
func ceilUnix(t time.Time) int64 {
	if t.Nanosecond() > 0 {
		return t.Unix() + 1
	}
	return t.Unix()
}

func compile(req Request, now time.Time) (*query, error) {
	if err := ValidateRequest(&req); err != nil {
		return nil, err
	}
	w, c, p := req.Workload, req.Constraints, req.Preferences
	q := queryPool.Get().(*query)
	*q = query{
		req: req, split: w.Kind != WorkTraining,
		devices: int64(w.Devices), minPiece: int64(w.MinPieceDevices),
		hours:    int64(w.Hours),
		maxPrice: int32(c.MaxPricePerDeviceHour), offers: c.OfferIDs, budget: int64(c.BudgetCents),
		minInterconnect: uint8(c.MinInterconnect.Rank()), minNet: clampU16(int64(c.MinNetworkGbps)),
		verified: c.RequireVerified, containers: req.Runtime.Image != "", minReliability: uint16(c.MinReliabilityBP), maxCarbon: uint16(c.MaxCarbonGPerKWh),
		allowIntr: c.AllowInterruption, dataRegion: -1, datasetGB: int64(w.DatasetGB),
		checkpointMins: int64(w.CheckpointMins), restartMins: int64(w.RestartMins),
	}
	if !q.split {
		q.minPiece = q.devices
	}
	if w.WorkDeviceHours > 0 {
		model := w.WorkModelID
		if model == "" {
			model = ReferenceAcceleratorID
		}
		a, _ := FindAccelerator(model)
		q.workMilli = w.WorkDeviceHours * a.RelativeThroughputPermille()
	}
	q.lo = max(ceilUnix(now), ceilUnix(c.EarliestStart))
	if !c.Deadline.IsZero() {
		q.deadline = c.Deadline.Unix()
	}
	for i, a := range accelerators {
		// Families are the rule, model ids narrow within them (see Constraints).
		if (len(c.Families) == 0 || inList(c.Families, a.Family)) && (len(c.AcceleratorIDs) == 0 || inList(c.AcceleratorIDs, a.ID)) {
			q.modelMask.add(i)
		}
		if a.MemoryGB >= c.MinMemoryGB {
			q.memMask.add(i)
		}
		if inList(p.PreferredAcceleratorIDs, a.ID) {
			q.prefAcc.add(i)
		}
	}
	var userGroups []string
	for _, id := range w.UserRegionIDs {
		r, _ := FindRegion(id)
		userGroups = append(userGroups, r.Group)
	}
	for i, r := range regions {
		// Countries are the residency rule, regions narrow within them.
		ok := (len(c.Countries) == 0 || inList(c.Countries, r.Country)) && (len(c.RegionIDs) == 0 || inList(c.RegionIDs, r.ID))
		if w.Kind == WorkInference && len(userGroups) > 0 && !inList(userGroups, r.Group) {
			ok = false
		}
		if ok {
			q.regionMask.add(i)
		}
		if inList(p.PreferredRegionIDs, r.ID) {
			q.prefReg.add(i)
		}
		if r.ID == w.DataRegionID {
			q.dataRegion = i
		}
	}
	q.weights = [numMetrics]int64{int64(p.CostWeight), int64(p.CarbonWeight), int64(p.ReliabilityWeight),
		int64(p.StartWeight), int64(p.ProvidersWeight), int64(p.PreferredWeight)}
	if q.weights == ([numMetrics]int64{}) {
		q.weights[mCost] = 1
	}
	return q, nil
}

var queryPool = sync.Pool{New: func() any { return new(query) }}

// putQuery returns a compiled query for reuse; the caller must not use it
// again.
func putQuery(q *query) {
	*q = query{} // keep neither the request's slices nor the arena alive
	queryPool.Put(q)
}

func inList(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// bucketReason is the reason every offer of an accelerator and region is
// eliminated, or rFit when the bucket must be looked at offer by offer.
func (q *query) bucketReason(acc, region uint8) int {
	switch {
	case !q.modelMask.has(acc):
		return rModel
	case !q.memMask.has(acc):
		return rMemory
	case !q.regionMask.has(region):
		return rRegion
	}
	return rFit
}

// fit is what evaluating one offer yields when it passes: one cache line,
// holding all a gang's ranking needs, so ranking never reads the slot.
type fit struct {
	s       *slot
	lo, hi  int64 // allowed start range
	start   int64 // gang: earliest start; split: start for avail
	avail   int64 // split: most devices free at once, capped at the request
	cost    int64 // gang: total effective cost
	emis    int64 // gang: emissions, grams
	hrs     int32 // hours; a fit's are within its offer's maximum rental (uint16)
	rel     uint16
	notPref uint8
	intr    bool
}

func (f *fit) hours() int64 { return int64(f.hrs) }

// eval checks one offer against every constraint in order and returns the
// first it fails, or rFit having filled f with the offer's fit.
func (q *query) eval(s *slot, f *fit) int {
	if r := q.bucketReason(s.acc, s.region); r != rFit {
		return r
	}
	intr := q.allowIntr && s.flags&flagInterruptible != 0
	price := s.price
	if intr {
		price = s.intrPrice
	}
	switch {
	case q.maxPrice > 0 && price > q.maxPrice:
		return rPrice
	case len(q.offers) > 0 && !slices.Contains(q.offers, s.id):
		// After price: a bucket's tail over the maximum price is counted
		// against price wholesale, before its offers are looked at.
		return rOffer
	case s.interconnectRk < q.minInterconnect:
		return rInterconnect
	case s.netGbps < q.minNet:
		return rNetwork
	case (q.minDriver > 0 && q.vrank[s.driver] < q.minDriver) || (q.minCUDA > 0 && q.vrank[s.cuda] < q.minCUDA):
		return rSoftware
	case q.containers && s.flags&flagContainers == 0:
		// A runtime needs an engine and CDI (runtime.go).
		return rContainer
	case q.verified && s.flags&flagVerified == 0:
		return rVerified
	case s.reliability < q.minReliability:
		return rReliability
	case q.maxCarbon > 0 && s.carbon > q.maxCarbon:
		return rCarbon
	case int64(s.devices) < q.minPiece:
		return rDevices
	case !q.split && q.devices > int64(s.dpn) && s.flags&flagPlacement == 0:
		return rDevices
	}
	hours := q.hours
	if hours == 0 {
		den := q.devices * int64(s.relThroughput)
		hours = (q.workMilli + den - 1) / den
	}
	lo, end := max(q.lo, int64(s.from)+compactEpoch), int64(s.until)+compactEpoch
	if q.deadline > 0 && q.deadline < end {
		end = q.deadline
	}
	hi := end - hours*3600
	if hours < int64(s.minRent) || hours > int64(s.maxRent) || lo > hi {
		return rWindow
	}
	*f = fit{s: s, lo: lo, hi: hi, hrs: int32(hours), intr: intr}
	if !q.split {
		start := lo
		if int64(s.spansEnd)+compactEpoch > lo && !roomAlways(s, q.devices) {
			sh := slotShape(s)
			var ok bool
			start, ok = earliestStart(q.spansOf(s), sh, layoutOf(true, q.devices, sh.dpn), q.devices, lo, hi, hours*3600)
			if !ok {
				return rBooked
			}
		}
		f.start = start
		f.avail = q.devices
		f.cost = int64(pieceCost(s, q, q.devices, hours, intr).Total)
		if q.budget > 0 && f.cost > q.budget {
			return rBudget
		}
		f.emis = pieceEmissions(s, q.devices, hours)
		f.rel, f.notPref = s.reliability, uint8(notPreferred(q, s))
		return rFit
	}
	free, at := int64(s.devices), lo
	if s.committed > 0 && int64(s.spansEnd)+compactEpoch > lo {
		free, at = maxFree(q.spansOf(s), slotShape(s), lo, hi, hours*3600)
	}
	if free < q.minPiece {
		return rBooked
	}
	f.avail, f.start = min(free, q.devices), at
	if q.budget > 0 && int64(pieceCost(s, q, q.minPiece, hours, intr).Total) > q.budget {
		return rBudget
	}
	return rFit
}

// slotShape is the offer's nodes.
func slotShape(s *slot) shape {
	return shape{nodes: int64(s.devices) / int64(s.dpn), dpn: int64(s.dpn)}
}

// roomAlways reports whether a gang of devices fits on s whenever its
// commitments lie: when every node keeps room for it even with all of them
// on one node (committed ≤ a node's devices − wanted), or when there are
// too few spans (each on one node) to leave too few nodes idle. Counted in
// devices (spans × per node against the offer's devices), it divides only
// for a gang over nodes.
func roomAlways(s *slot, devices int64) bool {
	dpn, busy := int64(s.dpn), int64(s.spanN)*int64(s.dpn)
	if devices > dpn {
		return int64(s.devices)-busy >= wholeNodes(devices, dpn)*dpn
	}
	return int64(s.committed) <= dpn-devices || busy < int64(s.devices)
}

// source is what the engine runs over: the index's buckets, or all of its
// offers one by one (the plain scan).
type source interface {
	// runs appends to out the runs of slots that may fit, and adds to
	// counts the offers it skipped wholesale, by reason.
	runs(q *query, counts *[numReasons]int, out [][]slot) [][]slot
	// spans is the arena the slots' commitments live in.
	spans() []span
	// versions is the table the slots' version ids refer to.
	versions() *versionTable
	size() int
	// rlock and runlock hold the source still for one run of the engine
	// (not across runs: writers get in between a request's relaxations).
	rlock()
	runlock()
	// bound is the bound of what the offers of run r can score, and
	// whether the source may stop early at all (the plain scan never does).
	// byPrice lists the positions in r's bucket of the offers that sell
	// interruptible capacity by on-demand price (see Index.byPrice).
	bound(r []slot) (b bucketBound, byPrice []uint32, ok bool)
}

// engine holds the tuning of the split search; the zero value is not
// ready, use newEngine.
type engine struct {
	evalBudget      int64 // most (offer, piece size) cost evaluations for the exact split
	dpBudget        int64 // most DP steps for the exact split
	boundedK        int   // offers kept, cheapest per device first, by the bounded split
	maxExactDevices int64
}

func newEngine() engine {
	return engine{evalBudget: 2_000_000, dpBudget: 40_000_000, boundedK: 48, maxExactDevices: 1024}
}

// run is the engine. With explain it also computes relaxations when
// nothing matched.
func (e *engine) run(src source, req Request, now time.Time, explain, stop bool, b Budget) (Result, error) {
	q, err := compile(req, now)
	if err != nil {
		return Result{}, err
	}
	defer putQuery(q)
	limit := -1
	if b.Offers > 0 {
		limit = b.Offers
	}
	res, _, _ := e.runQuery(src, q, limit, stop)
	if explain && len(res.Quotes) == 0 {
		var cut bool
		perRun, total := b.relaxBudget()
		res.Explanation.Relaxations, cut = e.relax(src, q, now, perRun, total)
		res.Explanation.Cut.Relaxations = cut
	}
	return res, nil
}

// scratch buffers reused across queries.
type scratch struct {
	counts [numReasons]int
	runs   [][]slot
	fits   []fit
	cands  []quoteCand
	top    []scored
	walk   []walkRun // a gang walk's runs
	heap   []int     // and their heap
}

// runQuery evaluates every offer, or with a limit ≥ 0 at most limit
// offers, those with the lowest prices (see Budget), and builds the ranked
// quotes. With stop, a gang request over a source that allows it walks
// the offers in price order and stops once none left could rank (see
// walkGang); relaxations run without, as their counts must be exact. It
// also returns the cheapest and earliest-ending feasible quotes' figures
// (over the offers evaluated), which relaxations use, and how many offers
// it evaluated. In steady state it allocates only the result: the quotes,
// their pieces (one array) and the eliminations.
func (e *engine) runQuery(src source, q *query, limit int, stop bool) (Result, extremes, int) {
	sc := getScratch()
	defer putScratch(sc)
	src.rlock()
	defer src.runlock()
	// In the scratch, not on the stack: it goes through an interface call.
	counts := &sc.counts
	*counts = [numReasons]int{}
	q.arena = src.spans()
	vt := src.versions()
	q.vrank = vt.rank
	q.minDriver = vt.atLeast(q.req.Constraints.MinDriverVersion)
	q.minCUDA = vt.atLeast(q.req.Constraints.MinCUDAVersion)
	sc.runs = src.runs(q, counts, sc.runs[:0])
	visit := 0
	for _, run := range sc.runs {
		visit += len(run)
	}
	var cut Cut
	switch {
	case limit < 0 || visit <= limit:
	case limit == 0:
		sc.runs, cut = sc.runs[:0], Cut{Unexamined: visit}
		visit = 0
	default:
		sc.runs, cut = cutRuns(sc.runs, limit, visit)
		visit = limit
	}
	// Room for every offer up front: fits never move, so gang candidates
	// can point at them as they are found.
	fits := sc.fits[:0]
	if cap(fits) < visit {
		fits = make([]fit, 0, visit)
	}
	var xt extremes
	rk := ranker{q: q, top: sc.top[:0]}
	rk.init()
	cands := sc.cands[:0]
	skipped := 0
	if !q.split {
		w := gangWalk{q: q, rk: &rk, counts: counts, fits: fits, cands: cands, xt: &xt}
		if stop && len(sc.runs) > 0 {
			skipped = w.merged(src, sc.runs, sc)
		} else {
			w.inOrder(sc.runs)
		}
		fits, cands = w.fits, w.cands
		visit -= skipped
	} else {
		for _, run := range sc.runs {
			for i := range run {
				f := fits[len(fits) : len(fits)+1]
				if r := q.eval(&run[i], &f[0]); r != rFit {
					counts[r]++
					continue
				}
				fits = fits[:len(fits)+1]
			}
		}
	}
	sc.fits = fits
	ex := Explanation{Considered: src.size(), Fit: len(fits), Cut: cut, Skipped: skipped}
	n := 0
	for _, c := range counts {
		if c > 0 {
			n++
		}
	}
	if n > 0 {
		ex.Eliminated = make([]Elimination, 0, n)
	}
	for i, c := range counts {
		if c == 0 {
			continue
		}
		// Most first, ties in constraint order (a stable insertion).
		el := Elimination{Constraint: reasons[i].c, Label: reasons[i].label, Count: c}
		k := len(ex.Eliminated)
		ex.Eliminated = append(ex.Eliminated, el)
		for k > 0 && ex.Eliminated[k-1].Count < c {
			ex.Eliminated[k] = ex.Eliminated[k-1]
			k--
		}
		ex.Eliminated[k] = el
	}

	if q.split {
		cands, ex.Shortfall = e.splitCands(q, fits, cands)
		for i := range cands {
			c := &cands[i]
			if !xt.ok || c.cost < xt.minCost {
				xt.minCost = c.cost
			}
			if !xt.ok || c.end < xt.minEnd {
				xt.minEnd = c.end
			}
			xt.ok = true
		}
		rk.minCost = xt.minCost
		for i := range cands {
			if sc := rk.score(&cands[i].metrics, cands[i].carbonMilli); rk.mayEnter(sc) {
				rk.add(cands, i, sc)
			}
		}
	}
	sc.cands = cands
	res := Result{Total: len(fits), Explanation: ex, Exhaustive: cut.Unexamined == 0 && skipped == 0}
	if q.split {
		res.Total = len(cands)
	}
	res.Quotes = rk.quotes(cands)
	sc.top = rk.top[:0]
	return res, xt, visit
}

// gangWalk evaluates a gang request's offers and ranks its fits as it
// goes. A gang's candidates are its fits, and a quote candidate is only
// built for a fit that ranks, not for all of them.
type gangWalk struct {
	q      *query
	rk     *ranker
	counts *[numReasons]int
	fits   []fit // with room for every offer: candidates point into it
	cands  []quoteCand
	xt     *extremes
	ranked int // fits[:ranked] have been offered to the ranker
}

// eval evaluates s and keeps its fit.
func (w *gangWalk) eval(s *slot) {
	f := w.fits[len(w.fits) : len(w.fits)+1]
	if r := w.q.eval(s, &f[0]); r != rFit {
		w.counts[r]++
		return
	}
	w.fits = w.fits[:len(w.fits)+1]
	xt := w.xt
	if end := f[0].start + f[0].hours()*3600; !xt.ok || end < xt.minEnd {
		xt.minEnd = end
	}
	if !xt.ok || f[0].cost < xt.minCost {
		xt.minCost = f[0].cost
	}
	xt.ok = true
}

// rank offers the fits not yet ranked to the ranker; the cheapest
// feasible cost must be known (see ranker.minCost).
func (w *gangWalk) rank() {
	for i := w.ranked; i < len(w.fits); i++ {
		f := &w.fits[i]
		m := gangMetrics(w.q, f)
		if sc := w.rk.score(&m, int64(f.s.carbon)*1000); w.rk.mayEnter(sc) {
			w.cands = append(w.cands, gangCand(w.q, f))
			w.rk.add(w.cands, len(w.cands)-1, sc)
		}
	}
	w.ranked = len(w.fits)
}

// inOrder evaluates every offer of runs, run by run, then ranks.
func (w *gangWalk) inOrder(runs [][]slot) {
	for _, run := range runs {
		for i := range run {
			w.eval(&run[i])
		}
	}
	w.rk.minCost = w.xt.minCost
	w.rank()
}

// walkRun is a run being walked: its next offer, and what bounds the
// scores of the offers left in it. A run is walked in the order of the
// price its offers are booked at: the run's own order, or, for a request
// that does not allow interruption, as two walk runs — the offers that
// sell only on demand in the run's order (skipping the others), and those
// that also sell interruptible capacity in order of their on-demand price
// (through perm, positions in the run's bucket; those past the run are
// not the run's).
type walkRun struct {
	run      []slot
	perm     []uint32 // nil: the run's order
	skipIntr bool     // in the run's order, skip offers selling interruptible capacity
	pos      int      // the next position in run or perm
	cur      int      // the next offer, run[cur]
	hours    int64    // the fewest hours any of its offers takes
	rest     int64    // the least its offers' terms other than cost add to a score
	// low is an offer of the run's bucket at the best of everything its
	// bucket's offers have (see bucketBound), priced at the next offer's
	// booked price: no offer from the next on costs less.
	low  slot
	cost int64 // low's effective cost: key
}

// key is the least effective cost of the run's next offer and every one
// after it.
func (r *walkRun) key() int64 { return r.cost }

// advance moves to the next offer and reports whether there is one.
// Every item of the effective cost is non-decreasing in the price, the
// hours, the storage and egress prices and the provisioning time, and
// non-increasing in reliability (interruptions only add); so low, priced
// at the booked price of the next offer, which is at most that of any
// offer after it in the walk's order, bounds every offer left.
func (r *walkRun) advance(q *query) bool {
	for {
		if r.perm != nil {
			if r.pos >= len(r.perm) {
				return false
			}
			r.cur = int(r.perm[r.pos])
			r.pos++
			if r.cur >= len(r.run) {
				continue
			}
		} else {
			if r.pos >= len(r.run) {
				return false
			}
			r.cur = r.pos
			r.pos++
			if r.skipIntr && r.run[r.cur].flags&flagInterruptible != 0 {
				continue
			}
		}
		break
	}
	s := &r.run[r.cur]
	p := s.price
	if q.allowIntr {
		p = s.intrPrice
	}
	if p != r.low.price {
		r.low.price, r.low.intrPrice = p, p
		r.cost = int64(pieceCost(&r.low, q, q.devices, r.hours, false).Total)
	}
	return true
}

// merged walks the runs merged by key, lowest first, and stops once no
// offer left can rank. It returns how many it left unevaluated.
//
// Why the top quotes stay exact: no offer left in a run costs less than
// its key (see walkRun.advance), so none left at all costs less than the
// smallest key. Once that is at least the cheapest cost found, the
// cheapest feasible cost is known, and with it every score (scores are on
// fixed scales, see ranker). An offer left in run r then scores at least
// the cost term of r's key plus r's rest (carbon, reliability and
// preference bounded by the bucket's best; start and providers by zero).
// Once that is over the last kept quote's score for every run, no offer
// left can rank, ties included.
func (w *gangWalk) merged(src source, runs [][]slot, sc *scratch) int {
	q, rk := w.q, w.rk
	ws := sc.walk[:0]
	for _, run := range runs {
		b, perm, ok := src.bound(run)
		if !ok {
			w.inOrder(runs)
			return 0
		}
		r := walkRun{run: run, hours: q.hours}
		if r.hours == 0 {
			den := q.devices * int64(max(b.maxRel, 1))
			r.hours = (q.workMilli + den - 1) / den
		}
		r.rest = q.weights[mCarbon]*int64(b.minCarbon)*1000 +
			q.weights[mUnreliability]*(10000-int64(b.maxReliability))*100 +
			q.weights[mNotPreferred]*notPreferred(q, &run[0])*1_000_000
		r.low = slot{acc: run[0].acc, region: run[0].region, reliability: b.maxReliability,
			storageC: b.minStorage, egressC: b.minEgress, provMins: b.minProvMins}
		if q.allowIntr || len(perm) == 0 {
			if r.advance(q) {
				ws = append(ws, r)
			}
			continue
		}
		r.skipIntr = true
		if r.advance(q) {
			ws = append(ws, r)
		}
		r.skipIntr, r.perm, r.pos, r.low.price = false, perm, 0, 0
		if r.advance(q) {
			ws = append(ws, r)
		}
	}
	total := 0
	for _, run := range runs {
		total += len(run)
	}
	sc.walk = ws
	h := walkHeap{ws: ws, idx: sc.heap[:0]}
	for i := range ws {
		h.push(i)
	}
	defer func() { sc.heap = h.idx[:0] }()
	ready := q.weights[mCost] == 0 // else the cheapest cost must be known first
	lastKey, sinceCheck, evaluated := int64(-1), 0, 0
	for len(h.idx) > 0 {
		r := &ws[h.idx[0]]
		// Check where the frontier moves up, and not more often than
		// once per few runs' worth of offers (the check reads every run).
		if key := r.key(); key > lastKey && sinceCheck*4 >= len(h.idx) {
			lastKey, sinceCheck = key, 0
			if !ready && w.xt.ok && key >= w.xt.minCost {
				ready, rk.minCost = true, w.xt.minCost
			}
			if ready {
				w.rank()
				if kth, full := rk.last(); full && w.leftBound(&h) > kth {
					return total - evaluated
				}
			}
		}
		s := &r.run[r.cur]
		if r.advance(q) {
			h.down(0)
		} else {
			h.pop()
		}
		w.eval(s)
		sinceCheck++
		evaluated++
	}
	rk.minCost = w.xt.minCost
	w.rank()
	return 0
}

// leftBound is the least score any offer left in the walk can reach.
func (w *gangWalk) leftBound(h *walkHeap) int64 {
	q, rk := w.q, w.rk
	best := int64(-1)
	for _, i := range h.idx {
		r := &h.ws[i]
		b := r.rest
		if wc := q.weights[mCost]; wc != 0 {
			b += wc * rk.costTerm(r.key())
		}
		if best < 0 || b < best {
			best = b
		}
	}
	return best
}

// walkHeap is a binary min-heap of runs by key.
type walkHeap struct {
	ws  []walkRun
	idx []int
}

func (h *walkHeap) less(a, b int) bool {
	ka, kb := h.ws[h.idx[a]].key(), h.ws[h.idx[b]].key()
	if ka != kb {
		return ka < kb
	}
	return h.idx[a] < h.idx[b]
}

func (h *walkHeap) swap(a, b int) { h.idx[a], h.idx[b] = h.idx[b], h.idx[a] }

func (h *walkHeap) push(i int) {
	h.idx = append(h.idx, i)
	for k := len(h.idx) - 1; k > 0; {
		p := (k - 1) / 2
		if !h.less(k, p) {
			break
		}
		h.swap(k, p)
		k = p
	}
}

func (h *walkHeap) pop() {
	last := len(h.idx) - 1
	h.swap(0, last)
	h.idx = h.idx[:last]
	if last > 0 {
		h.down(0)
	}
}

func (h *walkHeap) down(k int) {
	n := len(h.idx)
	for {
		c := 2*k + 1
		if c >= n {
			return
		}
		if c+1 < n && h.less(c+1, c) {
			c++
		}
		if !h.less(c, k) {
			return
		}
		h.swap(c, k)
		k = c
	}
}

// extremes are the cheapest cost and the earliest end over feasible quotes.
type extremes struct {
	ok      bool
	minCost int64
	minEnd  int64
}

// quoteCand is a feasible quote before ranking: pieces as (fit, devices,
// start) plus the ranking metrics.
type quoteCand struct {
	one     pieceRef
	more    []pieceRef // split pieces; nil for a single piece
	cost    int64
	metrics [numMetrics]int64
	end     int64
	exact   bool
	lower   int64
	// carbonMilli is the pieces' carbon intensity in mg per kWh, weighted
	// by their energy: the carbon term of the score.
	carbonMilli int64
	// left is the devices the pieces' placements leave free on the nodes
	// they use (see ranker.leftover), once leftKnown.
	left      int64
	leftKnown bool
}

type pieceRef struct {
	f       *fit
	devices int64
	start   int64
}

func (c *quoteCand) npieces() int {
	if c.more != nil {
		return len(c.more)
	}
	return 1
}

func (c *quoteCand) piece(i int) *pieceRef {
	if c.more != nil {
		return &c.more[i]
	}
	return &c.one
}

// Ranking metrics, lower is better for each.
const (
	mCost = iota
	mCarbon
	mUnreliability
	mStart
	mProviders
	mNotPreferred
	numMetrics
)

// gangMetrics are the ranking metrics of a gang quote on fit f.
func gangMetrics(q *query, f *fit) [numMetrics]int64 {
	return [numMetrics]int64{
		mCost:          f.cost,
		mCarbon:        f.emis,
		mUnreliability: 10000 - int64(f.rel),
		mStart:         f.start - q.lo,
		mProviders:     1,
		mNotPreferred:  int64(f.notPref) * 1000,
	}
}

// onePieceMetrics are the ranking metrics of a one-piece quote: all the
// request's devices on s from start, costing cost.
func onePieceMetrics(q *query, s *slot, hours, start, cost int64) [numMetrics]int64 {
	return [numMetrics]int64{
		mCost:          cost,
		mCarbon:        pieceEmissions(s, q.devices, hours),
		mUnreliability: 10000 - int64(s.reliability),
		mStart:         start - q.lo,
		mProviders:     1,
		mNotPreferred:  notPreferred(q, s) * 1000,
	}
}

func gangCand(q *query, f *fit) quoteCand {
	return quoteCand{one: pieceRef{f: f, devices: q.devices, start: f.start}, cost: f.cost, exact: true,
		end: f.start + f.hours()*3600, metrics: gangMetrics(q, f), carbonMilli: int64(f.s.carbon) * 1000}
}

func notPreferred(q *query, s *slot) int64 {
	if q.prefAcc.has(s.acc) || q.prefReg.has(s.region) {
		return 0
	}
	return 1
}

// multiCand builds a quote candidate from split pieces.
func multiCand(q *query, ps []pieceRef, exact bool, lower int64) quoteCand {
	c := quoteCand{more: ps, exact: exact, lower: lower}
	var rel, notPref, devs, grams, wh int64
	providers := map[int64]bool{}
	c.metrics[mStart] = -1
	for _, p := range ps {
		s := p.f.s
		c.cost += int64(pieceCost(s, q, p.devices, p.f.hours(), p.f.intr).Total)
		c.metrics[mCarbon] += pieceEmissions(s, p.devices, p.f.hours())
		energy := int64(accelerators[s.acc].TDPWatts) * p.devices * p.f.hours()
		grams += energy * int64(s.carbon)
		wh += energy
		rel += p.devices * int64(s.reliability)
		notPref += p.devices * notPreferred(q, s)
		devs += p.devices
		providers[s.provider] = true
		if e := p.start + p.f.hours()*3600; e > c.end {
			c.end = e
		}
		if d := p.start - q.lo; c.metrics[mStart] < 0 || d < c.metrics[mStart] {
			c.metrics[mStart] = d
		}
	}
	c.metrics[mCost] = c.cost
	c.metrics[mUnreliability] = 10000 - rel/devs
	c.metrics[mProviders] = int64(len(providers))
	c.metrics[mNotPreferred] = notPref * 1000 / devs
	if wh > 0 {
		c.carbonMilli = MulDivRound(grams, 1000, wh)
	}
	return c
}

// splitCands returns the quote candidates of a split job: every offer that
// can take the whole job alone, plus the cheapest combination (per region
// for inference that may not spread).
func (e *engine) splitCands(q *query, fits []fit, cands []quoteCand) ([]quoteCand, string) {
	for i := range fits {
		f := &fits[i]
		if f.avail < q.devices {
			continue
		}
		start, ok := earliestStart(q.spansOf(f.s), slotShape(f.s), layoutSpread, q.devices, f.lo, f.hi, f.hours()*3600)
		if !ok {
			continue
		}
		c := multiCandOne(q, f, start)
		if q.budget > 0 && c.cost > q.budget {
			continue
		}
		cands = append(cands, c)
	}
	if len(fits) == 0 {
		return cands, ""
	}
	groups := [][]*fit{nil}
	if q.req.Workload.Kind == WorkInference && !q.req.Workload.SpreadRegions {
		byRegion := map[uint8]int{}
		groups = groups[:0]
		for i := range fits {
			r := fits[i].s.region
			g, ok := byRegion[r]
			if !ok {
				g = len(groups)
				byRegion[r] = g
				groups = append(groups, nil)
			}
			groups[g] = append(groups[g], &fits[i])
		}
	} else {
		for i := range fits {
			groups[0] = append(groups[0], &fits[i])
		}
	}
	shortfall := ""
	var best int64 = -1
	for _, g := range groups {
		ps, exact, lower, ok := e.solveSplit(q, g)
		if !ok {
			continue
		}
		if len(ps) == 1 {
			continue // the same as that offer's single-piece quote
		}
		c := multiCand(q, ps, exact, lower)
		if best < 0 || c.cost < best {
			best = c.cost
		}
		if q.budget > 0 && c.cost > q.budget {
			continue
		}
		cands = append(cands, c)
	}
	if len(cands) == 0 {
		switch {
		case best > q.budget && q.budget > 0:
			shortfall = fmt.Sprintf("The cheapest combination costs %s, over the budget of %s.", Cents(best), Cents(q.budget))
		default:
			var free int64
			for i := range fits {
				free += fits[i].avail
			}
			shortfall = fmt.Sprintf("The offers that fit have %d devices free at once (in pieces of at least %d) where %d are needed.", free, q.minPiece, q.devices)
		}
	}
	return cands, shortfall
}

func multiCandOne(q *query, f *fit, start int64) quoteCand {
	cost := int64(pieceCost(f.s, q, q.devices, f.hours(), f.intr).Total)
	return quoteCand{one: pieceRef{f: f, devices: q.devices, start: start}, cost: cost, exact: true,
		end: start + f.hours()*3600, metrics: onePieceMetrics(q, f.s, f.hours(), start, cost), carbonMilli: int64(f.s.carbon) * 1000}
}

// solveSplit chooses devices d_o ∈ {0} ∪ [minPiece, avail_o] per offer with
// Σ d_o = devices, minimising Σ cost_o(d_o). See docs/matcher.md.
//
// Exact path: an optimal split has at most P = devices/minPiece pieces, so
// for each piece size d only the P offers cheapest at size d can appear in
// it (exchange argument); a DP over device counts on the union of those
// offers is then exact. When that is too large, the bounded path keeps the
// boundedK offers with the lowest cost per device at full use and runs the
// same DP on them; its quote carries the LP lower bound.
func (e *engine) solveSplit(q *query, fits []*fit) ([]pieceRef, bool, int64, bool) {
	var total int64
	for _, f := range fits {
		total += f.avail
	}
	if total < q.devices {
		return nil, false, 0, false
	}
	sizes := q.devices - q.minPiece + 1
	exact := q.devices <= e.maxExactDevices && int64(len(fits))*sizes <= e.evalBudget
	var lower int64
	pool := fits
	if !exact {
		pool, lower = e.bounded(q, fits)
	}
	red := reduce(q, pool)
	steps := int64(len(red)) * (q.devices + 1) * sizes
	if steps > e.dpBudget {
		if exact {
			exact = false
			pool, lower = e.bounded(q, fits)
			red = reduce(q, pool)
		}
		if int64(len(red))*(q.devices+1)*sizes > e.dpBudget*4 {
			return greedySplit(q, pool, lower)
		}
	}
	ps, ok := dpSplit(q, red)
	if !ok && !exact {
		return greedySplit(q, fits, lower)
	}
	return ps, exact, lower, ok
}

// roundingSlackPerPiece is the most, in cents, by which a piece's cost
// can fall below its share of the full offer's cost (see bounded).
const roundingSlackPerPiece = 3

// unitLess orders fits by cost per device at full use, then id.
func unitLess(q *query, a, b *fit, ca, cb int64) bool {
	l, r := ca*b.avail, cb*a.avail
	if l != r {
		return l < r
	}
	return a.s.id < b.s.id
}

// bounded keeps the boundedK offers cheapest per device at full use and
// computes the LP lower bound over all fits: fill devices fractionally in
// that order. A piece's cost is a part fixed per piece (storage, egress),
// a part exactly linear in devices (instance) and three items linear in
// devices before each is rounded once (orchestration, failed work,
// restart); rounding moves each by at most ½¢, so for d ≤ a
// d·round(a·x)/a − round(d·x) ≤ ½·d/a + ½ ≤ 1¢ per item and
// cost_o(d) ≥ d·cost_o(a)/a − 3¢. The bound minus 3¢ per possible piece is
// therefore below every split's cost.
func (e *engine) bounded(q *query, fits []*fit) ([]*fit, int64) {
	type uc struct {
		f *fit
		c int64
	}
	us := make([]uc, len(fits))
	for i, f := range fits {
		us[i] = uc{f, int64(pieceCost(f.s, q, f.avail, f.hours(), f.intr).Total)}
	}
	sort.Slice(us, func(i, j int) bool { return unitLess(q, us[i].f, us[j].f, us[i].c, us[j].c) })
	var lb, need = int64(0), q.devices
	for _, u := range us {
		if need == 0 {
			break
		}
		take := min(need, u.f.avail)
		lb += u.c * take / u.f.avail
		need -= take
	}
	lb -= roundingSlackPerPiece * (q.devices / q.minPiece)
	if lb < 0 {
		lb = 0
	}
	k := min(len(us), e.boundedK)
	out := make([]*fit, k)
	for i := range out {
		out[i] = us[i].f
	}
	return out, lb
}

// reduce keeps, for every piece size d, the P offers cheapest at size d.
func reduce(q *query, fits []*fit) []*fit {
	p := int(q.devices / q.minPiece)
	if len(fits) <= p {
		return sortByID(fits)
	}
	keep := map[*fit]bool{}
	type fc struct {
		f *fit
		c int64
	}
	top := make([]fc, 0, p+1)
	for d := q.minPiece; d <= q.devices; d++ {
		top = top[:0]
		for _, f := range fits {
			if f.avail < d {
				continue
			}
			c := int64(pieceCost(f.s, q, d, f.hours(), f.intr).Total)
			if len(top) == p && (c > top[p-1].c || (c == top[p-1].c && f.s.id > top[p-1].f.s.id)) {
				continue
			}
			i := sort.Search(len(top), func(i int) bool {
				return top[i].c > c || (top[i].c == c && top[i].f.s.id > f.s.id)
			})
			top = append(top, fc{})
			copy(top[i+1:], top[i:])
			top[i] = fc{f, c}
			if len(top) > p {
				top = top[:p]
			}
		}
		for _, t := range top {
			keep[t.f] = true
		}
	}
	out := make([]*fit, 0, len(keep))
	for f := range keep {
		out = append(out, f)
	}
	return sortByID(out)
}

func sortByID(fits []*fit) []*fit {
	out := append([]*fit(nil), fits...)
	sort.Slice(out, func(i, j int) bool { return out[i].s.id < out[j].s.id })
	return out
}

// dpSplit is the exact DP over device counts: best[j] is the cheapest way
// to place j devices on the offers seen so far.
func dpSplit(q *query, fits []*fit) ([]pieceRef, bool) {
	n, D := len(fits), q.devices
	const inf = int64(1) << 62
	best := make([]int64, D+1)
	next := make([]int64, D+1)
	choice := make([]int32, n*int(D+1))
	for j := range best {
		best[j] = inf
	}
	best[0] = 0
	costs := make([]int64, D+1)
	for i, f := range fits {
		top := min(f.avail, D)
		for d := q.minPiece; d <= top; d++ {
			costs[d] = int64(pieceCost(f.s, q, d, f.hours(), f.intr).Total)
		}
		copy(next, best)
		row := choice[i*int(D+1):]
		for j := int64(0); j <= D; j++ {
			if best[j] == inf {
				continue
			}
			for d := q.minPiece; d <= top && j+d <= D; d++ {
				if c := best[j] + costs[d]; c < next[j+d] {
					next[j+d] = c
					row[j+d] = int32(d)
				}
			}
		}
		best, next = next, best
	}
	if best[D] == inf {
		return nil, false
	}
	var ps []pieceRef
	j := D
	for i := n - 1; i >= 0; i-- {
		d := int64(choice[i*int(D+1)+int(j)])
		if d == 0 {
			continue
		}
		f := fits[i]
		start, ok := earliestStart(q.spansOf(f.s), slotShape(f.s), layoutSpread, d, f.lo, f.hi, f.hours()*3600)
		if !ok {
			return nil, false // cannot happen: d ≤ avail
		}
		ps = append(ps, pieceRef{f: f, devices: d, start: start})
		j -= d
	}
	sort.Slice(ps, func(a, b int) bool { return ps[a].f.s.id < ps[b].f.s.id })
	return ps, true
}

// greedySplit fills devices cheapest per device first, keeping every piece
// at least the minimum. Used only beyond the DP's limits.
func greedySplit(q *query, fits []*fit, lower int64) ([]pieceRef, bool, int64, bool) {
	type uc struct {
		f *fit
		c int64
	}
	us := make([]uc, len(fits))
	for i, f := range fits {
		us[i] = uc{f, int64(pieceCost(f.s, q, f.avail, f.hours(), f.intr).Total)}
	}
	sort.Slice(us, func(i, j int) bool { return unitLess(q, us[i].f, us[j].f, us[i].c, us[j].c) })
	need := q.devices
	var ps []pieceRef
	for _, u := range us {
		if need == 0 {
			break
		}
		take := min(need, u.f.avail)
		if rest := need - take; rest > 0 && rest < q.minPiece {
			take = need - q.minPiece
		}
		if take < q.minPiece {
			continue
		}
		start, ok := earliestStart(q.spansOf(u.f.s), slotShape(u.f.s), layoutSpread, take, u.f.lo, u.f.hi, u.f.hours()*3600)
		if !ok {
			continue
		}
		ps = append(ps, pieceRef{f: u.f, devices: take, start: start})
		need -= take
	}
	if need != 0 {
		return nil, false, 0, false
	}
	sort.Slice(ps, func(a, b int) bool { return ps[a].f.s.id < ps[b].f.s.id })
	return ps, false, lower, true
}

// scored is a candidate (an index into the candidates) with its score.
type scored struct {
	i int
	s int64
}

// Score scales: each term of a score is on a fixed scale, not normalised
// over the feasible set, so an offer's score does not depend on which
// other offers fit — only on the cheapest feasible cost — and a bound on
// the score of offers not yet seen is possible (see gangWalk.merged). A
// term of scoreUnit is, in each metric: cost twice the cheapest quote's
// (100 % dearer); a carbon intensity of 1,000 g CO2e per kWh; 100
// percentage points of unreliability; a start delayed by the whole
// window (the deadline less the earliest start, or a week without a
// deadline); ten providers beyond the first; every device off the
// preferred models and regions.
const (
	scoreUnit        = 1_000_000
	noDeadlineWindow = 7 * 24 * 3600
	perProvider      = scoreUnit / 10
)

// ranker keeps the best Limit candidates by the weighted sum of the
// metrics on fixed scales. Ties: score, cost, start, providers, the
// devices the placement holds, its leftover, then the pieces' offer ids
// and devices — a total order, so output is stable.
type ranker struct {
	q *query
	// minCost is the cheapest feasible quote's cost, which the cost term
	// is relative to; it must be set before a score with a cost weight is
	// taken.
	minCost int64
	window  int64 // seconds the start term counts scoreUnit over
	top     []scored
}

func (r *ranker) init() {
	r.window = noDeadlineWindow
	if q := r.q; q.deadline > 0 {
		r.window = max(1, q.deadline-q.lo)
	}
}

// costTerm is the cost term of a quote costing cost (≥ minCost): the
// share it costs over the cheapest, in millionths, rounded half up. It
// never falls as cost rises.
func (r *ranker) costTerm(cost int64) int64 {
	return MulDivRound(cost-r.minCost, scoreUnit, max(r.minCost, 1))
}

// score is the weighted sum of the terms; lower is better.
func (r *ranker) score(m *[numMetrics]int64, carbonMilli int64) int64 {
	w := &r.q.weights
	var s int64
	if w[mCost] != 0 {
		s += w[mCost] * r.costTerm(m[mCost])
	}
	s += w[mCarbon] * carbonMilli
	s += w[mUnreliability] * m[mUnreliability] * (scoreUnit / 10000)
	if w[mStart] != 0 {
		s += w[mStart] * MulDivRound(m[mStart], scoreUnit, r.window)
	}
	s += w[mProviders] * (m[mProviders] - 1) * perProvider
	s += w[mNotPreferred] * m[mNotPreferred] * (scoreUnit / 1000)
	return s
}

// last is the score of the Limit-th kept candidate, once there are Limit.
func (r *ranker) last() (int64, bool) {
	if limit := r.q.req.Limit; len(r.top) == limit {
		return r.top[limit-1].s, true
	}
	return 0, false
}

// mayEnter reports whether a candidate scoring sc may still rank: a
// worse score than the last kept cannot (the last score only falls).
func (r *ranker) mayEnter(sc int64) bool {
	last, full := r.last()
	return !full || sc <= last
}

// add keeps cands[i], which scores sc, if it ranks.
func (r *ranker) add(cands []quoteCand, i int, score int64) {
	limit := r.q.req.Limit
	c := &cands[i]
	sc := scored{i, score}
	if len(r.top) == limit && !r.less(c, sc.s, &cands[r.top[limit-1].i], r.top[limit-1].s) {
		return
	}
	k := sort.Search(len(r.top), func(k int) bool { return r.less(c, sc.s, &cands[r.top[k].i], r.top[k].s) })
	if len(r.top) < limit {
		r.top = append(r.top, scored{})
	}
	copy(r.top[k+1:], r.top[k:])
	r.top[k] = sc
}

// quotes builds the kept candidates' quotes, best first: two allocations,
// the quotes and one array for all their pieces.
func (r *ranker) quotes(cands []quoteCand) []Quote {
	if len(r.top) == 0 {
		return nil
	}
	npieces := 0
	for _, t := range r.top {
		npieces += cands[t.i].npieces()
	}
	pieces := make([]Piece, npieces)
	out := make([]Quote, len(r.top))
	for i, t := range r.top {
		c := &cands[t.i]
		n := c.npieces()
		out[i] = buildQuote(r.q, c, t.s, pieces[:n:n])
		out[i].Rank = i + 1
		pieces = pieces[n:]
	}
	return out
}

// less orders candidates: score, cost, start, providers, then the
// placement that keeps the fewest devices out of sale (so leaves the most
// to sell: a gang on whole nodes holds the devices it does not use), then
// the one that leaves the fewest devices free on the nodes it uses (it
// fits the tightest fragment, so the larger free blocks stay whole), then
// the pieces' offer ids and devices.
func (r *ranker) less(a *quoteCand, sa int64, b *quoteCand, sb int64) bool {
	if sa != sb {
		return sa < sb
	}
	if a.cost != b.cost {
		return a.cost < b.cost
	}
	if a.metrics[mStart] != b.metrics[mStart] {
		return a.metrics[mStart] < b.metrics[mStart]
	}
	if a.metrics[mProviders] != b.metrics[mProviders] {
		return a.metrics[mProviders] < b.metrics[mProviders]
	}
	if ha, hb := r.held(a), r.held(b); ha != hb {
		return ha < hb
	}
	if la, lb := r.leftover(a), r.leftover(b); la != lb {
		return la < lb
	}
	na, nb := a.npieces(), b.npieces()
	for i := 0; i < na && i < nb; i++ {
		pa, pb := a.piece(i), b.piece(i)
		if pa.f.s.id != pb.f.s.id {
			return pa.f.s.id < pb.f.s.id
		}
		if pa.devices != pb.devices {
			return pa.devices < pb.devices
		}
	}
	return na < nb
}

// held is the devices c's pieces take out of sale: their own, and for a
// gang on whole nodes all the devices of those nodes.
func (r *ranker) held(c *quoteCand) int64 {
	var n int64
	for i := 0; i < c.npieces(); i++ {
		p := c.piece(i)
		dpn := int64(p.f.s.dpn)
		if layoutOf(!r.q.split, p.devices, dpn) == layoutWhole {
			n += wholeNodes(p.devices, dpn) * dpn
		} else {
			n += p.devices
		}
	}
	return n
}

// leftover is the devices c's pieces, placed as a booking would place them
// (see place), leave free on the nodes they use. Only ties on cost, start
// and providers need it, so it is computed then, once per candidate.
func (r *ranker) leftover(c *quoteCand) int64 {
	if c.leftKnown {
		return c.left
	}
	var left int64
	for i := 0; i < c.npieces(); i++ {
		p := c.piece(i)
		sh := slotShape(p.f.s)
		left += placeLeft(r.q.spansOf(p.f.s), sh, layoutOf(!r.q.split, p.devices, sh.dpn), p.devices, p.start, p.start+p.f.hours()*3600)
	}
	c.left, c.leftKnown = left, true
	return left
}

// buildQuote fills pieces (one per candidate piece) and returns the quote.
func buildQuote(q *query, c *quoteCand, score int64, pieces []Piece) Quote {
	qt := Quote{Score: score, Exact: c.exact, LowerBound: Cents(c.lower), EmissionsG: c.metrics[mCarbon],
		ReliabilityBP: int(10000 - c.metrics[mUnreliability]), Providers: int(c.metrics[mProviders]), Pieces: pieces}
	var delivered int64
	for i := 0; i < c.npieces(); i++ {
		p := c.piece(i)
		s := p.f.s
		cost := pieceCost(s, q, p.devices, p.f.hours(), p.f.intr)
		price := s.price
		if p.f.intr {
			price = s.intrPrice
		}
		pc := Piece{
			OfferID: s.id, ProviderID: s.provider,
			AcceleratorID: accelerators[s.acc].ID, RegionID: regions[s.region].ID,
			Devices: int(p.devices), Hours: int(p.f.hours()),
			Start: time.Unix(p.start, 0).UTC(), End: time.Unix(p.start+p.f.hours()*3600, 0).UTC(),
			Interruptible: p.f.intr, PriceCents: Cents(price), Cost: cost,
			EmissionsG: pieceEmissions(s, p.devices, p.f.hours()), Gang: !q.split,
		}
		qt.Pieces[i] = pc
		qt.Cost.add(cost)
		delivered += p.devices * p.f.hours() * int64(s.relThroughput)
		if qt.Start.IsZero() || pc.Start.Before(qt.Start) {
			qt.Start = pc.Start
		}
		if pc.End.After(qt.End) {
			qt.End = pc.End
		}
	}
	if delivered > 0 {
		qt.CentsPerRefDeviceHour = Cents(MulDivRound(int64(qt.Cost.Total), 1000, delivered))
	}
	return qt
}
