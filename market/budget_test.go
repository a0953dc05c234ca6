package market

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"runtime"
	"sort"
	"sync"
	"testing"
	"time"
)

// budgetInstance is a random instance with a market of 8–40 offers, so a
// budget has something to cut.
func budgetInstance(rng *rand.Rand, kind WorkloadKind) instance {
	in := randomInstance(rng, kind)
	for id := int64(len(in.cands) + 1); id <= int64(8+rng.IntN(33)); id++ {
		o := randomOffer(rng, id)
		in.cands = append(in.cands, Candidate{Offer: o, ReliabilityBP: 9000 + rng.IntN(1001)})
		for range rng.IntN(3) {
			s := o.AvailableFrom.Add(time.Duration(rng.IntN(30)) * time.Hour)
			in.commits = append(in.commits, randomCommitment(rng, o, s, s.Add(time.Duration(1+rng.IntN(12))*time.Hour)))
		}
	}
	return in
}

// lowestPrice is the lowest price an offer sells at: its interruptible
// price when it sells one at or under the on-demand price.
func lowestPrice(o Offer) Cents {
	if o.Interruptible && o.InterruptibleCentsPerDH > 0 && o.InterruptibleCentsPerDH <= o.PriceCentsPerDeviceHour {
		return o.InterruptibleCentsPerDH
	}
	return o.PriceCentsPerDeviceHour
}

// examinedOnly is the instance's candidates that a cut examined, by its
// ceiling and last id: every offer cheaper than the ceiling, and those at
// it up to the last id.
func examinedOnly(cands []Candidate, cut Cut) []Candidate {
	var out []Candidate
	for _, c := range cands {
		p := lowestPrice(c.Offer)
		if p < cut.PriceCeiling || (p == cut.PriceCeiling && c.Offer.ID <= cut.lastID) {
			out = append(out, c)
		}
	}
	return out
}

func indexOf(t *testing.T, in instance) *Index {
	t.Helper()
	idx := NewIndex()
	if err := idx.Load(in.cands, in.commits); err != nil {
		t.Fatal(err)
	}
	return idx
}

// TestMatchWithinIsMatchOverTheCheapest checks, on random markets and
// budgets, that a match within a budget is either the unbounded match
// (nothing cut) or exactly the unbounded matcher's answer over the offers
// with the lowest prices, as many as the budget allows, and says so.
func TestMatchWithinIsMatchOverTheCheapest(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	cuts, whole := 0, 0
	for i := range 1500 {
		in := budgetInstance(rng, []WorkloadKind{WorkTraining, WorkBatch, WorkInference}[i%3])
		idx := indexOf(t, in)
		visits, err := idx.Examines(in.req, in.now)
		if err != nil {
			t.Fatal(err)
		}
		b := Budget{Offers: 1 + rng.IntN(len(in.cands))}
		got, err := idx.MatchWithin(in.req, in.now, b)
		if err != nil {
			t.Fatal(err)
		}
		full, err := idx.Match(in.req, in.now)
		if err != nil {
			t.Fatal(err)
		}
		cut := got.Explanation.Cut
		if visits <= b.Offers {
			whole++
			if cut.Examined != 0 || cut.Unexamined != 0 {
				t.Fatalf("instance %d: %d offers to examine within a budget of %d, yet cut: %+v", i, visits, b.Offers, cut)
			}
			if fmt.Sprint(got.Quotes) != fmt.Sprint(full.Quotes) || got.Total != full.Total {
				t.Fatalf("instance %d: uncut match differs from Match:\n%v\n%v", i, got.Quotes, full.Quotes)
			}
			continue
		}
		cuts++
		if cut.Examined != b.Offers || cut.Unexamined != visits-b.Offers || !cut.Partial() || cut.Message() == "" {
			t.Fatalf("instance %d: %d to examine, budget %d: cut %+v", i, visits, b.Offers, cut)
		}
		ex := got.Explanation
		sum := ex.Fit + cut.Unexamined
		for _, el := range ex.Eliminated {
			sum += el.Count
		}
		if sum != ex.Considered || ex.Considered != len(in.cands) {
			t.Fatalf("instance %d: counts add to %d of %d considered (%d offers)", i, sum, ex.Considered, len(in.cands))
		}
		// The reference: the unbounded matcher over the examined offers
		// only, which must be the budget's worth, cheapest first.
		sub := examinedOnly(in.cands, cut)
		sort.Slice(sub, func(a, b int) bool {
			pa, pb := lowestPrice(sub[a].Offer), lowestPrice(sub[b].Offer)
			return pa < pb || (pa == pb && sub[a].Offer.ID < sub[b].Offer.ID)
		})
		for _, c := range in.cands {
			p := lowestPrice(c.Offer)
			if p > cut.PriceCeiling || (p == cut.PriceCeiling && c.Offer.ID > cut.lastID) {
				continue
			}
			found := false
			for _, s := range sub {
				found = found || s.Offer.ID == c.Offer.ID
			}
			if !found {
				t.Fatalf("instance %d: offer %d at %s is under the cut but not in the reference", i, c.Offer.ID, p)
			}
		}
		ref, err := Match(sub, in.commits, in.req, in.now)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got.Quotes) != fmt.Sprint(ref.Quotes) || got.Total != ref.Total || ex.Fit != ref.Explanation.Fit {
			t.Fatalf("instance %d (budget %d of %d): cut match differs from Match over the examined offers:\n%v\n%v", i, b.Offers, visits, got.Quotes, ref.Quotes)
		}
		if n, _ := indexOf(t, instance{cands: sub, commits: in.commits}).Examines(in.req, in.now); n != b.Offers {
			t.Fatalf("instance %d: the examined offers are %d that the request looks at, want the budget's %d", i, n, b.Offers)
		}
	}
	if cuts < 300 || whole < 100 {
		t.Fatalf("%d cut and %d whole instances: the generator tests too little of one", cuts, whole)
	}
	t.Logf("%d cut, %d whole", cuts, whole)
}

