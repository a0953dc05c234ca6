package market

import (
	"math/rand/v2"
	"testing"
	"time"
)

func orderRequest() Request {
	return Request{Workload: Workload{Kind: WorkTraining, Devices: 8, Hours: 10},
		Constraints: Constraints{EarliestStart: t0.Add(24 * time.Hour), Deadline: t0.Add(10 * 24 * time.Hour)}}
}

func TestValidateStandingOrder(t *testing.T) {
	now := t0
	good := func() StandingOrder {
		return StandingOrder{Request: orderRequest(), LimitKind: LimitPerRefDeviceHour, LimitCents: 300,
			FillBy: now.Add(48 * time.Hour), OnFill: FillHold}
	}
	cases := []struct {
		name  string
		edit  func(o *StandingOrder)
		field string // "" = valid
	}{
		{"valid", func(o *StandingOrder) {}, ""},
		{"budget valid", func(o *StandingOrder) { o.LimitKind, o.LimitCents, o.OnFill = LimitTotalBudget, 100_000, FillPay }, ""},
		{"no limit kind", func(o *StandingOrder) { o.LimitKind = "" }, "limit_kind"},
		{"zero limit", func(o *StandingOrder) { o.LimitCents = 0 }, "limit"},
		{"negative limit", func(o *StandingOrder) { o.LimitCents = -5 }, "limit"},
		{"huge limit", func(o *StandingOrder) { o.LimitCents = MaxBudgetCents + 1 }, "limit"},
		{"no fill-by", func(o *StandingOrder) { o.FillBy = time.Time{} }, "fill_by"},
		{"fill-by in the past", func(o *StandingOrder) { o.FillBy = now.Add(-time.Hour) }, "fill_by"},
		{"fill-by too soon", func(o *StandingOrder) { o.FillBy = now.Add(59 * time.Minute) }, "fill_by"},
		{"fill-by exactly 60 days", func(o *StandingOrder) {
			o.FillBy = now.Add(60 * 24 * time.Hour)
			o.Request.Constraints.Deadline = time.Time{}
		}, ""},
		{"fill-by past 60 days", func(o *StandingOrder) { o.FillBy = now.Add(60*24*time.Hour + time.Second) }, "fill_by"},
		{"fill-by at the deadline", func(o *StandingOrder) { o.FillBy = o.Request.Constraints.Deadline }, "fill_by"},
		{"no on-fill", func(o *StandingOrder) { o.OnFill = "later" }, "on_fill"},
		{"bad request", func(o *StandingOrder) { o.Request.Workload.Devices = 0 }, "request"},
	}
	for _, c := range cases {
		o := good()
		c.edit(&o)
		err := ValidateStandingOrder(&o, now)
		fields := FieldErrors(err)
		if c.field == "" {
			if err != nil {
				t.Errorf("%s: %v %v", c.name, err, fields)
			}
			continue
		}
		if ErrorCode(err) != CodeInvalid || fields[c.field] == "" || len(fields) != 1 {
			t.Errorf("%s: fields %v, want only %s", c.name, fields, c.field)
		}
	}
}

func TestAcceptsAndAcceptableQuote(t *testing.T) {
	price := StandingOrder{LimitKind: LimitPerRefDeviceHour, LimitCents: 200}
	budget := StandingOrder{LimitKind: LimitTotalBudget, LimitCents: 10_000}
	q := func(rank int, perRef, total Cents) Quote {
		return Quote{Rank: rank, CentsPerRefDeviceHour: perRef, Cost: CostBreakdown{Total: total}}
	}
	cases := []struct {
		o    StandingOrder
		q    Quote
		want bool
	}{
		{price, q(1, 200, 1), true},
		{price, q(1, 201, 1), false},
		{price, q(1, 0, 1), false}, // no work delivered: no price to compare
		{budget, q(1, 999_999, 10_000), true},
		{budget, q(1, 1, 10_001), false},
		{StandingOrder{LimitKind: "other", LimitCents: 1 << 40}, q(1, 1, 1), false},
	}
	for i, c := range cases {
		if got := c.o.Accepts(c.q); got != c.want {
			t.Errorf("case %d: Accepts = %v, want %v", i, got, c.want)
		}
	}
	got, ok := price.AcceptableQuote([]Quote{q(1, 250, 5), q(2, 199, 9), q(3, 150, 3)})
	if !ok || got.Rank != 2 {
		t.Errorf("AcceptableQuote = rank %d %v, want the best-ranked acceptable (2)", got.Rank, ok)
	}
	if _, ok := price.AcceptableQuote([]Quote{q(1, 250, 5)}); ok {
		t.Error("AcceptableQuote found one above the limit")
	}
}

