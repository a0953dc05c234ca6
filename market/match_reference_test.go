package market

import (
	"math/big"
	"reflect"
	"testing"
	"time"
)

// The brute-force reference of the matcher's property tests, written from
// docs/matcher.md and the doc comments of Request, Offer, Candidate,
// Commitment and CostBreakdown. It calls none of the engine's code — not
// its cost or emissions functions, not MulDivRound, not its version
// packing, capacity search, node placement or relaxation search — and
// reads only the catalogue's data (accelerators' family, memory, BF16
// figure and board power; regions' country; networks' speed). Capacity is
// counted node by node from the nodes each commitment names (the node
// model of docs/matcher.md). Every time in the instances is hour-aligned,
// so scanning starts and instants hour by hour is exhaustive.

// refRound rounds a non-negative rational once, half away from zero (the
// documented rounding rule; every item of a cost is ≥ 0).
func refRound(x *big.Rat) int64 {
	two := big.NewInt(2)
	num := new(big.Int).Mul(x.Num(), two)
	num.Add(num, x.Denom())
	den := new(big.Int).Mul(x.Denom(), two)
	return new(big.Int).Div(num, den).Int64() // floor((2n + d) / 2d)
}

// refMul multiplies rationals given as a/b pairs: refMul(a, b, c, d) = a/b × c/d.
func refMul(fracs ...int64) *big.Rat {
	r := big.NewRat(1, 1)
	for i := 0; i < len(fracs); i += 2 {
		r.Mul(r, big.NewRat(fracs[i], fracs[i+1]))
	}
	return r
}

// refPieceCost prices devices of candidate c for hours, booked
// interruptible or not, by the documented formula:
//
//	instance      = devices × hours × booked price
//	storage       = dataset GB × storage price per GB-month × hours / 730
//	egress        = dataset GB × egress price, when the data's region is stated and is another
//	orchestration = devices × price × provisioning minutes / 60
//	failed work   = expected events × (checkpoint/2 + restart minutes) / 60 × devices × price
//	restart       = expected events × provisioning minutes / 60 × devices × price
//	events        = (1 − reliability) × hours / 24  [+ interruptions per hour × hours, interruptible]
//
// with reliability 95.00 % and 1 % interruptions per hour when unknown,
// each item exact and rounded once, the total the sum of the rounded items.
func refPieceCost(w Workload, c Candidate, devices, hours int, intr bool) CostBreakdown {
	o := c.Offer
	price := int64(o.PriceCentsPerDeviceHour)
	if intr {
		price = int64(o.InterruptibleCentsPerDH)
	}
	d, h := int64(devices), int64(hours)
	rel := int64(c.ReliabilityBP)
	if rel == 0 {
		rel = 9500
	}
	events := refMul(10000-rel, 10000, h, 24)
	if intr {
		ppm := int64(c.InterruptionPPMPerHour)
		if ppm == 0 {
			ppm = 10_000
		}
		events.Add(events, refMul(ppm, 1_000_000, h, 1))
	}
	gb := int64(w.DatasetGB)
	var cb CostBreakdown
	cb.Instance = Cents(d * h * price)
	cb.Storage = Cents(refRound(refMul(gb*int64(o.StorageCentsPerGBMonth)*h, 730)))
	if w.DataRegionID != "" && w.DataRegionID != o.RegionID {
		cb.Egress = Cents(gb * int64(o.EgressCentsPerGB))
	}
	prov := int64(o.ProvisioningMins)
	cb.Orchestration = Cents(refRound(refMul(d*price*prov, 60)))
	lostMins := refMul(int64(w.CheckpointMins), 2)
	lostMins.Add(lostMins, refMul(int64(w.RestartMins), 1))
	failed := new(big.Rat).Mul(events, lostMins)
	failed.Mul(failed, refMul(d*price, 60))
	cb.FailedWork = Cents(refRound(failed))
	restart := new(big.Rat).Mul(events, refMul(prov*d*price, 60))
	cb.Restart = Cents(refRound(restart))
	cb.Total = cb.Instance + cb.Storage + cb.Egress + cb.Orchestration + cb.FailedWork + cb.Restart
	return cb
}

