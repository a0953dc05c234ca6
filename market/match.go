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
	// Score is the weighted preference score; lower is better.
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
	// Total is the number of feasible quotes before Limit was applied.
	Total       int
	Explanation Explanation
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
}

// Summary reads like "0 of 1,240 offers fit: 812 wrong model, 301 too
// little memory".
func (e Explanation) Summary() string {
	var b strings.Builder
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
		verified: c.RequireVerified, minReliability: uint16(c.MinReliabilityBP), maxCarbon: uint16(c.MaxCarbonGPerKWh),
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
func (e *engine) run(src source, req Request, now time.Time, explain bool, b Budget) (Result, error) {
	q, err := compile(req, now)
	if err != nil {
		return Result{}, err
	}
	defer putQuery(q)
	limit := -1
	if b.Offers > 0 {
		limit = b.Offers
	}
	res, _, _ := e.runQuery(src, q, limit)
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
}

// runQuery evaluates every offer, or with a limit ≥ 0 at most limit
// offers, those with the lowest prices (see Budget), and builds the ranked
// quotes. It also returns the cheapest and earliest-ending feasible
// quotes' figures, which relaxations use, and how many offers it
// evaluated. In steady state it allocates only the result: the quotes,
// their pieces (one array) and the eliminations.
func (e *engine) runQuery(src source, q *query, limit int) (Result, extremes, int) {
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
	// A gang's candidates are its fits: their metrics' extent is taken
	// as they are found, and a quote candidate is only built for a fit
	// that may rank (see ranker), not for all of them.
	var lo, hi [numMetrics]int64
	for _, run := range sc.runs {
		for i := range run {
			f := fits[len(fits) : len(fits)+1]
			if r := q.eval(&run[i], &f[0]); r != rFit {
				counts[r]++
				continue
			}
			if !q.split {
				m := gangMetrics(q, &f[0])
				if len(fits) == 0 {
					lo, hi = m, m
				}
				for k, v := range m {
					lo[k], hi[k] = min(lo[k], v), max(hi[k], v)
				}
			}
			fits = fits[:len(fits)+1]
		}
	}
	sc.fits = fits
	ex := Explanation{Considered: src.size(), Fit: len(fits), Cut: cut}
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

	var xt extremes
	rk := ranker{q: q, top: sc.top[:0]}
	cands := sc.cands[:0]
	if !q.split {
		for i := range fits {
			f := &fits[i]
			if end := f.start + f.hours()*3600; !xt.ok || end < xt.minEnd {
				xt.minEnd = end
			}
			if !xt.ok || f.cost < xt.minCost {
				xt.minCost = f.cost
			}
			xt.ok = true
		}
		rk.init(lo, hi)
		for i := range fits {
			if m := gangMetrics(q, &fits[i]); rk.mayEnter(&m) {
				cands = append(cands, gangCand(q, &fits[i]))
				rk.add(cands, len(cands)-1)
			}
		}
	} else {
		cands, ex.Shortfall = e.splitCands(q, fits, cands)
		for i := range cands {
			c := &cands[i]
			if !xt.ok || c.cost < xt.minCost {
				xt.minCost = c.cost
			}
			if !xt.ok || c.end < xt.minEnd {
				xt.minEnd = c.end
			}
			if !xt.ok {
				lo, hi = c.metrics, c.metrics
			}
			for k, v := range c.metrics {
				lo[k], hi[k] = min(lo[k], v), max(hi[k], v)
			}
			xt.ok = true
		}
		rk.init(lo, hi)
		for i := range cands {
			if rk.mayEnter(&cands[i].metrics) {
				rk.add(cands, i)
			}
		}
	}
	sc.cands = cands
	res := Result{Total: len(fits), Explanation: ex}
	if q.split {
		res.Total = len(cands)
	}
	res.Quotes = rk.quotes(cands)
	sc.top = rk.top[:0]
	return res, xt, visit
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
		end: f.start + f.hours()*3600, metrics: gangMetrics(q, f)}
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
	var rel, notPref, devs int64
	providers := map[int64]bool{}
	c.metrics[mStart] = -1
	for _, p := range ps {
		s := p.f.s
		c.cost += int64(pieceCost(s, q, p.devices, p.f.hours(), p.f.intr).Total)
		c.metrics[mCarbon] += pieceEmissions(s, p.devices, p.f.hours())
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
		end: start + f.hours()*3600, metrics: onePieceMetrics(q, f.s, f.hours(), start, cost)}
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

// ranker keeps the best Limit candidates by the weighted, normalised
// metrics. Ties: score, cost, start, providers, then the pieces' offer ids
// and devices — a total order, so output is stable.
//
// Each metric is normalised over the extent [lo, hi] it takes in the whole
// feasible set, so the extent is taken first. Then mayEnter, a float lower
// bound on a score, rules out most candidates without the exact integer
// score: a term is round(x) ≥ x − ½ with x = (v − lo)·10⁶/(hi − lo), and
// the float error is far below the margin, so a bound over the current
// last score proves the exact score is over it too, and such a candidate
// can never rank (the last score only falls).
type ranker struct {
	q      *query
	lo, hi [numMetrics]int64
	inv    [numMetrics]float64
	margin float64
	top    []scored
}

func (r *ranker) init(lo, hi [numMetrics]int64) {
	r.lo, r.hi, r.margin = lo, hi, 1
	for m := range r.inv {
		r.inv[m] = 0
		if r.q.weights[m] != 0 && hi[m] != lo[m] {
			r.inv[m] = 1_000_000 / float64(hi[m]-lo[m])
			r.margin += (0.5 + 1e-3) * float64(r.q.weights[m])
		}
	}
}

func (r *ranker) score(metrics *[numMetrics]int64) int64 {
	var s int64
	for m, v := range metrics {
		if r.q.weights[m] == 0 || r.hi[m] == r.lo[m] {
			continue
		}
		s += r.q.weights[m] * MulDivRound(v-r.lo[m], 1_000_000, r.hi[m]-r.lo[m])
	}
	return s
}

// mayEnter reports whether a candidate with these metrics may still rank.
func (r *ranker) mayEnter(metrics *[numMetrics]int64) bool {
	limit := r.q.req.Limit
	if len(r.top) < limit {
		return true
	}
	var lb float64
	for m, v := range metrics {
		if r.inv[m] != 0 {
			lb += float64(r.q.weights[m]) * float64(v-r.lo[m]) * r.inv[m]
		}
	}
	return lb-r.margin <= float64(r.top[limit-1].s)
}

// add scores cands[i] exactly and keeps it if it ranks.
func (r *ranker) add(cands []quoteCand, i int) {
	limit := r.q.req.Limit
	c := &cands[i]
	sc := scored{i, r.score(&c.metrics)}
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
// placement that leaves the fewest devices free on the nodes it uses (it
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