// TestMatchWithinKeepsTheTopQuotes: ranked by cost alone, a cut match
// whose examined offers include every offer of the unbounded match's top
// quotes returns those same quotes in the same order (scores aside: they
// are normalised over what was examined).
func TestMatchWithinKeepsTheTopQuotes(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	kept := 0
	for i := range 3000 {
		in := budgetInstance(rng, WorkTraining)
		in.req.Preferences = Preferences{CostWeight: 1}
		in.req.Limit = 3
		idx := indexOf(t, in)
		full, err := idx.Match(in.req, in.now)
		if err != nil {
			t.Fatal(err)
		}
		if len(full.Quotes) == 0 {
			continue
		}
		got, err := idx.MatchWithin(in.req, in.now, Budget{Offers: 1 + rng.IntN(len(in.cands))})
		if err != nil {
			t.Fatal(err)
		}
		cut := got.Explanation.Cut
		if cut.Unexamined == 0 {
			continue
		}
		examined := map[int64]bool{}
		for _, c := range examinedOnly(in.cands, cut) {
			examined[c.Offer.ID] = true
		}
		all := true
		for _, q := range full.Quotes {
			for _, p := range q.Pieces {
				all = all && examined[p.OfferID]
			}
		}
		if !all {
			continue
		}
		kept++
		strip := func(qs []Quote) string {
			out := make([]Quote, len(qs))
			for k, q := range qs {
				q.Score = 0
				out[k] = q
			}
			return fmt.Sprint(out)
		}
		if len(got.Quotes) < len(full.Quotes) || strip(got.Quotes[:len(full.Quotes)]) != strip(full.Quotes) {
			t.Fatalf("instance %d: the best offers were examined, yet the top quotes differ:\n%v\n%v", i, got.Quotes, full.Quotes)
		}
	}
	if kept < 100 {
		t.Fatalf("only %d cut instances kept the best offers: the generator tests too little", kept)
	}
	t.Logf("%d cut instances examined the best offers", kept)
}

// TestCutMessage: the summary counts what was left out and the message
// tells a person what to do.
func TestCutMessage(t *testing.T) {
	e := Explanation{Considered: 1_000_000, Fit: 4, Eliminated: []Elimination{{Label: "wrong model", Count: 49_996}},
		Cut: Cut{Examined: 50_000, Unexamined: 950_000, PriceCeiling: 412}}
	if got, want := e.Summary(), "4 of 1,000,000 offers fit: 49,996 wrong model, 950,000 not examined (over the work budget; the 50,000 with the lowest prices were)"; got != want {
		t.Fatalf("summary\n got %q\nwant %q", got, want)
	}
	if got, want := e.Cut.Message(), "This request matches more offers than one search examines. These are the best quotes among the 50,000 offers with the lowest prices (up to $4.12 per device-hour); 950,000 dearer offers were not examined. Name models, regions or a maximum price to search them all."; got != want {
		t.Fatalf("message\n got %q\nwant %q", got, want)
	}
	if (Cut{}).Partial() || (Cut{}).Message() != "" {
		t.Fatal("the zero Cut reports a cut")
	}
	if m := (Cut{Relaxations: true}).Message(); m != "The suggested changes were searched within the same limit; nearer ones may exist." {
		t.Fatalf("relaxations message %q", m)
	}
}