// refEmissions is board power × devices × hours × the offer's gCO2/kWh / 1000, in grams.
func refEmissions(o Offer, devices, hours int) int64 {
	acc, _ := FindAccelerator(o.AcceleratorID)
	return refRound(refMul(int64(acc.TDPWatts)*int64(devices)*int64(hours)*int64(o.CarbonGPerKWh), 1000))
}

// refCatalogueRel is an accelerator's BF16 throughput relative to the
// reference accelerator, in thousandths, rounded half up.
func refCatalogueRel(accID string) int64 {
	a, _ := FindAccelerator(accID)
	ref, _ := FindAccelerator("nvidia-a100-80gb-sxm")
	return refRound(refMul(int64(a.BF16TFLOPS)*1000, int64(ref.BF16TFLOPS)))
}

// refOfferRel is the offer's relative throughput: its verified or
// guaranteed relative-throughput figure, else the catalogue's ratio.
func refOfferRel(o Offer) int64 {
	for _, f := range o.Figures {
		if f.Kind == FigureRelThroughput && (f.Basis == FigureVerified || f.Basis == FigureGuaranteed) {
			return f.Value
		}
	}
	return refCatalogueRel(o.AcceleratorID)
}

// refVersionLess compares versions exactly, part by part, missing parts
// zero (refCompareVersions, big integers).
func refVersionLess(a, b string) bool { return refCompareVersions(a, b) < 0 }

var refInterconnectRank = map[Interconnect]int{InterconnectPCIe: 1, InterconnectNVLink: 2}

