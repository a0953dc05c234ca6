package market

// Gang requests: every offer's fits evaluated and ranked as the walk goes.

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
	w.q.tick(4)
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
	if !w.q.countOnly {
		w.rank()
	}
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
	ws, ok := walkRuns(src, q, runs, sc.walk[:0])
	if !ok {
		w.inOrder(runs)
		return 0
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
		// Once ready, also where it stays: the last kept quote may tie
		// with every offer left at the frontier and still win (see
		// leftCannotRank).
		if key := r.key(); (key > lastKey || ready) && sinceCheck*4 >= len(h.idx) {
			lastKey, sinceCheck = key, 0
			if !ready && w.xt.ok && key >= w.xt.minCost {
				ready, rk.minCost = true, w.xt.minCost
			}
			if ready {
				w.rank()
				if kth, full := rk.last(); full && w.leftCannotRank(&h, kth) {
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

// walkRuns appends to ws the walk runs of runs, each at its first offer
// (see walkRun); false when the source does not stop early.
func walkRuns(src source, q *query, runs [][]slot, ws []walkRun) ([]walkRun, bool) {
	for _, run := range runs {
		b, perm, ok := src.bound(run)
		if !ok {
			return ws, false
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
	return ws, true
}

// leftCannotRank reports whether no offer left in the walk can rank
// before the last kept quote, which scores kth: every run's bound (the
// cost term of its key plus its rest) is over kth, or equal to it and the
// last kept quote wins every tie an offer left in the run can make. Such
// an offer then scores kth and costs at least the run's key (a higher
// booked price costs strictly more), so it ties only at the key's cost,
// which must be the last kept quote's, at the run's frontier price, where
// the run's offers come by id from its next one; at best it starts at
// the earliest start, holds only its own devices and leaves nothing free
// on its node: when the last kept quote does all that too and has a lower
// id than the run's next offer, it wins. So a market of one price (the
// openb replay) stops at the first offer that fits a gang exactly.
func (w *gangWalk) leftCannotRank(h *walkHeap, kth int64) bool {
	q, rk := w.q, w.rk
	var last *quoteCand
	for _, i := range h.idx {
		r := &h.ws[i]
		b := r.rest
		if wc := q.weights[mCost]; wc != 0 {
			b += wc * rk.costTerm(r.key())
		}
		switch {
		case b > kth:
			continue
		case b < kth:
			return false
		}
		if last == nil {
			last = &w.cands[rk.top[len(rk.top)-1].i]
		}
		switch {
		case r.key() > last.cost:
			continue
		case r.key() < last.cost:
			return false
		}
		if last.metrics[mStart] != 0 || rk.held(last) != q.devices || rk.leftover(last) != 0 || r.run[r.cur].id < last.one.f.s.id {
			return false
		}
	}
	return true
}

// walkHeap is a binary min-heap of runs by key, then next offer id.
type walkHeap struct {
	ws  []walkRun
	idx []int
}

func (h *walkHeap) less(a, b int) bool {
	ra, rb := &h.ws[h.idx[a]], &h.ws[h.idx[b]]
	if ka, kb := ra.key(), rb.key(); ka != kb {
		return ka < kb
	}
	// Ties by the next offer's id (no two runs hold one offer), so offers
	// of one key are walked in id order (see leftCannotRank).
	return ra.run[ra.cur].id < rb.run[rb.cur].id
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
