package market

// The matcher's walk over the index's slots under the work budget.

import (
	"time"
)

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
// nothing matched. A pause that is not nil is called between pieces of
// work (query.tick).
func (e *engine) run(src source, req Request, now time.Time, explain, stop bool, b Budget, pause func()) (Result, error) {
	q, err := compile(req, now)
	if err != nil {
		return Result{}, err
	}
	defer putQuery(q)
	q.pause = pause
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
	// splitTop is a split walk's best single-offer scores.
	splitTop []int64
	xt       extremes
	rk       ranker
}

// runQuery evaluates every offer, or with a limit ≥ 0 at most limit
// offers, those with the lowest prices (see Budget), and builds the ranked
// quotes. With stop, a gang request over a source that allows it walks
// the offers in price order and stops once none left could rank (see
// walkGang); relaxations run without, as their counts must be exact, and
// do not rank (query.countOnly: they read the totals only). It
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
	// In the scratch too: the gang walk points at them.
	sc.xt = extremes{}
	xt := &sc.xt
	sc.rk = ranker{q: q, top: sc.top[:0]}
	rk := &sc.rk
	rk.init()
	cands := sc.cands[:0]
	skipped := 0
	if !q.split {
		w := gangWalk{q: q, rk: rk, counts: counts, fits: fits, cands: cands, xt: xt}
		if stop && len(sc.runs) > 0 {
			skipped = w.merged(src, sc.runs, sc)
		} else {
			w.inOrder(sc.runs)
		}
		fits, cands = w.fits, w.cands
		visit -= skipped
	} else {
		walked := false
		if stop && len(sc.runs) > 0 && e.splitMayStop(q, sc.runs) {
			w := splitWalk{q: q, rk: rk, counts: counts, fits: fits, top: sc.splitTop[:0]}
			skipped, walked = w.merged(src, sc.runs, sc)
			fits, sc.splitTop = w.fits, w.top[:0]
			visit -= skipped
		}
		for _, run := range sc.runs {
			if walked {
				break
			}
			for i := range run {
				q.tick(4)
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
			if q.countOnly {
				break
			}
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
	sc.rk = ranker{}
	return res, *xt, visit
}
