package market

// The matcher's first stage: a request compiled into a query, an offer
// into a slot, and one slot judged against the query (eval).

import (
	"slices"
	"sync"
	"time"
)

// slot flags.
const (
	flagPlacement uint8 = 1 << iota
	flagInterruptible
	flagVerified
	flagContainers // runs buyer containers with CDI (ContainerSupport.RunsContainers)
	flagAgent      // the hosts run the provider agent (AccessMode.Agent)
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
	if o.Access.Agent() {
		s.flags |= flagAgent
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
	agent            bool // only hosts that run the agent
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
	// pause, when set, is called about every pauseEvery units of work
	// (see tick): a broad match lets more urgent work run (Index.MatchYielding).
	pause func()
	work  int
	// countOnly: the run is a relaxation's, which reads the totals and
	// extremes only, so its quotes are not ranked (see engine.relax).
	countOnly bool
}

// pauseEvery is the work between two pauses, in units of about one piece's
// cost (pieceCost, some 25 ns; an offer's evaluation is 4): about 0.1 ms.
const pauseEvery = 4096

// tick counts n units of work and pauses when pauseEvery have been done
// since the last pause.
func (q *query) tick(n int) {
	if q.pause == nil {
		return
	}
	q.work += n
	if q.work >= pauseEvery {
		q.work = 0
		q.pause()
	}
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
		verified: c.RequireVerified, agent: c.RequireAgent, containers: req.Runtime.Image != "", minReliability: uint16(c.MinReliabilityBP), maxCarbon: uint16(c.MaxCarbonGPerKWh),
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
	case q.agent && s.flags&flagAgent == 0:
		return rAgent
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
