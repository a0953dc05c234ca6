package market

// Requests split across offers: candidate combinations and their costs.

import (
	"fmt"
	"slices"
	"sort"
)

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
		if c, ok := singleOfferCand(q, &fits[i]); ok {
			cands = append(cands, c)
		}
	}
	if len(fits) == 0 {
		return cands, ""
	}
	groups := [][]*fit{nil}
	if q.perRegion() {
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

// unitCost is a fit and its cost at full use.
type unitCost struct {
	f *fit
	c int64
}

// sortUnit sorts us by unitLess, pausing as it goes (one sort of the fits
// of a broad request takes milliseconds).
func sortUnit(q *query, us []unitCost) {
	n := 0
	slices.SortFunc(us, func(a, b unitCost) int {
		if n++; n&63 == 0 {
			q.tick(12)
		}
		switch {
		case unitLess(q, a.f, b.f, a.c, b.c):
			return -1
		case unitLess(q, b.f, a.f, b.c, a.c):
			return 1
		}
		return 0
	})
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
	us := make([]unitCost, len(fits))
	for i, f := range fits {
		q.tick(1)
		us[i] = unitCost{f, int64(pieceCost(f.s, q, f.avail, f.hours(), f.intr).Total)}
	}
	sortUnit(q, us)
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

// reduce keeps, for every piece size d, the P offers cheapest at size d
// and every offer that costs as little as the P-th. Every optimal split
// then lies in the offers kept (an offer used at size d that costs more
// than P others there can be swapped for one of them left unused, for
// less), so the DP, which picks among the optimal splits by a rule on the
// splits alone (see dpSplit), gives the same split over the kept offers
// as over all, and the same over any offers that include every optimal
// split's — which the early stop relies on (splitWalk).
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
			q.tick(1)
			c := int64(pieceCost(f.s, q, d, f.hours(), f.intr).Total)
			if len(top) >= p && c > top[p-1].c {
				continue
			}
			i := sort.Search(len(top), func(i int) bool { return top[i].c > c })
			top = append(top, fc{})
			copy(top[i+1:], top[i:])
			top[i] = fc{f, c}
			// Keep the P cheapest and every offer tied with the P-th.
			for len(top) > p && top[len(top)-1].c > top[p-1].c {
				top = top[:len(top)-1]
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
// to place j devices on the offers seen so far. Among optimal splits it
// returns the one that, going through the offers from the highest id
// down, leaves each out when an optimal split does, else gives it the
// most devices an optimal split does (an update needs a strictly lower
// cost, and for one target the largest piece is tried first); so offers
// that no optimal split uses do not change the answer.
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
		q.tick(int(top) + int(D*top)/8) // its costs, then about 8 DP steps a unit
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
	us := make([]unitCost, len(fits))
	for i, f := range fits {
		q.tick(1)
		us[i] = unitCost{f, int64(pieceCost(f.s, q, f.avail, f.hours(), f.intr).Total)}
	}
	sortUnit(q, us)
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

// singleOfferCand prices the split request's whole job on the one offer f,
// spread over its nodes at the earliest start it can hold it: ok is false
// when f cannot take every device, has no such start, or costs more than
// the request's budget.
func singleOfferCand(q *query, f *fit) (quoteCand, bool) {
	if f.avail < q.devices {
		return quoteCand{}, false
	}
	q.tick(8)
	start, ok := earliestStart(q.spansOf(f.s), slotShape(f.s), layoutSpread, q.devices, f.lo, f.hi, f.hours()*3600)
	if !ok {
		return quoteCand{}, false
	}
	c := multiCandOne(q, f, start)
	if q.budget > 0 && c.cost > q.budget {
		return quoteCand{}, false
	}
	return c, true
}