// TestRelaxationsWithinBudget: when nothing fits, relaxations tried within
// a budget are real — each suggested request has quotes, at least as many
// as it says, in the unbounded matcher — and a budget that stopped some is
// flagged.
func TestRelaxationsWithinBudget(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 18))
	tried, flagged := 0, 0
	for i := range 3000 {
		in := budgetInstance(rng, []WorkloadKind{WorkTraining, WorkBatch, WorkInference}[i%3])
		idx := indexOf(t, in)
		full, err := idx.Match(in.req, in.now)
		if err != nil {
			t.Fatal(err)
		}
		if len(full.Quotes) > 0 || len(full.Explanation.Relaxations) == 0 {
			continue
		}
		tried++
		got, err := idx.MatchWithin(in.req, in.now, Budget{Offers: 1 + rng.IntN(20*len(in.cands))})
		if err != nil {
			t.Fatal(err)
		}
		if got.Explanation.Cut.Relaxations {
			flagged++
		} else if fmt.Sprint(got.Explanation.Relaxations) != fmt.Sprint(full.Explanation.Relaxations) {
			t.Fatalf("instance %d: relaxations not flagged as cut, yet differ:\n%v\n%v", i, got.Explanation.Relaxations, full.Explanation.Relaxations)
		}
		for _, r := range got.Explanation.Relaxations {
			res, err := idx.Match(r.Request, in.now)
			if err != nil || res.Total < r.Offers || r.Offers < 1 {
				t.Fatalf("instance %d: relaxation %q: %v, %d quotes unbounded", i, r.Message, err, res.Total)
			}
		}
	}
	if tried < 200 || flagged < 50 || tried-flagged < 50 {
		t.Fatalf("%d no-match instances, %d with relaxations cut: the generator tests too little", tried, flagged)
	}
	t.Logf("%d no-match instances, %d with relaxations cut", tried, flagged)
}

// TestMatchYielding: a yielding match answers exactly as MatchWithin,
// pausing as it works — a broad split over 20,000 offers that the early
// stop cannot take (48–80 devices: beyond its exact-path limits, see
// splitMayStop) takes some milliseconds, so dozens of pauses, a narrow one
// next to none — and never while a writer
// waits for the index: the write gets in as soon as the run ends.
func TestMatchYielding(t *testing.T) {
	idx := NewIndex()
	cands, commits := benchMarket(20_000)
	if err := idx.Load(cands, commits); err != nil {
		t.Fatal(err)
	}
	for _, req := range append(broadRequests()[2:], narrowRequests()[3]) {
		want, err := idx.MatchWithin(req, benchNow, DefaultBudget)
		if err != nil {
			t.Fatal(err)
		}
		pauses := 0
		got, err := idx.MatchYielding(req, benchNow, DefaultBudget, func() { pauses++ })
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s request: yielding answered\n%+v\nwant\n%+v", req.Workload.Kind, got, want)
		}
		if req.Workload.Kind == WorkBatch && pauses < 20 {
			t.Fatalf("broad request: %d pauses, want dozens", pauses)
		}
		if req.Workload.Kind == WorkTraining && pauses > 5 {
			t.Fatalf("narrow request: %d pauses, want next to none", pauses)
		}
	}

	req := broadRequests()[3]
	var wrote sync.WaitGroup
	pauses, whileWriting := 0, 0
	_, err := idx.MatchYielding(req, benchNow, DefaultBudget, func() {
		pauses++
		if pauses == 1 {
			wrote.Add(1)
			go func() {
				defer wrote.Done()
				idx.AddCommitment(commits[0])
			}()
			for idx.writers.Load() == 0 {
				runtime.Gosched()
			}
			return
		}
		whileWriting++
	})
	if err != nil {
		t.Fatal(err)
	}
	wrote.Wait()
	if pauses != 1 || whileWriting != 0 {
		t.Fatalf("%d pauses, %d of them while the writer waited; want the first only", pauses, whileWriting)
	}
}
