package market

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// earlyStopInstance is a gang request over a market large enough, and a
// Limit small enough, that the index's walk stops early: many offers on
// few prices, carbon intensities and providers, some exact copies of
// another (ties on everything but the id), preferences of every kind.
func earlyStopInstance(rng *rand.Rand) instance {
	var in instance
	in.now = t0.Add(time.Duration(rng.IntN(6)) * time.Hour)
	prices := []Cents{100, 120, 150, 151, 200, 300}
	n := 20 + rng.IntN(100)
	for i := range n {
		id := int64(i + 1)
		var c Candidate
		if i > 0 && rng.IntN(6) == 0 { // a copy: ties on every metric
			c = in.cands[rng.IntN(len(in.cands))]
			c.Offer.ID = id
		} else {
			o := randomOffer(rng, id)
			o.PriceCentsPerDeviceHour = prices[rng.IntN(len(prices))]
			if o.Interruptible {
				o.InterruptibleCentsPerDH = o.PriceCentsPerDeviceHour * Cents(5+rng.IntN(6)) / 10
			}
			o.CarbonGPerKWh = []int{30, 200, 450}[rng.IntN(3)]
			if rng.IntN(2) == 0 {
				o.StorageCentsPerGBMonth, o.EgressCentsPerGB, o.ProvisioningMins = 0, 0, 0
			}
			c = Candidate{Offer: o, ReliabilityBP: []int{0, 9000, 9900, 10000}[rng.IntN(4)]}
			if o.Interruptible {
				c.InterruptionPPMPerHour = rng.IntN(50_000)
			}
		}
		in.cands = append(in.cands, c)
		for range rng.IntN(3) {
			s := c.Offer.AvailableFrom.Add(time.Duration(rng.IntN(30)) * time.Hour)
			in.commits = append(in.commits, randomCommitment(rng, c.Offer, s, s.Add(time.Duration(1+rng.IntN(12))*time.Hour)))
		}
	}
	devices := 1 + rng.IntN(4)
	in.req = Request{
		Workload: Workload{Kind: WorkTraining, Devices: devices, Hours: 1 + rng.IntN(6),
			CheckpointMins: rng.IntN(120), RestartMins: rng.IntN(20), DatasetGB: rng.IntN(300)},
		Limit: 1 + rng.IntN(5),
	}
	if rng.IntN(4) == 0 {
		in.req.Workload.Hours = 0
		in.req.Workload.WorkDeviceHours = int64(1 + rng.IntN(devices*12))
	}
	if rng.IntN(2) == 0 {
		in.req.Workload.DataRegionID = smallRegions[rng.IntN(len(smallRegions))]
	}
	c := &in.req.Constraints
	c.AllowInterruption = rng.IntN(2) == 0
	if rng.IntN(3) == 0 {
		c.Deadline = t0.Add(time.Duration(30+rng.IntN(40)) * time.Hour)
	}
	if rng.IntN(4) == 0 {
		c.MaxPricePerDeviceHour = prices[rng.IntN(len(prices))]
	}
	if rng.IntN(4) == 0 {
		c.RegionIDs = []string{smallRegions[rng.IntN(len(smallRegions))], smallRegions[rng.IntN(len(smallRegions))]}
	}
	p := &in.req.Preferences
	switch rng.IntN(3) {
	case 0: // cost alone
	case 1: // cost with one other
		p.CostWeight = 1 + rng.IntN(100)
		*[]*int{&p.CarbonWeight, &p.ReliabilityWeight, &p.StartWeight, &p.ProvidersWeight, &p.PreferredWeight}[rng.IntN(5)] = rng.IntN(101)
	default: // anything, cost perhaps not at all
		for _, w := range []*int{&p.CostWeight, &p.CarbonWeight, &p.ReliabilityWeight, &p.StartWeight, &p.ProvidersWeight, &p.PreferredWeight} {
			*w = rng.IntN(3) * rng.IntN(51)
		}
	}
	if p.PreferredWeight > 0 || rng.IntN(3) == 0 {
		p.PreferredAcceleratorIDs = []string{smallAccs[rng.IntN(len(smallAccs))]}
		if rng.IntN(2) == 0 {
			p.PreferredRegionIDs = []string{smallRegions[rng.IntN(len(smallRegions))]}
		}
	}
	return in
}

// refGangQuote is the reference's gang quote on one offer.
type refGangQuote struct {
	id                         int64
	cost, startDelay, left     int64
	held                       int64 // devices out of sale: the gang's, or all of its whole nodes'
	score                      int64
	emissions, reliabilityBP   int64
	carbon, notPreferredPermil int64
}

