package market

// Split requests (batch, inference): the early stop of the walk.

// A split request's candidates are every offer that can take the whole
// request alone and, per group of offers (a region, for inference that
// may not spread over regions; else all of them), the cheapest
// combination. The walk goes through the offers in the order of a lower
// bound on their effective cost, as a gang's does (walkRun), keeping for
// each group the cheapest way to place j devices on the offers it has
// evaluated (a 0/1 knapsack over piece sizes, best[j]). It stops once
//
//  1. in every group with offers left, no combination that uses an offer
//     left can cost as little as the best over the evaluated offers: each
//     piece of d devices on an offer left costs at least the least of its
//     runs' bounds at d (walkRun.low priced at d), so a combination with k
//     devices on offers left costs at least LB(k), the cheapest way to
//     make k of such pieces, plus best[D−k]; when that is over best[D]
//     for every k, every optimal combination of the group lies in the
//     evaluated offers, and the split search (solveSplit's exact path,
//     which picks among optimal combinations by a rule on them alone, see
//     reduce) returns the same combination over them as over all;
//  2. so the cheapest candidate's cost is known (the least best[D] within
//     the budget: a single-offer candidate costs at least its group's
//     best), and with it every score; and
//  3. every run's single-offer bound (its key's cost term plus its rest,
//     as for a gang) is over the Limit-th best score of the evaluated
//     offers' single-offer candidates. Those are some of the final
//     candidates, so their Limit-th score is at least the final one, and
//     no offer left can rank, ties included.
//
// The walk only runs where the exhaustive engine would take the exact
// split path whatever the offers evaluated (splitMayStop); the candidates
// are then built from the evaluated offers by the same code as without the
// stop (engine.splitCands).

// splitMayStop reports whether the split search over runs takes its exact
// path for every group however many of the runs' offers fit: the request
// is at most maxExactDevices and, with every offer of a group's runs
// fitting, the exact path's evaluations and DP steps are within budget.
func (e *engine) splitMayStop(q *query, runs [][]slot) bool {
	if q.devices > e.maxExactDevices {
		return false
	}
	sizes := q.devices - q.minPiece + 1
	var per [maxCatalogue]int64
	for _, r := range runs {
		per[splitGroupOf(q, &r[0])] += int64(len(r))
	}
	for _, n := range per {
		if n*sizes > e.evalBudget || n*(q.devices+1)*sizes > e.dpBudget {
			return false
		}
	}
	return true
}

// perRegion reports whether a split request is solved region by region
// (inference not spread over regions).
func (q *query) perRegion() bool {
	return q.req.Workload.Kind == WorkInference && !q.req.Workload.SpreadRegions
}

// splitGroupOf is the group an offer's combination is sought in: its
// region, or 0 for all.
func splitGroupOf(q *query, s *slot) uint8 {
	if q.perRegion() {
		return s.region
	}
	return 0
}

const splitInf = int64(1) << 62

// splitWalk evaluates a split request's offers in the walk's order.
type splitWalk struct {
	q      *query
	rk     *ranker
	counts *[numReasons]int
	fits   []fit
	group  [maxCatalogue]int16 // region (or 0) → index in best, −1 none
	best   [][]int64           // per group: best[j], the cheapest j devices on its evaluated fits
	has    []bool              // per group: it has runs left (scratch of settled)
	low    [][]int64           // per group: the least cost of a piece of d devices on an offer left
	lbu    []int64             // LB(k), scratch
	costs  []int64             // a fit's piece costs by devices, scratch
	ranked int                 // fits[:ranked] have been scored as single-offer candidates
	top    []int64             // the best single-offer scores so far, ascending, at most Limit
	ready  bool                // the cheapest cost is known and in rk.minCost
	// per walk run: its bound's piece costs by devices, at lowPrice.
	runLow   [][]int64
	lowPrice []int32
}