func refIn(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// refOffer is the reference's view of one offer under a request.
type refOffer struct {
	c      Candidate
	reason Constraint // the first constraint it fails, in the documented order; "" when it fits
	intr   bool       // booked interruptible
	price  Cents      // booked price per device-hour
	hours  int
	starts []time.Time // allowed starts, hour by hour
	start  time.Time   // gang: earliest allowed start with the devices free
	avail  int         // split: most devices free throughout at one allowed start, capped at the request
	// nodeLimited: counting the offer's devices as one pool would have
	// given more (an earlier gang start, a larger split piece).
	nodeLimited bool
}

// refResult is what the reference finds for an instance.
type refResult struct {
	offers []refOffer
	fit    int
	counts map[Constraint]int
	// nodeLimited counts offers whose answer counting devices as one pool
	// would differ (see refOffer).
	nodeLimited int
	// feasible counts the gang quotes (offers that fit); for splits it is
	// 1 when some split exists.
	feasible int
	best     int64     // the optimum's cost, −1 when nothing is feasible
	minEnd   time.Time // gang: the earliest end of a feasible quote
}

// refPoolFree is the devices of o free throughout [s, s+hours) counted as
// one pool, as capacity was counted before nodes: for the generator's
// coverage only.
func refPoolFree(o Offer, commits []Commitment, s time.Time, hours int) int {
	free := o.Devices()
	for h := range hours {
		used := 0
		for n := range o.Nodes {
			used += refNodeUsed(o, commits, n, s.Add(time.Duration(h)*time.Hour))
		}
		free = min(free, o.Devices()-used)
	}
	return free
}

// refNodeUsed is the devices the commitments hold on node n of o at t: a
// commitment's share on that node (one without nodes holds all its
// devices on node 0).
func refNodeUsed(o Offer, commits []Commitment, n int, t time.Time) int {
	used := 0
	for _, c := range commits {
		if c.OfferID != o.ID || t.Before(c.Start) || !t.Before(c.End) {
			continue
		}
		if len(c.Nodes) == 0 {
			if n == 0 {
				used += c.Devices
			}
			continue
		}
		for _, sh := range c.Nodes {
			if sh.Node == n {
				used += sh.Devices
			}
		}
	}
	return used
}

// refNodeFree is the devices free on node n of o throughout [s, s+hours),
// checked hour by hour, never below zero.
func refNodeFree(o Offer, commits []Commitment, n int, s time.Time, hours int) int {
	free := o.DevicesPerNode
	for h := range hours {
		free = min(free, o.DevicesPerNode-refNodeUsed(o, commits, n, s.Add(time.Duration(h)*time.Hour)))
	}
	return max(free, 0)
}

// refSpreadFree is what a split piece can have on o throughout [s,
// s+hours): the free devices of every node together.
func refSpreadFree(o Offer, commits []Commitment, s time.Time, hours int) int {
	sum := 0
	for n := range o.Nodes {
		sum += refNodeFree(o, commits, n, s, hours)
	}
	return sum
}

// refFits reports whether devices fit on o throughout [s, s+hours): a gang
// of at most a node's devices on one node with that many free; a larger
// gang on ⌈devices / devices per node⌉ wholly free nodes; a split piece in
// the free devices of all nodes together.
func refFits(o Offer, commits []Commitment, s time.Time, hours, devices int, gang bool) bool {
	if !gang {
		return refSpreadFree(o, commits, s, hours) >= devices
	}
	best, whole := 0, 0
	for n := range o.Nodes {
		f := refNodeFree(o, commits, n, s, hours)
		best = max(best, f)
		if f == o.DevicesPerNode {
			whole++
		}
	}
	if devices <= o.DevicesPerNode {
		return best >= devices
	}
	return whole*o.DevicesPerNode >= devices
}

// refEarliest is the earliest of r's allowed starts at which devices fit
// (as a gang or a split piece) throughout, and whether there is one.
func refEarliest(in instance, r refOffer, devices int, gang bool) (time.Time, bool) {
	for _, s := range r.starts {
		if refFits(r.c.Offer, in.commits, s, r.hours, devices, gang) {
			return s, true
		}
	}
	return time.Time{}, false
}

// refClassify checks every offer against every constraint in the
// documented order: model, memory, region, price, interconnect, network,
// software, verified, reliability, carbon, devices, window, booked, budget.
func refClassify(in instance) []refOffer {
	w, c := in.req.Workload, in.req.Constraints
	split := w.Kind != WorkTraining
	need := w.Devices
	if split {
		need = w.MinPieceDevices
	}
	lo := in.now
	if c.EarliestStart.After(lo) {
		lo = c.EarliestStart
	}
	var out []refOffer
	byOffer := map[int64][]Commitment{}
	for _, c := range in.commits {
		byOffer[c.OfferID] = append(byOffer[c.OfferID], c)
	}
	for _, cand := range in.cands {
		o := cand.Offer
		// The offer's own commitments: the others never count on it.
		own := instance{commits: byOffer[o.ID]}
		acc, _ := FindAccelerator(o.AcceleratorID)
		region, _ := FindRegion(o.RegionID)
		net, _ := FindNetwork(o.NetworkID)
		r := refOffer{c: cand, intr: c.AllowInterruption && o.Interruptible && o.InterruptibleCentsPerDH > 0}
		r.price = o.PriceCentsPerDeviceHour
		if r.intr {
			r.price = o.InterruptibleCentsPerDH
		}
		rel := cand.ReliabilityBP
		if rel == 0 {
			rel = 9500
		}
		verified := false
		for _, f := range o.Figures {
			verified = verified || f.Basis == FigureVerified
		}
		r.hours = w.Hours
		if r.hours == 0 {
			model := w.WorkModelID
			if model == "" {
				model = "nvidia-a100-80gb-sxm"
			}
			num, den := w.WorkDeviceHours*refCatalogueRel(model), int64(w.Devices)*refOfferRel(o)
			r.hours = int((num + den - 1) / den)
		}
		start := lo
		if o.AvailableFrom.After(start) {
			start = o.AvailableFrom
		}
		end := o.AvailableUntil
		if !c.Deadline.IsZero() && c.Deadline.Before(end) {
			end = c.Deadline
		}
		for s := start; !s.Add(time.Duration(r.hours) * time.Hour).After(end); s = s.Add(time.Hour) {
			r.starts = append(r.starts, s)
		}
		switch {
		// Families and countries are the rules; model ids and regions, when
		// given, narrow within them: an offer must pass both lists.
		case (len(c.Families) > 0 && !refIn(c.Families, acc.Family)) || (len(c.AcceleratorIDs) > 0 && !refIn(c.AcceleratorIDs, acc.ID)):
			r.reason = ConstraintModel
		case acc.MemoryGB < c.MinMemoryGB:
			r.reason = ConstraintMemory
		case (len(c.Countries) > 0 && !refIn(c.Countries, region.Country)) || (len(c.RegionIDs) > 0 && !refIn(c.RegionIDs, region.ID)):
			r.reason = ConstraintRegion
		case c.MaxPricePerDeviceHour > 0 && r.price > c.MaxPricePerDeviceHour:
			r.reason = ConstraintPrice
		case c.MinInterconnect != "" && refInterconnectRank[o.Interconnect] < refInterconnectRank[c.MinInterconnect]:
			r.reason = ConstraintInterconnect
		case net.Gbps < c.MinNetworkGbps:
			r.reason = ConstraintNetwork
		case (c.MinDriverVersion != "" && refVersionLess(o.DriverVersion, c.MinDriverVersion)) ||
			(c.MinCUDAVersion != "" && refVersionLess(o.CUDAVersion, c.MinCUDAVersion)):
			r.reason = ConstraintSoftware
		case c.RequireVerified && !verified:
			r.reason = ConstraintVerified
		case c.RequireAgent && !o.Access.Agent():
			r.reason = ConstraintAgent
		case rel < c.MinReliabilityBP:
			r.reason = ConstraintReliability
		case c.MaxCarbonGPerKWh > 0 && o.CarbonGPerKWh > c.MaxCarbonGPerKWh:
			r.reason = ConstraintCarbon
		case o.Devices() < need || (!split && need > o.DevicesPerNode && !o.PlacementGroup):
			r.reason = ConstraintDevices
		case r.hours < o.MinRentalHours || r.hours > o.MaxRentalHours || len(r.starts) == 0:
			r.reason = ConstraintWindow
		}
		if r.reason == "" {
			if split {
				for _, s := range r.starts {
					r.avail = max(r.avail, min(refSpreadFree(o, own.commits, s, r.hours), w.Devices))
				}
				// Some piece size starts later on nodes than as one pool.
				for d := need; d <= w.Devices && !r.nodeLimited; d++ {
					for _, s := range r.starts {
						pool, nodes := refPoolFree(o, own.commits, s, r.hours) >= d, refSpreadFree(o, own.commits, s, r.hours) >= d
						if pool || nodes {
							r.nodeLimited = !nodes
							break
						}
					}
				}
				if r.avail < need {
					r.reason = ConstraintBooked
				}
			} else {
				var ok bool
				if r.start, ok = refEarliest(own, r, need, true); !ok {
					r.reason = ConstraintBooked
				}
				for _, s := range r.starts {
					if refPoolFree(o, own.commits, s, r.hours) >= need {
						r.nodeLimited = !ok || s.Before(r.start)
						break
					}
				}
			}
		}
		if r.reason == "" && c.BudgetCents > 0 && refPieceCost(w, cand, need, r.hours, r.intr).Total > c.BudgetCents {
			r.reason = ConstraintBudget
		}
		out = append(out, r)
	}
	return out
}

// refSolve classifies the offers and finds the optimum: for a gang the
// cheapest offer that fits; for a split every assignment of devices to
// the offers that fit, each piece at least the minimum and at most what
// the offer has free at one start, within the budget.
func refSolve(in instance) refResult {
	res := refResult{offers: refClassify(in), counts: map[Constraint]int{}, best: -1}
	w := in.req.Workload
	var fits []refOffer
	for _, r := range res.offers {
		if r.nodeLimited {
			res.nodeLimited++
		}
		if r.reason != "" {
			res.counts[r.reason]++
			continue
		}
		fits = append(fits, r)
	}
	res.fit = len(fits)
	if w.Kind == WorkTraining {
		for _, r := range fits {
			cost := int64(refPieceCost(w, r.c, w.Devices, r.hours, r.intr).Total)
			if res.best < 0 || cost < res.best {
				res.best = cost
			}
			if end := r.start.Add(time.Duration(r.hours) * time.Hour); res.minEnd.IsZero() || end.Before(res.minEnd) {
				res.minEnd = end
			}
		}
		res.feasible = len(fits)
		return res
	}
	D, m := w.Devices, w.MinPieceDevices
	costs := make([][]int64, len(fits)) // costs[i][d]
	for i, r := range fits {
		costs[i] = make([]int64, r.avail+1)
		for d := m; d <= r.avail; d++ {
			costs[i][d] = int64(refPieceCost(w, r.c, d, r.hours, r.intr).Total)
		}
	}
	budget := int64(in.req.Constraints.BudgetCents)
	var rec func(i, left int, cost int64)
	rec = func(i, left int, cost int64) {
		if left == 0 {
			if (budget == 0 || cost <= budget) && (res.best < 0 || cost < res.best) {
				res.best = cost
			}
			return
		}
		if i == len(fits) {
			return
		}
		rec(i+1, left, cost)
		for d := m; d <= fits[i].avail && d <= left; d++ {
			rec(i+1, left-d, cost+costs[i][d])
		}
	}
	rec(0, D, 0)
	if res.best >= 0 {
		res.feasible = 1
	}
	return res
}

// refEarliestDeadline is the earliest deadline at which the instance has
// a quote, trying every hour after the earliest allowed start (every time
// in the instances is hour-aligned, so every end is too); zero if none
// within a week.
func refEarliestDeadline(in instance) time.Time {
	lo := in.now
	if in.req.Constraints.EarliestStart.After(lo) {
		lo = in.req.Constraints.EarliestStart
	}
	for h := 1; h <= 7*24; h++ {
		d := lo.Add(time.Duration(h) * time.Hour)
		if refWith(in, func(r *Request) { r.Constraints.Deadline = d }).best >= 0 {
			return d
		}
	}
	return time.Time{}
}

// refWith solves the instance with the request changed by mod.
func refWith(in instance, mod func(r *Request)) refResult {
	mod(&in.req)
	return refSolve(in)
}

// checkAgainstReference compares a result with the reference: the
// explanation's counts per constraint; the number of quotes and the
// optimum; and every quote's pieces — offer fits, booked price,
// interruptible or not, hours, start (the earliest with the piece's
// devices free), each cost item and the emissions — and the quote's
// totals, cost per reference-device-hour included.
func checkAgainstReference(t *testing.T, i int, in instance, res Result, ref refResult) {
	t.Helper()
	ex := res.Explanation
	if ex.Fit != ref.fit {
		t.Fatalf("instance %d: %d offers fit, reference %d (%+v, reference %v)", i, ex.Fit, ref.fit, ex.Eliminated, ref.counts)
	}
	if len(ex.Eliminated) != len(ref.counts) {
		t.Fatalf("instance %d: eliminations %+v, reference %v", i, ex.Eliminated, ref.counts)
	}
	for _, e := range ex.Eliminated {
		if e.Count != ref.counts[e.Constraint] {
			t.Fatalf("instance %d: %d eliminated by %s, reference %d (%+v, reference %v)", i, e.Count, e.Constraint, ref.counts[e.Constraint], ex.Eliminated, ref.counts)
		}
	}
	if in.req.Workload.Kind == WorkTraining && res.Total != ref.feasible {
		t.Fatalf("instance %d: %d gang quotes, reference %d", i, res.Total, ref.feasible)
	}
	if (len(res.Quotes) > 0) != (ref.best >= 0) {
		t.Fatalf("instance %d: %d quotes, reference optimum %d", i, len(res.Quotes), ref.best)
	}
	if len(res.Quotes) > 0 && int64(res.Quotes[0].Cost.Total) < ref.best {
		t.Fatalf("instance %d: best quote %d is cheaper than the reference optimum %d", i, res.Quotes[0].Cost.Total, ref.best)
	}
	byID := map[int64]refOffer{}
	for _, r := range ref.offers {
		byID[r.c.Offer.ID] = r
	}
	for _, q := range res.Quotes {
		var cost CostBreakdown
		var emissions, delivered int64
		providers := map[int64]bool{}
		for _, p := range q.Pieces {
			r, ok := byID[p.OfferID]
			if !ok || r.reason != "" {
				t.Fatalf("instance %d: piece on offer %d, which the reference eliminates (%s)", i, p.OfferID, r.reason)
			}
			o := r.c.Offer
			want := refPieceCost(in.req.Workload, r.c, p.Devices, r.hours, r.intr)
			if p.Cost != want {
				t.Fatalf("instance %d: piece %d×%dh on offer %d costs %+v, reference %+v", i, p.Devices, p.Hours, p.OfferID, p.Cost, want)
			}
			earliest, _ := refEarliest(in, r, p.Devices, in.req.Workload.Kind == WorkTraining)
			if p.Hours != r.hours || p.Interruptible != r.intr || p.PriceCents != r.price || !p.Start.Equal(earliest) ||
				!p.End.Equal(p.Start.Add(time.Duration(r.hours)*time.Hour)) || p.ProviderID != o.ProviderID ||
				p.AcceleratorID != o.AcceleratorID || p.RegionID != o.RegionID {
				t.Fatalf("instance %d: piece %+v, reference hours %d interruptible %t price %d earliest start %s",
					i, p, r.hours, r.intr, r.price, earliest)
			}
			if e := refEmissions(o, p.Devices, r.hours); p.EmissionsG != e {
				t.Fatalf("instance %d: piece on offer %d emits %d g, reference %d", i, p.OfferID, p.EmissionsG, e)
			}
			cost.add(want)
			emissions += p.EmissionsG
			delivered += int64(p.Devices) * int64(p.Hours) * refOfferRel(o)
			providers[p.ProviderID] = true
		}
		if q.Cost != cost || q.EmissionsG != emissions || q.Providers != len(providers) {
			t.Fatalf("instance %d: quote %+v, reference cost %+v emissions %d providers %d", i, q, cost, emissions, len(providers))
		}
		if want := Cents(refRound(refMul(int64(cost.Total)*1000, delivered))); q.CentsPerRefDeviceHour != want {
			t.Fatalf("instance %d: %s per reference-device-hour, reference %s", i, q.CentsPerRefDeviceHour, want)
		}
	}
}

// relaxable lists the relaxations the engine may propose, with whether the
// request constrains them and the request with the constraint dropped or
// at its loosest.
var relaxable = []struct {
	c      Constraint
	active func(r Request) bool
	loose  func(r *Request)
}{
	{ConstraintPrice, func(r Request) bool { return r.Constraints.MaxPricePerDeviceHour > 0 }, func(r *Request) { r.Constraints.MaxPricePerDeviceHour = MaxPriceCents }},
	{ConstraintBudget, func(r Request) bool { return r.Constraints.BudgetCents > 0 }, func(r *Request) { r.Constraints.BudgetCents = 0 }},
	{ConstraintDeadline, func(r Request) bool { return !r.Constraints.Deadline.IsZero() }, func(r *Request) { r.Constraints.Deadline = time.Time{} }},
	{ConstraintInterruption, func(r Request) bool { return !r.Constraints.AllowInterruption }, func(r *Request) { r.Constraints.AllowInterruption = true }},
	{ConstraintReliability, func(r Request) bool { return r.Constraints.MinReliabilityBP > 0 }, func(r *Request) { r.Constraints.MinReliabilityBP = 0 }},
	{ConstraintCarbon, func(r Request) bool { return r.Constraints.MaxCarbonGPerKWh > 0 }, func(r *Request) { r.Constraints.MaxCarbonGPerKWh = 1500 }},
	{ConstraintMemory, func(r Request) bool { return r.Constraints.MinMemoryGB > 0 }, func(r *Request) { r.Constraints.MinMemoryGB = 0 }},
	{ConstraintModel, func(r Request) bool { return len(r.Constraints.AcceleratorIDs)+len(r.Constraints.Families) > 0 }, func(r *Request) {
		r.Constraints.AcceleratorIDs, r.Constraints.Families = nil, nil
	}},
	// The allowed countries are data residency: no relaxation leaves them.
	{ConstraintRegion, func(r Request) bool {
		return len(r.Constraints.RegionIDs)+len(r.Workload.UserRegionIDs) > 0
	}, func(r *Request) {
		r.Constraints.RegionIDs, r.Workload.UserRegionIDs = nil, nil
	}},
	{ConstraintInterconnect, func(r Request) bool { return r.Constraints.MinInterconnect != "" }, func(r *Request) { r.Constraints.MinInterconnect = "" }},
	{ConstraintNetwork, func(r Request) bool { return r.Constraints.MinNetworkGbps > 0 }, func(r *Request) { r.Constraints.MinNetworkGbps = 0 }},
	{ConstraintSoftware, func(r Request) bool { return r.Constraints.MinDriverVersion+r.Constraints.MinCUDAVersion != "" }, func(r *Request) {
		r.Constraints.MinDriverVersion, r.Constraints.MinCUDAVersion = "", ""
	}},
	{ConstraintVerified, func(r Request) bool { return r.Constraints.RequireVerified }, func(r *Request) { r.Constraints.RequireVerified = false }},
}

// checkRelaxations checks the relaxations of a result without quotes
// against the reference. A relaxation is proposed exactly when the
// reference finds quotes with that one constraint at its loosest (or,
// for memory, at some smaller catalogue size); its request differs from
// the original in that constraint only; the value it proposes is the
// nearest that works — a price, carbon limit or reliability floor one
// step nearer the original finds nothing, no larger memory size between
// works, the budget is the reference optimum and a gang's deadline the
// earliest end without one — and its count is the reference's. It
// counts, per constraint, the relaxations checked.
func checkRelaxations(t *testing.T, i int, in instance, res Result, covered map[Constraint]int) {
	t.Helper()
	if len(res.Quotes) > 0 {
		if len(res.Explanation.Relaxations) > 0 {
			t.Fatalf("instance %d: relaxations beside quotes", i)
		}
		return
	}
	got := map[Constraint]Relaxation{}
	for _, rl := range res.Explanation.Relaxations {
		if _, dup := got[rl.Constraint]; dup {
			t.Fatalf("instance %d: two %s relaxations", i, rl.Constraint)
		}
		got[rl.Constraint] = rl
	}
	base := in.req
	feasible := func(r Request) bool {
		in2 := in
		in2.req = r
		return refSolve(in2).best >= 0
	}
	with := func(mod func(r *Request)) Request {
		r := base
		mod(&r)
		return r
	}
	gang := base.Workload.Kind == WorkTraining
	for _, x := range relaxable {
		rl, ok := got[x.c]
		delete(got, x.c)
		want := x.active(base) && feasible(with(x.loose))
		if x.c == ConstraintMemory && x.active(base) {
			want = false
			for _, a := range Accelerators() {
				want = want || (a.MemoryGB < base.Constraints.MinMemoryGB && feasible(with(func(r *Request) { r.Constraints.MinMemoryGB = a.MemoryGB })))
			}
		}
		if ok != want {
			t.Fatalf("instance %d: %s relaxation proposed %t, reference %t (%+v)", i, x.c, ok, want, res.Explanation.Relaxations)
		}
		if !ok {
			continue
		}
		covered[x.c]++
		r := rl.Request
		// Only this constraint differs from the request.
		same := r
		switch x.c {
		case ConstraintPrice:
			same.Constraints.MaxPricePerDeviceHour = base.Constraints.MaxPricePerDeviceHour
		case ConstraintBudget:
			same.Constraints.BudgetCents = base.Constraints.BudgetCents
		case ConstraintDeadline:
			same.Constraints.Deadline = base.Constraints.Deadline
		case ConstraintInterruption:
			same.Constraints.AllowInterruption = base.Constraints.AllowInterruption
		case ConstraintReliability:
			same.Constraints.MinReliabilityBP = base.Constraints.MinReliabilityBP
		case ConstraintCarbon:
			same.Constraints.MaxCarbonGPerKWh = base.Constraints.MaxCarbonGPerKWh
		case ConstraintMemory:
			same.Constraints.MinMemoryGB = base.Constraints.MinMemoryGB
		default:
			if !reflect.DeepEqual(r, with(x.loose)) {
				t.Fatalf("instance %d: %s relaxation request %+v, want the constraint dropped", i, x.c, r)
			}
			same = base
		}
		if !reflect.DeepEqual(same, base) {
			t.Fatalf("instance %d: %s relaxation changes more than that constraint:\n%+v\n%+v", i, x.c, r, base)
		}
		c, b := r.Constraints, base.Constraints
		near := with(func(*Request) {}) // one step back towards the original, which must find nothing
		nearOK := false
		switch x.c {
		case ConstraintPrice:
			if c.MaxPricePerDeviceHour <= b.MaxPricePerDeviceHour {
				t.Fatalf("instance %d: price relaxed to %s from %s", i, c.MaxPricePerDeviceHour, b.MaxPricePerDeviceHour)
			}
			near.Constraints.MaxPricePerDeviceHour = c.MaxPricePerDeviceHour - 1
			nearOK = true
		case ConstraintCarbon:
			if c.MaxCarbonGPerKWh <= b.MaxCarbonGPerKWh {
				t.Fatalf("instance %d: carbon relaxed to %d from %d", i, c.MaxCarbonGPerKWh, b.MaxCarbonGPerKWh)
			}
			near.Constraints.MaxCarbonGPerKWh = c.MaxCarbonGPerKWh - 1
			nearOK = true
		case ConstraintReliability:
			if c.MinReliabilityBP >= b.MinReliabilityBP {
				t.Fatalf("instance %d: reliability relaxed to %d from %d", i, c.MinReliabilityBP, b.MinReliabilityBP)
			}
			near.Constraints.MinReliabilityBP = c.MinReliabilityBP + 1
			nearOK = true
		case ConstraintMemory:
			for _, a := range Accelerators() {
				if a.MemoryGB > c.MinMemoryGB && a.MemoryGB < b.MinMemoryGB {
					m := a.MemoryGB
					if feasible(with(func(r *Request) { r.Constraints.MinMemoryGB = m })) {
						t.Fatalf("instance %d: memory relaxed to %d GB, but %d GB works", i, c.MinMemoryGB, m)
					}
				}
			}
		case ConstraintBudget:
			if opt := refWith(in, func(r *Request) { r.Constraints.BudgetCents = 0 }).best; int64(c.BudgetCents) != opt {
				t.Fatalf("instance %d: budget relaxed to %s, reference optimum %d", i, c.BudgetCents, opt)
			}
		case ConstraintDeadline:
			if end := refWith(in, func(r *Request) { r.Constraints.Deadline = time.Time{} }).minEnd; gang && !c.Deadline.Equal(end) {
				t.Fatalf("instance %d: deadline relaxed to %s, reference earliest end %s", i, c.Deadline, end)
			}
			if end := refEarliestDeadline(in); !gang && !c.Deadline.Equal(end) {
				t.Fatalf("instance %d: split deadline relaxed to %s, reference earliest feasible deadline %s", i, c.Deadline, end)
			}
		}
		if nearOK && !reflect.DeepEqual(near, base) && feasible(near) {
			t.Fatalf("instance %d: %s relaxation %+v is not the nearest: one step nearer also works", i, x.c, c)
		}
		in2 := in
		in2.req = r
		ref := refSolve(in2)
		if ref.best < 0 || rl.Offers < 1 || (gang && rl.Offers != ref.feasible) {
			t.Fatalf("instance %d: %s relaxation claims %d quotes, reference %d (optimum %d)", i, x.c, rl.Offers, ref.feasible, ref.best)
		}
	}
	for c := range got {
		t.Fatalf("instance %d: unexpected %s relaxation", i, c)
	}
}
