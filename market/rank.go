package market

// Ranking by effective cost and the quotes built from the ranked candidates.

import (
	"sort"
	"time"
)

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