func TestOrderPriorityIsTimeThenID(t *testing.T) {
	orders := []StandingOrder{
		{ID: 4, CreatedAt: t0.Add(time.Minute), LimitCents: 999},
		{ID: 3, CreatedAt: t0, LimitCents: 1},
		{ID: 1, CreatedAt: t0.Add(time.Minute), LimitCents: 5},
		{ID: 2, CreatedAt: t0.Add(-time.Hour), LimitCents: 5},
	}
	SortByPriority(orders)
	want := []int64{2, 3, 1, 4}
	for i, o := range orders {
		if o.ID != want[i] {
			t.Fatalf("order %d is %d, want %v", i, o.ID, want)
		}
	}
}

func TestLapseRule(t *testing.T) {
	day := 24 * time.Hour
	cases := []struct {
		name   string
		lapses []time.Time
		now    time.Time
		until  time.Time
		block  bool
	}{
		{"none", nil, t0, time.Time{}, false},
		{"one", []time.Time{t0}, t0.Add(time.Hour), time.Time{}, false},
		{"two within 30 days", []time.Time{t0.Add(20 * day), t0}, t0.Add(21 * day), t0.Add(27 * day), true},
		{"two within 30 days, block over", []time.Time{t0, t0.Add(20 * day)}, t0.Add(27 * day), t0.Add(27 * day), false},
		{"exactly 30 days apart", []time.Time{t0, t0.Add(30 * day)}, t0.Add(31 * day), t0.Add(37 * day), true},
		{"31 days apart", []time.Time{t0, t0.Add(31 * day)}, t0.Add(32 * day), time.Time{}, false},
		{"third renews", []time.Time{t0, t0.Add(day), t0.Add(10 * day)}, t0.Add(12 * day), t0.Add(17 * day), true},
	}
	for _, c := range cases {
		until, block := StandingOrdersBlockedUntil(c.lapses, c.now)
		if !until.Equal(c.until) || block != c.block {
			t.Errorf("%s: until %s block %v, want %s %v", c.name, until, block, c.until, c.block)
		}
	}
}