// refRankGang is the exhaustive reference: every offer classified by the
// reference (refClassify), every fit priced and scored by the documented
// fixed scales, all sorted by the documented order. It shares no code with
// the engine's walk, ranking or scoring.
func refRankGang(in instance) ([]refGangQuote, []refOffer) {
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
	var qs []refGangQuote
	for _, r := range offers {
		if r.reason != "" {
			continue
		}
		o := r.c.Offer
		rel := int64(r.c.ReliabilityBP)
		if rel == 0 {
			rel = 9500
		}
		q := refGangQuote{id: o.ID, cost: int64(refPieceCost(w, r.c, w.Devices, r.hours, r.intr).Total),
			startDelay: r.start.Unix() - lo.Unix(), emissions: refEmissions(o, w.Devices, r.hours),
			reliabilityBP: rel, carbon: int64(o.CarbonGPerKWh)}
		if !refIn(p.PreferredAcceleratorIDs, o.AcceleratorID) && !refIn(p.PreferredRegionIDs, o.RegionID) {
			q.notPreferredPermil = 1000
		}
		// What the placement leaves free on the node it uses: best fit
		// for a gang within a node, nothing for whole nodes, which it
		// holds entirely.
		q.held = int64(w.Devices)
		if w.Devices > o.DevicesPerNode {
			q.held = int64((w.Devices + o.DevicesPerNode - 1) / o.DevicesPerNode * o.DevicesPerNode)
		}
		if w.Devices <= o.DevicesPerNode {
			shares := refPlacement(o, in.commits, Commitment{OfferID: o.ID, Devices: w.Devices, Start: r.start,
				End: r.start.Add(time.Duration(r.hours) * time.Hour), Gang: true})
			q.left = int64(refNodeFree(o, in.commits, shares[0].Node, r.start, r.hours) - w.Devices)
		}
		qs = append(qs, q)
	}
	minCost := int64(-1)
	for _, q := range qs {
		if minCost < 0 || q.cost < minCost {
			minCost = q.cost
		}
	}
	for i := range qs {
		q := &qs[i]
		// cost: 1,000,000 per 100 % over the cheapest; carbon: per 1,000
		// g/kWh; unreliability: per 100 points; start: per window;
		// providers: none beyond the first here; preference: per share.
		q.score = int64(p.CostWeight)*refRound(refMul(q.cost-minCost, minCost, 1_000_000, 1)) +
			int64(p.CarbonWeight)*q.carbon*1000 +
			int64(p.ReliabilityWeight)*(10000-q.reliabilityBP)*100 +
			int64(p.StartWeight)*refRound(refMul(q.startDelay, window, 1_000_000, 1)) +
			int64(p.PreferredWeight)*q.notPreferredPermil*1000
		if p.CostWeight+p.CarbonWeight+p.ReliabilityWeight+p.StartWeight+p.ProvidersWeight+p.PreferredWeight == 0 {
			q.score = refRound(refMul(q.cost-minCost, minCost, 1_000_000, 1)) // no weights: cost alone
		}
	}
	slices.SortFunc(qs, func(a, b refGangQuote) int {
		for _, d := range []int64{a.score - b.score, a.cost - b.cost, a.startDelay - b.startDelay, a.held - b.held, a.left - b.left, a.id - b.id} {
			if d != 0 {
				if d < 0 {
					return -1
				}
				return 1
			}
		}
		return 0
	})
	return qs, offers
}

// stopTestIndex is an index of cands and commits, loaded at once or, with
// oneByOne, built update by update with a third of the offers listed twice
// (removed and listed again), so its bounds have only widened.
func stopTestIndex(t *testing.T, cands []Candidate, commits []Commitment, oneByOne bool) *Index {
	t.Helper()
	idx := NewIndex()
	if !oneByOne {
		if err := idx.Load(cands, commits); err != nil {
			t.Fatal(err)
		}
		return idx
	}
	for _, c := range commits {
		idx.AddCommitment(c)
	}
	for _, c := range cands {
		if err := idx.Upsert(c); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range cands[:len(cands)/3] {
		idx.Remove(c.Offer.ID)
		if err := idx.Upsert(c); err != nil {
			t.Fatal(err)
		}
	}
	return idx
}

// TestEarlyStopTopQuotesExact: on thousands of random markets, the
// index's early-stopping walk returns exactly the quotes of an exhaustive
// reference — offers, order, costs, starts and scores — and counts that
// are lower bounds, exact when the result says Exhaustive.
func TestEarlyStopTopQuotesExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 42))
	stopped, tied := 0, 0
	const runs = 2500
	for i := range runs {
		in := earlyStopInstance(rng)
		idx := stopTestIndex(t, in.cands, in.commits, i%2 == 1)
		res, err := idx.Match(in.req, in.now)
		if err != nil {
			t.Fatal(err)
		}
		want, offers := refRankGang(in)
		if len(want) > in.req.Limit {
			if want[in.req.Limit-1].score == want[in.req.Limit].score {
				tied++
			}
			want = want[:in.req.Limit]
		}
		if len(res.Quotes) != len(want) {
			t.Fatalf("instance %d: %d quotes, reference %d (%+v)", i, len(res.Quotes), len(want), res.Explanation)
		}
		for k, q := range res.Quotes {
			r := want[k]
			if q.Pieces[0].OfferID != r.id || int64(q.Cost.Total) != r.cost || q.Score != r.score ||
				q.Start.Unix()-max(in.now.Unix(), in.req.Constraints.EarliestStart.Unix()) != r.startDelay || q.Rank != k+1 {
				t.Fatalf("instance %d: quote %d is offer %d cost %d score %d start %s; reference offer %d cost %d score %d delay %ds\nreference %+v",
					i, k+1, q.Pieces[0].OfferID, q.Cost.Total, q.Score, q.Start, r.id, r.cost, r.score, r.startDelay, want)
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
		if ex.Fit > refFit || res.Total != ex.Fit || (res.Exhaustive && ex.Fit != refFit) {
			t.Fatalf("instance %d: fit %d total %d, reference %d (exhaustive %t)", i, ex.Fit, res.Total, refFit, res.Exhaustive)
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
		// The engine without the early stop gives the same quotes.
		full, err := idx.exhaustive(in.req, in.now)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(full.Quotes) != fmt.Sprint(res.Quotes) || !full.Exhaustive || full.Total != refFit {
			t.Fatalf("instance %d: exhaustive engine differs", i)
		}
	}
	t.Logf("%d of %d instances stopped early; %d with a tie on the last quote's score", stopped, runs, tied)
	if stopped < runs/4 || tied < runs/50 {
		t.Fatalf("only %d instances stopped early and %d tied at the limit: the generator no longer tests the walk", stopped, tied)
	}
}
