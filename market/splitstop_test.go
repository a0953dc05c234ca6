package market

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// splitStopInstance is a split request (inference most often, solved
// region by region; sometimes spread over regions, sometimes batch) over
// a market of the early-stop tests: many offers on few prices, copies of
// offers (ties on everything but the id), preferences of every kind.
func splitStopInstance(rng *rand.Rand) instance {
	in := earlyStopInstance(rng)
	w := &in.req.Workload
	w.Kind = WorkInference
	switch rng.IntN(4) {
	case 0:
		w.Kind = WorkBatch
	case 1:
		w.SpreadRegions = true
	}
	w.Devices = 2 + rng.IntN(7)
	w.MinPieceDevices = 1 + rng.IntN(min(3, w.Devices))
	if w.Hours == 0 {
		w.Hours = 1 + rng.IntN(6) // stated work is for training
		w.WorkDeviceHours = 0
	}
	if rng.IntN(2) == 0 {
		// Offers alike but for price, devices, times and commitments: the
		// walk's bounds are then exact, and combinations tie often.
		// On two prices, half the time ranked by cost alone: the cheapest
		// combinations then rank first and have many equals.
		rel := []int{0, 9000, 10000}[rng.IntN(3)]
		for i := range in.cands {
			c := &in.cands[i]
			c.ReliabilityBP = rel
			c.Offer.StorageCentsPerGBMonth, c.Offer.EgressCentsPerGB, c.Offer.ProvisioningMins = 0, 0, 0
			c.Offer.PriceCentsPerDeviceHour = []Cents{100, 120}[rng.IntN(2)]
			c.Offer.Interruptible = false
		}
		if rng.IntN(2) == 0 {
			in.req.Preferences = Preferences{}
		}
		// One offer more reliable than the rest loosens its bucket's bound
		// only: offers that cost the same are then walked out of id order.
		if rel != 10000 && rng.IntN(2) == 0 {
			in.cands[rng.IntN(len(in.cands))].ReliabilityBP = 10000
		}
	}
	if rng.IntN(4) == 0 {
		in.req.Constraints.BudgetCents = Cents(2000 + rng.IntN(20000))
	}
	return in
}

// refSplitPiece is a piece of a reference split quote.
type refSplitPiece struct {
	r       refOffer
	devices int
	start   time.Time
}

// refSplitQuote is a reference candidate: one offer taking the request
// alone, or a group's cheapest combination.
type refSplitQuote struct {
	pieces                      []refSplitPiece // by offer id
	cost, startDelay, providers int64
	left                        int64
	score                       int64
}