func TestMayServe(t *testing.T) {
	const h100, a100 = "nvidia-h100-80gb-sxm", "nvidia-a100-80gb-sxm"
	o := plainOffer(7, h100, "us-west-or", 8, 200)
	cases := []struct {
		name string
		c    Constraints
		want bool
	}{
		{"any", Constraints{}, true},
		{"pinned to it", Constraints{OfferIDs: []int64{3, 7}}, true},
		{"pinned elsewhere", Constraints{OfferIDs: []int64{3}}, false},
		{"its model", Constraints{AcceleratorIDs: []string{h100}}, true},
		{"another model", Constraints{AcceleratorIDs: []string{a100}}, false},
		{"its family", Constraints{Families: []string{"H100"}}, true},
		{"another family", Constraints{Families: []string{"A100"}}, false},
		{"memory met", Constraints{MinMemoryGB: 80}, true},
		{"memory not met", Constraints{MinMemoryGB: 81}, false},
		{"its region", Constraints{RegionIDs: []string{"us-west-or"}}, true},
		{"another region", Constraints{RegionIDs: []string{"eu-central-de"}}, false},
		{"its country", Constraints{Countries: []string{"US"}}, true},
		{"another country", Constraints{Countries: []string{"DE"}}, false},
	}
	for _, c := range cases {
		if got := MayServe(o, Request{Constraints: c.c}); got != c.want {
			t.Errorf("%s: MayServe = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestStandingOrderFillsAgainstBruteForce: random standing orders (placed
// at random times, some at the same second, with random limits and
// models) wait on an index of random offers; then capacity appears (a new
// offer, or a booking's devices freed). The pass the workflow runs
// (SortByPriority, then NextFill and the fill's commitment, on the orders
// after the filled one) must fill, at each step, exactly the order a brute
// force names: among every order not yet filled, the one placed first
// (then the lowest id) that has a quote within its limit on the index as
// it stands — found by a linear scan that compares the times and limits
// itself. The quote filled must be the best-ranked within the limit.
func TestStandingOrderFillsAgainstBruteForce(t *testing.T) {
	const h100, a100 = "nvidia-h100-80gb-sxm", "nvidia-a100-80gb-sxm"
	slot := t0.Add(24 * time.Hour)
	fills := 0
	for seed := uint64(1); seed <= 300; seed++ {
		rng := rand.New(rand.NewPCG(seed, 15))
		accs := []string{h100, a100}
		idx := NewIndex()
		var nextOffer int64 = 100
		addOffer := func() int64 {
			nextOffer++
			o := plainOffer(nextOffer, accs[rng.IntN(2)], "us-west-or", 8, Cents(100+rng.IntN(300)))
			if err := idx.Upsert(Candidate{Offer: o, ReliabilityBP: 9900}); err != nil {
				t.Fatal(err)
			}
			return o.ID
		}
		// Busy offers: their devices are taken over the orders' window.
		var busy []Commitment
		for range 1 + rng.IntN(3) {
			id := addOffer()
			c := Commitment{OfferID: id, Devices: 8, Start: slot, End: slot.Add(10 * time.Hour)}
			idx.AddCommitment(c)
			busy = append(busy, c)
		}
		n := 2 + rng.IntN(7)
		orders := make([]StandingOrder, n)
		ids := rng.Perm(50)
		for i := range orders {
			req := Request{Workload: Workload{Kind: WorkTraining, Devices: []int{2, 4, 8}[rng.IntN(3)], Hours: 10},
				Constraints: Constraints{EarliestStart: slot, Deadline: slot.Add(10 * time.Hour)}}
			switch rng.IntN(3) {
			case 0:
				req.Constraints.AcceleratorIDs = []string{h100}
			case 1:
				req.Constraints.AcceleratorIDs = []string{a100}
			}
			orders[i] = StandingOrder{ID: int64(ids[i] + 1), Request: req, LimitKind: LimitPerRefDeviceHour,
				LimitCents: Cents(50 + rng.IntN(500)), FillBy: t0.Add(48 * time.Hour), OnFill: FillHold, State: OrderOpen,
				CreatedAt: t0.Add(-time.Duration(rng.IntN(4)) * time.Minute)}
			if rng.IntN(4) == 0 {
				orders[i].LimitKind, orders[i].LimitCents = LimitTotalBudget, Cents(1000+rng.IntN(30000))
			}
		}
		// Capacity appears: a new offer, or a busy offer's devices freed.
		if rng.IntN(2) == 0 || len(busy) == 0 {
			addOffer()
		} else {
			c := busy[rng.IntN(len(busy))]
			idx.SetCommitments(c.OfferID, nil)
		}
		now := t0
		match := func(r Request) (Result, error) { return idx.Match(r, now) }

		remaining := map[int]bool{} // indexes into orders not yet filled
		for i := range orders {
			remaining[i] = true
		}
		open := append([]StandingOrder(nil), orders...)
		SortByPriority(open)
		for step := 0; ; step++ {
			// The brute force, on the index as it stands.
			want, wantOK := -1, false
			for i := range orders {
				if !remaining[i] {
					continue
				}
				r := orders[i].Request
				r.Limit = MaxQuoteLimit
				res, err := idx.Match(r, now)
				if err != nil {
					continue
				}
				eligible := false
				for _, q := range res.Quotes {
					if orders[i].LimitKind == LimitPerRefDeviceHour && q.CentsPerRefDeviceHour > 0 && q.CentsPerRefDeviceHour <= orders[i].LimitCents ||
						orders[i].LimitKind == LimitTotalBudget && q.Cost.Total <= orders[i].LimitCents {
						eligible = true
						break
					}
				}
				if !eligible {
					continue
				}
				if !wantOK || orders[i].CreatedAt.Before(orders[want].CreatedAt) ||
					orders[i].CreatedAt.Equal(orders[want].CreatedAt) && orders[i].ID < orders[want].ID {
					want, wantOK = i, true
				}
			}
			i, q, ok := NextFill(open, match, now)
			if ok != wantOK {
				t.Fatalf("seed %d step %d: NextFill found a fill %v, brute force %v", seed, step, ok, wantOK)
			}
			if !ok {
				break
			}
			got := open[i]
			w := orders[want]
			if got.ID != w.ID || !got.CreatedAt.Equal(w.CreatedAt) || got.LimitCents != w.LimitCents {
				t.Fatalf("seed %d step %d: filled order %d (placed %s), want %d (placed %s)", seed, step, got.ID, got.CreatedAt, w.ID, w.CreatedAt)
			}
			// The quote: the best-ranked within the limit.
			r := w.Request
			r.Limit = MaxQuoteLimit
			res, _ := idx.Match(r, now)
			for _, rq := range res.Quotes {
				within := w.LimitKind == LimitPerRefDeviceHour && rq.CentsPerRefDeviceHour > 0 && rq.CentsPerRefDeviceHour <= w.LimitCents ||
					w.LimitKind == LimitTotalBudget && rq.Cost.Total <= w.LimitCents
				if within {
					if rq.Rank != q.Rank || rq.Pieces[0].OfferID != q.Pieces[0].OfferID {
						t.Fatalf("seed %d: filled quote rank %d offer %d, want rank %d offer %d", seed, q.Rank, q.Pieces[0].OfferID, rq.Rank, rq.Pieces[0].OfferID)
					}
					break
				}
			}
			for _, p := range q.Pieces {
				idx.AddCommitment(p.Commitment())
			}
			delete(remaining, want)
			open = open[i+1:]
			fills++
		}
	}
	if fills < 100 {
		t.Fatalf("only %d fills over all seeds: the test does not exercise fills", fills)
	}
}