// merged walks the runs merged by key and returns how many offers it left
// unevaluated; ok false when the source does not stop early (nothing
// evaluated then).
func (w *splitWalk) merged(src source, runs [][]slot, sc *scratch) (int, bool) {
	q := w.q
	ws, ok := walkRuns(src, q, runs, sc.walk[:0])
	sc.walk = ws[:0]
	if !ok {
		return 0, false
	}
	D := q.devices
	for i := range w.group {
		w.group[i] = -1
	}
	total := 0
	for _, run := range runs {
		total += len(run)
		if g := splitGroupOf(q, &run[0]); w.group[g] < 0 {
			w.group[g] = int16(len(w.best))
			b := make([]int64, D+1)
			for j := range b {
				b[j] = splitInf
			}
			b[0] = 0
			w.best = append(w.best, b)
			w.low = append(w.low, make([]int64, D+1))
		}
	}
	w.has = make([]bool, len(w.best))
	w.lbu = make([]int64, D+1)
	w.costs = make([]int64, D+1)
	w.runLow = make([][]int64, len(ws))
	w.lowPrice = make([]int32, len(ws))
	for i := range ws {
		w.runLow[i] = make([]int64, D+1)
		w.lowPrice[i] = -1
	}
	h := walkHeap{ws: ws, idx: sc.heap[:0]}
	for i := range ws {
		h.push(i)
	}
	defer func() { sc.heap = h.idx[:0] }()
	lastKey, sinceCheck, evaluated := int64(-1), 0, 0
	for len(h.idx) > 0 {
		r := &ws[h.idx[0]]
		// As a gang's walk: where the frontier moves up, and not more
		// often than once per few runs' worth of offers.
		if key := r.key(); key > lastKey && sinceCheck*4 >= len(h.idx) {
			lastKey, sinceCheck = key, 0
			if w.settled(&h) && w.cannotRank(&h) {
				return total - evaluated, true
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
	return 0, true
}

// eval evaluates s, keeps its fit and adds it to its group's knapsack.
func (w *splitWalk) eval(s *slot) {
	q := w.q
	q.tick(4)
	f := w.fits[len(w.fits) : len(w.fits)+1]
	if r := q.eval(s, &f[0]); r != rFit {
		w.counts[r]++
		return
	}
	w.fits = w.fits[:len(w.fits)+1]
	D, m := q.devices, q.minPiece
	top := min(f[0].avail, D)
	q.tick(int(top) + int(D*top)/8)
	for d := m; d <= top; d++ {
		w.costs[d] = int64(pieceCost(s, q, d, f[0].hours(), f[0].intr).Total)
	}
	best := w.best[w.group[splitGroupOf(q, s)]]
	// Downwards, so best[j−d] is still without this offer: each offer
	// gives one piece at most.
	for j := D; j >= m; j-- {
		for d := m; d <= min(top, j); d++ {
			if b := best[j-d]; b < splitInf && b+w.costs[d] < best[j] {
				best[j] = b + w.costs[d]
			}
		}
	}
}

// settled reports whether every group's cheapest combination lies in its
// evaluated offers (step 1), and then sets the cheapest cost (step 2).
func (w *splitWalk) settled(h *walkHeap) bool {
	q := w.q
	D, m := q.devices, q.minPiece
	for g := range w.has {
		w.has[g] = false
		for d := range w.low[g] {
			w.low[g][d] = splitInf
		}
	}
	for _, i := range h.idx {
		r := &h.ws[i]
		g := w.group[splitGroupOf(q, &r.run[0])]
		w.has[g] = true
		lc := w.runLow[i]
		if w.lowPrice[i] != r.low.price {
			w.lowPrice[i] = r.low.price
			for d := m; d <= D; d++ {
				lc[d] = int64(pieceCost(&r.low, q, d, r.hours, false).Total)
			}
		}
		for d := m; d <= D; d++ {
			w.low[g][d] = min(w.low[g][d], lc[d])
		}
	}
	minCost := int64(-1)
	for g, best := range w.best {
		if w.has[g] {
			if best[D] >= splitInf {
				return false
			}
			low, lbu := w.low[g], w.lbu
			lbu[0] = 0
			for k := int64(1); k <= D; k++ {
				lbu[k] = splitInf
				for d := m; d <= k; d++ {
					if b := lbu[k-d]; b < splitInf && b+low[d] < lbu[k] {
						lbu[k] = b + low[d]
					}
				}
			}
			for k := m; k <= D; k++ {
				if lbu[k] < splitInf && best[D-k] < splitInf && lbu[k]+best[D-k] <= best[D] {
					return false
				}
			}
		}
		if c := best[D]; c < splitInf && (q.budget == 0 || c <= q.budget) && (minCost < 0 || c < minCost) {
			minCost = c
		}
	}
	if minCost < 0 {
		return false
	}
	w.ready, w.rk.minCost = true, minCost
	return true
}

// cannotRank scores the evaluated offers' single-offer candidates and
// reports whether no offer left can rank (step 3).
func (w *splitWalk) cannotRank(h *walkHeap) bool {
	q, rk := w.q, w.rk
	limit := q.req.Limit
	for i := w.ranked; i < len(w.fits); i++ {
		c, ok := singleOfferCand(q, &w.fits[i]) // as splitCands prices it
		if !ok {
			continue
		}
		sc := rk.score(&c.metrics, c.carbonMilli)
		if len(w.top) == limit && sc >= w.top[limit-1] {
			continue
		}
		k := len(w.top)
		if k < limit {
			w.top = append(w.top, 0)
		} else {
			k--
		}
		for k > 0 && w.top[k-1] > sc {
			w.top[k] = w.top[k-1]
			k--
		}
		w.top[k] = sc
	}
	w.ranked = len(w.fits)
	if len(w.top) < limit {
		return false
	}
	kth := w.top[limit-1]
	for _, i := range h.idx {
		r := &h.ws[i]
		b := r.rest
		if wc := q.weights[mCost]; wc != 0 {
			b += wc * rk.costTerm(max(r.key(), rk.minCost))
		}
		if b <= kth {
			return false
		}
	}
	return true
}