// refRankSplit is the exhaustive reference of a split request: every
// offer classified by the reference (refClassify); the candidates as the
// documentation defines them — every offer that can take all the devices
// alone, and per group (a region for inference not spread over regions,
// else all) the cheapest combination when it has more than one piece,
// chosen among the cheapest by the documented rule (from the highest offer
// id down, an offer left out when a cheapest combination leaves it out,
// else given the most devices one gives it), within the budget — scored on
// the documented fixed scales in exact rationals and sorted by the
// documented order. It shares no code with the engine's walk, split
// search, ranking or scoring.
func refRankSplit(in instance) ([]refSplitQuote, []refOffer) {
	w, c, p := in.req.Workload, in.req.Constraints, in.req.Preferences
	lo := in.now
	if c.EarliestStart.After(lo) {
		lo = c.EarliestStart
	}
	window := int64(7 * 24 * 3600)
	if !c.Deadline.IsZero() {
		window = max(1, c.Deadline.Unix()-lo.Unix())
	}
	offers := refClassify(in)
	D, m := w.Devices, w.MinPieceDevices
	budget := int64(c.BudgetCents)
	var qs []refSplitQuote
	add := func(ps []refSplitPiece) {
		q := refSplitQuote{pieces: ps}
		providers := map[int64]bool{}
		for _, pc := range ps {
			q.cost += int64(refPieceCost(w, pc.r.c, pc.devices, pc.r.hours, pc.r.intr).Total)
			providers[pc.r.c.Offer.ProviderID] = true
		}
		if budget > 0 && q.cost > budget {
			return
		}
		q.providers = int64(len(providers))
		qs = append(qs, q)
	}
	groups := map[string][]refOffer{}
	for _, r := range offers {
		if r.reason != "" {
			continue
		}
		if r.avail >= D {
			if s, ok := refEarliest(in, r, D, false); ok {
				add([]refSplitPiece{{r, D, s}})
			}
		}
		key := ""
		if w.Kind == WorkInference && !w.SpreadRegions {
			key = r.c.Offer.RegionID
		}
		groups[key] = append(groups[key], r)
	}
	for _, g := range groups {
		slices.SortFunc(g, func(a, b refOffer) int { return int(a.c.Offer.ID - b.c.Offer.ID) })
		costs := map[[2]int64]int64{}
		cost := func(r refOffer, d int) int64 {
			k := [2]int64{r.c.Offer.ID, int64(d)}
			if c, ok := costs[k]; ok {
				return c
			}
			costs[k] = int64(refPieceCost(w, r.c, d, r.hours, r.intr).Total)
			return costs[k]
		}
		// opt[i][t]: the cheapest t devices on the group's first i offers, −1 none.
		opt := make([][]int64, len(g)+1)
		opt[0] = make([]int64, D+1)
		for t := 1; t <= D; t++ {
			opt[0][t] = -1
		}
		for i, r := range g {
			opt[i+1] = slices.Clone(opt[i])
			for t := 1; t <= D; t++ {
				for d := m; d <= min(r.avail, t); d++ {
					if prev := opt[i][t-d]; prev >= 0 && (opt[i+1][t] < 0 || prev+cost(r, d) < opt[i+1][t]) {
						opt[i+1][t] = prev + cost(r, d)
					}
				}
			}
		}
		if opt[len(g)][D] < 0 {
			continue
		}
		var ps []refSplitPiece
		for i, t := len(g), D; i > 0; i-- {
			if opt[i-1][t] == opt[i][t] {
				continue
			}
			r := g[i-1]
			for d := min(r.avail, t); d >= m; d-- {
				if prev := opt[i-1][t-d]; prev >= 0 && prev+cost(r, d) == opt[i][t] {
					s, ok := refEarliest(in, r, d, false)
					if !ok {
						panic("a piece within the devices free has no start")
					}
					ps = append([]refSplitPiece{{r, d, s}}, ps...)
					t -= d
					break
				}
			}
		}
		if len(ps) > 1 {
			add(ps)
		}
	}
	minCost := int64(-1)
	for _, q := range qs {
		if minCost < 0 || q.cost < minCost {
			minCost = q.cost
		}
	}
	for i := range qs {
		q := &qs[i]
		var wh, grams, relDev, notPref int64
		first := time.Time{}
		for _, pc := range q.pieces {
			o := pc.r.c.Offer
			acc, _ := FindAccelerator(o.AcceleratorID)
			e := int64(acc.TDPWatts) * int64(pc.devices) * int64(pc.r.hours)
			wh += e
			grams += e * int64(o.CarbonGPerKWh)
			rel := int64(pc.r.c.ReliabilityBP)
			if rel == 0 {
				rel = 9500
			}
			relDev += int64(pc.devices) * rel
			if !refIn(p.PreferredAcceleratorIDs, o.AcceleratorID) && !refIn(p.PreferredRegionIDs, o.RegionID) {
				notPref += int64(pc.devices)
			}
			if first.IsZero() || pc.start.Before(first) {
				first = pc.start
			}
			// What the piece's placement leaves free on the nodes it uses.
			for _, sh := range refPlacement(o, in.commits, Commitment{OfferID: o.ID, Devices: pc.devices, Start: pc.start,
				End: pc.start.Add(time.Duration(pc.r.hours) * time.Hour)}) {
				q.left += int64(refNodeFree(o, in.commits, sh.Node, pc.start, pc.r.hours) - sh.Devices)
			}
		}
		q.startDelay = first.Unix() - lo.Unix()
		carbon := refRound(refMul(grams, wh, 1000, 1)) // mg per kWh, energy-weighted
		unrel := 10000 - relDev/int64(D)               // device-weighted, rounded down
		notPrefPermil := notPref * 1000 / int64(D)     // device-weighted share, rounded down
		costTerm := refRound(refMul(q.cost-minCost, minCost, 1_000_000, 1))
		q.score = int64(p.CostWeight)*costTerm + int64(p.CarbonWeight)*carbon +
			int64(p.ReliabilityWeight)*unrel*100 +
			int64(p.StartWeight)*refRound(refMul(q.startDelay, window, 1_000_000, 1)) +
			int64(p.ProvidersWeight)*(q.providers-1)*100_000 +
			int64(p.PreferredWeight)*notPrefPermil*1000
		if p.CostWeight+p.CarbonWeight+p.ReliabilityWeight+p.StartWeight+p.ProvidersWeight+p.PreferredWeight == 0 {
			q.score = costTerm // no weights: cost alone
		}
	}
	slices.SortFunc(qs, func(a, b refSplitQuote) int {
		for _, d := range []int64{a.score - b.score, a.cost - b.cost, a.startDelay - b.startDelay, a.providers - b.providers, a.left - b.left} {
			if d != 0 {
				return int(max(-1, min(1, d)))
			}
		}
		for i := 0; i < len(a.pieces) && i < len(b.pieces); i++ {
			pa, pb := a.pieces[i], b.pieces[i]
			if d := pa.r.c.Offer.ID - pb.r.c.Offer.ID; d != 0 {
				return int(d)
			}
			if d := pa.devices - pb.devices; d != 0 {
				return d
			}
		}
		return len(a.pieces) - len(b.pieces)
	})
	return qs, offers
}

