package workflow

import (
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// TestSpotClearingPricesInterruptibleQuotes: a quote for a block of an
// offer's interruptible capacity is priced at the offer's latest spot
// clearing, never below the floor nor above the on-demand price, so the
// quote is no way around the auction. Prices by hand: floor 100¢, on-demand
// 249¢ (the fixture's offer); one 4-device hour, bids of 150¢ and 120¢
// for 4 devices each: the 150¢ bid wins and, since a bid lost, pays the
// lowest winning maximum, 150¢.
func TestSpotClearingPricesInterruptibleQuotes(t *testing.T) {
	f := newFixture(t, nil)
	o := f.spotOffer()
	a, b := f.buyer, f.user("b@example.com")
	f.saveCard(a.ID, "4242 4242 4242 4242")
	f.saveCard(b.ID, "4242 4242 4242 4242")
	start := t0.Add(60 * time.Hour)
	req := market.Request{Workload: market.Workload{Kind: market.WorkBatch, Devices: 4, Hours: 10},
		Constraints: market.Constraints{EarliestStart: start, Deadline: start.Add(10 * time.Hour), OfferIDs: []int64{o.ID}, AllowInterruption: true}}
	quoted := func() market.Cents {
		t.Helper()
		res, err := f.wf.Index().Match(req, f.now)
		if err != nil || len(res.Quotes) == 0 || !res.Quotes[0].Pieces[0].Interruptible {
			t.Fatalf("quotes %+v, %v", res.Quotes, err)
		}
		return res.Quotes[0].Pieces[0].PriceCents
	}
	if got := quoted(); got != 100 {
		t.Fatalf("before any clearing the interruptible quote is %d¢, want the floor 100¢", got)
	}

	clear := func(hour time.Time, bids ...market.Cents) {
		t.Helper()
		for i, max := range bids {
			u := a
			if i%2 == 1 {
				u = b
			}
			f.bid(u, o, 4, max, hour, hour)
		}
		res, err := f.wf.ClearSpot(f.ctx, o.ID, hour, hour.Add(-30*time.Minute))
		if err != nil || res.Clearing.DevicesSold != 4 {
			t.Fatalf("clearing %+v, %v", res, err)
		}
	}
	h := t0.Add(3 * time.Hour)
	clear(h, 150, 120)
	if got := quoted(); got != 150 {
		t.Fatalf("after a clearing at 150¢ the interruptible quote is %d¢, want 150¢", got)
	}
	if err := f.wf.ReloadIndex(f.ctx); err != nil {
		t.Fatal(err)
	}
	if got := quoted(); got != 150 {
		t.Fatalf("after a reload the interruptible quote is %d¢, want 150¢", got)
	}
	clear(h.Add(time.Hour), 400, 300)
	if got := quoted(); got != 249 {
		t.Fatalf("after a clearing at 400¢ the interruptible quote is %d¢, want the on-demand price 249¢", got)
	}
	f.now = h.Add(time.Hour + market.SpotQuoteWindow + time.Minute)
	if err := f.wf.ReloadIndex(f.ctx); err != nil {
		t.Fatal(err)
	}
	if got := quoted(); got != 100 {
		t.Fatalf("a day after the last clearing the interruptible quote is %d¢, want the floor 100¢", got)
	}
	f.requireReconciled()
}

// TestSpotHourExtendsAtTheSpotQuotePrice: extending a won spot hour books
// the next hours as a block of interruptible capacity, priced as a quote
// would price it — at the latest clearing (150¢, by hand as above), not the
// floor (100¢).
func TestSpotHourExtendsAtTheSpotQuotePrice(t *testing.T) {
	f := newFixture(t, nil)
	o := f.spotOffer()
	a, b := f.buyer, f.user("b@example.com")
	f.saveCard(a.ID, "4242 4242 4242 4242")
	f.saveCard(b.ID, "4242 4242 4242 4242")
	h := t0.Add(3 * time.Hour)
	f.bid(a, o, 4, 150, h, h)
	f.bid(b, o, 4, 120, h, h)
	res, err := f.wf.ClearSpot(f.ctx, o.ID, h, h.Add(-30*time.Minute))
	if err != nil || len(res.Awards) != 1 || res.Clearing.PriceCents != 150 {
		t.Fatalf("clearing %+v, %v", res, err)
	}
	won := res.Awards[0].Reservation
	f.now = h.Add(10 * time.Minute)
	if _, err := f.db.AdvanceReservations(f.ctx, f.now); err != nil {
		t.Fatal(err)
	}
	q, err := f.wf.QuoteExtension(f.ctx, a.ID, won.ID, 2)
	if err != nil {
		t.Fatalf("extension of the spot hour: %v", err)
	}
	p := q.Extension.Pieces[0]
	if !p.Interruptible || p.PriceCents != 150 || p.AmountCents != 4*2*150 {
		t.Fatalf("extension piece %+v: want interruptible at 150¢, 1,200¢ for 4 devices × 2 h", p)
	}
	f.requireReconciled()
}
