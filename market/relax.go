package market

import (
	"fmt"
	"sort"
	"time"
)

// relax finds, for each active constraint, the nearest change that makes
// the engine return quotes, by re-running it: binary search over the
// constraint's value where feasibility is monotone (price, carbon,
// reliability, memory, a split's deadline), a run without the limit then
// a run at the needed value (budget, a gang's deadline), or a run without
// the constraint (regions, models, interruption, software, network,
// verified figures). The allowed countries are the data-residency rule
// and are never relaxed.
//
// With a budget (perRun, left ≥ 0; see Budget) each run evaluates at most
// perRun offers and all together at most left: a run is cut to that, and
// once nothing is left the rest are not tried; cut reports that either
// happened.
func (e *engine) relax(src source, q *query, now time.Time, perRun, left int) (_ []Relaxation, cut bool) {
	base := q.req
	// lastFit is the request of the latest run that found quotes; every add
	// below follows the run it describes, so lastFit is that relaxation.
	var lastFit Request
	try := func(mod func(r *Request)) (Result, extremes, bool) {
		if left == 0 {
			cut = true
			return Result{}, extremes{}, false
		}
		r := base
		mod(&r)
		cq, err := compile(r, now)
		if err != nil {
			return Result{}, extremes{}, false
		}
		cq.pause, cq.countOnly = q.pause, true
		limit := left
		if perRun >= 0 {
			limit = min(perRun, left)
		}
		res, xt, examined := e.runQuery(src, cq, limit, false)
		putQuery(cq)
		if left > 0 {
			left -= examined
			cut = cut || res.Explanation.Cut.Unexamined > 0
		}
		if res.Total > 0 {
			lastFit = r
		}
		return res, xt, res.Total > 0
	}
	var out []Relaxation
	add := func(c Constraint, n int, format string, args ...any) {
		out = append(out, Relaxation{Constraint: c, Offers: n, Request: lastFit,
			Message: fmt.Sprintf(format, args...) + fmt.Sprintf(": %s %s", groupThousands(n), plural(n, "quote"))})
	}
	c := base.Constraints

	// search returns the first v in [lo, hi] (ascending) for which ok holds,
	// assuming ok is monotone, with the result of that run.
	search := func(lo, hi int, ok func(v int) (Result, bool)) (int, Result, bool) {
		if lo > hi {
			return 0, Result{}, false
		}
		res, good := ok(hi)
		if !good {
			return 0, Result{}, false
		}
		best, bestRes := hi, res
		for lo < hi {
			mid := lo + (hi-lo)/2
			if r, good := ok(mid); good {
				hi, best, bestRes = mid, mid, r
			} else {
				lo = mid + 1
			}
		}
		return best, bestRes, true
	}

	if c.MaxPricePerDeviceHour > 0 {
		v, res, ok := search(int(c.MaxPricePerDeviceHour)+1, MaxPriceCents, func(v int) (Result, bool) {
			r, _, ok := try(func(r *Request) { r.Constraints.MaxPricePerDeviceHour = Cents(v) })
			return r, ok
		})
		if ok {
			add(ConstraintPrice, res.Total, "raise the maximum price to %s per device-hour", Cents(v))
		}
	}
	if c.BudgetCents > 0 {
		if _, xt, ok := try(func(r *Request) { r.Constraints.BudgetCents = 0 }); ok && xt.minCost <= int64(MaxBudgetCents) {
			if res, _, ok := try(func(r *Request) { r.Constraints.BudgetCents = Cents(xt.minCost) }); ok {
				add(ConstraintBudget, res.Total, "raise the budget to %s", Cents(xt.minCost))
			}
		}
	}
	if !c.Deadline.IsZero() {
		if _, xt, ok := try(func(r *Request) { r.Constraints.Deadline = time.Time{} }); ok {
			at := func(unix int) func(r *Request) {
				return func(r *Request) { r.Constraints.Deadline = time.Unix(int64(unix), 0).UTC() }
			}
			// A gang's earliest end is its earliest-ending quote's. A split's
			// quotes are only the cheapest combinations, which need not end
			// first, so search the deadline: quotes only gain room as it
			// moves later, and the earliest-ending quote's end already works.
			lo := int(xt.minEnd)
			if q.split {
				lo = int(q.lo) + 1
			}
			v, res, ok := search(lo, int(xt.minEnd), func(v int) (Result, bool) {
				r, _, ok := try(at(v))
				return r, ok
			})
			if ok {
				add(ConstraintDeadline, res.Total, "move the deadline to %s", formatDeadline(time.Unix(int64(v), 0).UTC()))
			}
		}
	}
	if !c.AllowInterruption {
		if res, _, ok := try(func(r *Request) { r.Constraints.AllowInterruption = true }); ok {
			add(ConstraintInterruption, res.Total, "allow interruption")
		}
	}
	if c.MinReliabilityBP > 0 {
		// Search the loosening distance so the predicate rises with v.
		cur := c.MinReliabilityBP
		v, res, ok := search(1, cur, func(v int) (Result, bool) {
			r, _, ok := try(func(r *Request) { r.Constraints.MinReliabilityBP = cur - v })
			return r, ok
		})
		if ok {
			add(ConstraintReliability, res.Total, "accept reliability down to %s%%", FormatPercentBP(cur-v))
		}
	}
	if c.MaxCarbonGPerKWh > 0 {
		v, res, ok := search(c.MaxCarbonGPerKWh+1, 1500, func(v int) (Result, bool) {
			r, _, ok := try(func(r *Request) { r.Constraints.MaxCarbonGPerKWh = v })
			return r, ok
		})
		if ok {
			add(ConstraintCarbon, res.Total, "raise the maximum carbon intensity to %d gCO2/kWh", v)
		}
	}
	if c.MinMemoryGB > 0 {
		var sizes []int
		for _, a := range accelerators {
			if a.MemoryGB < c.MinMemoryGB && !containsInt(sizes, a.MemoryGB) {
				sizes = append(sizes, a.MemoryGB)
			}
		}
		sort.Sort(sort.Reverse(sort.IntSlice(sizes)))
		for _, m := range sizes {
			if res, _, ok := try(func(r *Request) { r.Constraints.MinMemoryGB = m }); ok {
				add(ConstraintMemory, res.Total, "accept %d GB of memory per device", m)
				break
			}
		}
	}
	anyRegion := "allow any region"
	if len(c.Countries) > 0 {
		anyRegion = "allow any region in the allowed countries"
	}
	type drop struct {
		active bool
		c      Constraint
		msg    string
		mod    func(r *Request)
	}
	for _, d := range []drop{
		{len(c.AcceleratorIDs)+len(c.Families) > 0, ConstraintModel, "allow any model", func(r *Request) {
			r.Constraints.AcceleratorIDs, r.Constraints.Families = nil, nil
		}},
		// The allowed countries are the data-residency rule: never relaxed.
		{len(c.RegionIDs)+len(base.Workload.UserRegionIDs) > 0, ConstraintRegion, anyRegion, func(r *Request) {
			r.Constraints.RegionIDs, r.Workload.UserRegionIDs = nil, nil
		}},
		{c.MinInterconnect != "", ConstraintInterconnect, "accept any interconnect", func(r *Request) { r.Constraints.MinInterconnect = "" }},
		{c.MinNetworkGbps > 0, ConstraintNetwork, "accept any network", func(r *Request) { r.Constraints.MinNetworkGbps = 0 }},
		{c.MinDriverVersion+c.MinCUDAVersion != "", ConstraintSoftware, "accept any driver and CUDA version", func(r *Request) {
			r.Constraints.MinDriverVersion, r.Constraints.MinCUDAVersion = "", ""
		}},
		{c.RequireVerified, ConstraintVerified, "accept unverified figures", func(r *Request) { r.Constraints.RequireVerified = false }},
		{c.RequireAgent, ConstraintAgent, "accept hosts without the agent (access given by the provider)", func(r *Request) { r.Constraints.RequireAgent = false }},
		{len(c.OfferIDs) > 0, ConstraintOffer, "quote any offer, not only the ones asked for", func(r *Request) { r.Constraints.OfferIDs = nil }},
	} {
		if !d.active {
			continue
		}
		if res, _, ok := try(d.mod); ok {
			add(d.c, res.Total, "%s", d.msg)
		}
	}
	return out, cut
}

// formatDeadline shows the seconds only when there are some, so a
// suggested deadline is never shown earlier than it is.
func formatDeadline(t time.Time) string {
	if t.Second() != 0 {
		return t.Format("2 Jan 2006 15:04:05 UTC")
	}
	return t.Format("2 Jan 2006 15:04 UTC")
}

func containsInt(xs []int, v int) bool {
	for _, x := range xs {
		if x == v {
			return true
		}
	}
	return false
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}