// TestSplitEarlyStopTopQuotesExact: on thousands of random markets, a
// split request's early-stopping walk returns exactly the quotes of an
// exhaustive reference — every piece's offer, devices and start, each
// quote's cost, score and rank — and counts that are lower bounds, exact
// when the result says Exhaustive; the engine without the stop gives the
// same quotes.
func TestSplitEarlyStopTopQuotesExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(43, 44))
	stopped, tied, combos := 0, 0, 0
	const runs = 2500
	for i := range runs {
		in := splitStopInstance(rng)
		idx := stopTestIndex(t, in.cands, in.commits, i%2 == 1)
		res, err := idx.Match(in.req, in.now)
		if err != nil {
			t.Fatal(err)
		}
		want, offers := refRankSplit(in)
		all := len(want)
		if len(want) > in.req.Limit {
			if want[in.req.Limit-1].score == want[in.req.Limit].score {
				tied++
			}
			want = want[:in.req.Limit]
		}
		if len(res.Quotes) != len(want) {
			t.Fatalf("instance %d: %d quotes, reference %d (%+v)", i, len(res.Quotes), len(want), res.Explanation)
		}
		lo := max(in.now.Unix(), in.req.Constraints.EarliestStart.Unix())
		for k, q := range res.Quotes {
			r := want[k]
			same := len(q.Pieces) == len(r.pieces) && int64(q.Cost.Total) == r.cost && q.Score == r.score &&
				q.Start.Unix()-lo == r.startDelay && int64(q.Providers) == r.providers && q.Rank == k+1
			for j := 0; same && j < len(q.Pieces); j++ {
				p, rp := q.Pieces[j], r.pieces[j]
				same = p.OfferID == rp.r.c.Offer.ID && p.Devices == rp.devices && p.Start.Equal(rp.start)
			}
			if !same {
				t.Fatalf("instance %d (%s, %d devices ≥ %d, limit %d): quote %d is %s\nreference %s",
					i, in.req.Workload.Kind, in.req.Workload.Devices, in.req.Workload.MinPieceDevices, in.req.Limit, k+1, fmtSplitQuote(q), fmtRefSplit(r))
			}
			if len(q.Pieces) > 1 {
				combos++
			}
		}
		// Counts: lower bounds of the reference's, exact when exhaustive.
		refCounts := map[Constraint]int{}
		refFit := 0
		for _, r := range offers {
			if r.reason == "" {
				refFit++
			} else {
				refCounts[r.reason]++
			}
		}
		ex := res.Explanation
		sum := ex.Fit + ex.Skipped
		for _, e := range ex.Eliminated {
			sum += e.Count
			if e.Count > refCounts[e.Constraint] || (res.Exhaustive && e.Count != refCounts[e.Constraint]) {
				t.Fatalf("instance %d: %d %s, reference %d (exhaustive %t)", i, e.Count, e.Constraint, refCounts[e.Constraint], res.Exhaustive)
			}
		}
		if sum != ex.Considered || ex.Considered != len(in.cands) {
			t.Fatalf("instance %d: counts add to %d, considered %d, offers %d", i, sum, ex.Considered, len(in.cands))
		}
		if ex.Fit > refFit || res.Total > all || (res.Exhaustive && (ex.Fit != refFit || res.Total != all)) {
			t.Fatalf("instance %d: fit %d total %d, reference %d and %d (exhaustive %t)", i, ex.Fit, res.Total, refFit, all, res.Exhaustive)
		}
		if res.Exhaustive != (ex.Skipped == 0) {
			t.Fatalf("instance %d: exhaustive %t with %d skipped", i, res.Exhaustive, ex.Skipped)
		}
		if ex.Skipped > 0 {
			stopped++
			if s := ex.Summary(); !strings.HasPrefix(s, "at least ") || !strings.Contains(s, fmt.Sprintf("%d not evaluated", ex.Skipped)) {
				t.Fatalf("instance %d: summary %q", i, s)
			}
		}
		full, err := idx.exhaustive(in.req, in.now)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(full.Quotes) != fmt.Sprint(res.Quotes) || !full.Exhaustive || full.Total != all {
			t.Fatalf("instance %d: exhaustive engine differs", i)
		}
		// Within a work budget the walk runs over the offers the budget
		// keeps, and answers as the engine without the stop does over them.
		b := Budget{Offers: 1 + rng.IntN(len(in.cands))}
		cut, err := idx.MatchWithin(in.req, in.now, b)
		if err != nil {
			t.Fatal(err)
		}
		cutFull, err := idx.eng.run(pruned{idx}, in.req, in.now, true, false, b, nil)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(cut.Quotes) != fmt.Sprint(cutFull.Quotes) || cut.Explanation.Cut != cutFull.Explanation.Cut {
			t.Fatalf("instance %d: within %d offers the walk gives\n%v\nwithout the stop\n%v", i, b.Offers, cut.Quotes, cutFull.Quotes)
		}
	}
	t.Logf("%d of %d instances stopped early; %d with a tie on the last quote's score; %d combinations quoted", stopped, runs, tied, combos)
	if stopped < runs/4 || tied < runs/50 || combos < runs/4 {
		t.Fatalf("only %d instances stopped early, %d tied at the limit, %d combinations: the generator no longer tests the walk", stopped, tied, combos)
	}
}

func fmtSplitQuote(q Quote) string {
	s := fmt.Sprintf("cost %d score %d start %s providers %d:", q.Cost.Total, q.Score, q.Start.Format(time.RFC3339), q.Providers)
	for _, p := range q.Pieces {
		s += fmt.Sprintf(" %d×offer %d at %s", p.Devices, p.OfferID, p.Start.Format(time.RFC3339))
	}
	return s
}

func fmtRefSplit(q refSplitQuote) string {
	s := fmt.Sprintf("cost %d score %d delay %ds providers %d left %d:", q.cost, q.score, q.startDelay, q.providers, q.left)
	for _, p := range q.pieces {
		s += fmt.Sprintf(" %d×offer %d at %s", p.devices, p.r.c.Offer.ID, p.start.Format(time.RFC3339))
	}
	return s
}
