package workflow

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/billing"
	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
)

// spotOffer lists a 4-device offer selling interruptible capacity at a
// floor of 100¢ per device-hour with 30 minutes' preemption notice.
func (f *fixture) spotOffer() market.Offer {
	f.t.Helper()
	o := f.offer
	o.ID, o.Title, o.DevicesPerNode = 0, "4× H100 spot", 4
	o.Interruptible, o.InterruptibleCentsPerDH, o.PreemptNoticeMins = true, 100, 30
	o, err := f.db.CreateOffer(f.ctx, o, t0)
	if err != nil {
		f.t.Fatal(err)
	}
	if err := f.db.ReviewOffer(f.ctx, o.ID, market.ReviewApproved, "", t0); err != nil {
		f.t.Fatal(err)
	}
	return o
}

func (f *fixture) bid(u market.User, o market.Offer, devices int, max market.Cents, first, last time.Time) market.SpotBid {
	f.t.Helper()
	// Confirmed: some bids are above the 249¢ on-demand price (within 3×).
	b, err := f.wf.PlaceSpotBid(f.ctx, market.SpotBid{BuyerID: u.ID, OfferID: o.ID, Devices: devices, MaxCents: max, FirstHour: first, LastHour: last,
		ConfirmAboveOnDemand: true})
	if err != nil {
		f.t.Fatal(err)
	}
	return b
}

// spotHours is the buyer's won hours of one bid.
func (f *fixture) spotHours(u market.User, bidID int64) []store.SpotHourWon {
	f.t.Helper()
	rs, err := f.db.ListBuyerSpotBids(f.ctx, u.ID)
	if err != nil {
		f.t.Fatal(err)
	}
	for _, r := range rs {
		if r.Bid.ID == bidID {
			return r.Hours
		}
	}
	f.t.Fatalf("bid %d not listed for user %d", bidID, u.ID)
	return nil
}

// TestSpotMarketRun: two bids share a 4-device offer at the floor; a third,
// higher bid takes the next hour and preempts the lowest after the notice;
// the preempted bid wins the hour after again; a declining card's hold
// fails before the clearing, so its bid stops, never wins and never sets
// the price. Every hour is charged at its clearing price, at
// most the bid's maximum, the preemption gives no credit, and the books
// reconcile. Figures by hand: floor 100¢, 2 devices per bid.
func TestSpotMarketRun(t *testing.T) {
	f := newFixture(t, nil)
	f.onboard()
	o := f.spotOffer()
	a, b, c, d := f.buyer, f.user("b@example.com"), f.user("c@example.com"), f.user("d@example.com")
	for _, u := range []market.User{a, b, c} {
		f.saveCard(u.ID, "4242 4242 4242 4242")
	}
	h1 := t0.Add(2 * time.Hour) // 11:00
	h2, h3, h4 := h1.Add(time.Hour), h1.Add(2*time.Hour), h1.Add(3*time.Hour)

	// No saved card: refused before anything is stored.
	if _, err := f.wf.PlaceSpotBid(f.ctx, market.SpotBid{BuyerID: d.ID, OfferID: o.ID, Devices: 1, MaxCents: 500, FirstHour: h4, LastHour: h4}); market.ErrorCode(err) != market.CodeInvalid {
		t.Fatalf("bid without a saved card: %v", err)
	}
	f.saveCard(d.ID, "4000 0000 0000 0002") // declines every charge

	bidA := f.bid(a, o, 2, 150, h1, h3)
	bidB := f.bid(b, o, 2, 120, h1, h4)

	// 10:29: nothing due yet (11:00 less 30 minutes' notice is 10:30).
	f.tick(h1.Add(-31 * time.Minute))
	if len(f.spotHours(a, bidA.ID)) != 0 {
		t.Fatal("hour cleared before its clearing time")
	}
	// 10:30: 11:00 clears. Both fit: the price is the floor, 100¢; each pays 2 × 100¢.
	f.tick(h1.Add(-30 * time.Minute))
	for _, x := range []struct {
		u   market.User
		bid int64
	}{{a, bidA.ID}, {b, bidB.ID}} {
		hs := f.spotHours(x.u, x.bid)
		if len(hs) != 1 || hs[0].PriceCents != 100 || hs[0].State != market.ReservationConfirmed || !hs[0].Hour.Equal(h1) {
			t.Fatalf("user %d hours after 11:00 cleared: %+v", x.u.ID, hs)
		}
		if paid := f.ledgerSum(hs[0].ReservationID, market.EntryCharge); paid != 200 {
			t.Fatalf("11:00 charged %d, want 200", paid)
		}
	}
	// A third buyer outbids both for 12:00 with all 4 devices? No: 2 devices at 300¢.
	// 12:00 has 4 devices: C (300¢) and A (150¢) win, B (120¢) loses; the price is
	// the lowest winner's maximum, 150¢.
	bidC := f.bid(c, o, 2, 300, h2, h2)
	f.tick(h2.Add(-30 * time.Minute)) // 11:30
	hsA, hsB, hsC := f.spotHours(a, bidA.ID), f.spotHours(b, bidB.ID), f.spotHours(c, bidC.ID)
	if len(hsA) != 2 || hsA[1].PriceCents != 150 || len(hsC) != 1 || hsC[0].PriceCents != 150 || len(hsB) != 1 || !hsB[0].Preempted {
		t.Fatalf("12:00: a %+v b %+v c %+v", hsA, hsB, hsC)
	}
	if paid := f.ledgerSum(hsC[0].ReservationID, market.EntryCharge); paid != 300 {
		t.Fatalf("c charged %d for 12:00, want 2 × 150 = 300", paid)
	}
	// B lost 12:00: its hold of 2 × 120¢ is released, nothing received; no
	// hold is left on any card.
	if rel := f.paymentsInStatus("canceled"); len(rel) != 1 || rel[0].Amount != 240 || rel[0].AmountReceived != 0 {
		t.Fatalf("released holds after 12:00: %+v, want b's 240", rel)
	}
	if held := f.paymentsInStatus("requires_capture"); len(held) != 0 {
		t.Fatalf("holds left on cards after 12:00: %+v", held)
	}
	if !f.notified(b.ID, "preempted at 12:00 UTC, 30 minutes' notice") {
		t.Fatal("b is not told of the preemption")
	}
	incs, err := f.db.ListIncidents(f.ctx, hsB[0].ReservationID)
	if err != nil || len(incs) != 1 || incs[0].Kind != market.IncidentPreemption || !incs[0].Start.Equal(h2) {
		t.Fatalf("b's 11:00 incidents %+v, %v", incs, err)
	}

	// 13:00: C's window is over; A and B fit again at the floor. B wins again.
	f.tick(h3.Add(-30 * time.Minute))
	hsA, hsB = f.spotHours(a, bidA.ID), f.spotHours(b, bidB.ID)
	if len(hsA) != 3 || hsA[2].PriceCents != 100 || len(hsB) != 2 || hsB[1].PriceCents != 100 || !hsB[1].Hour.Equal(h3) {
		t.Fatalf("13:00: a %+v b %+v", hsA, hsB)
	}
	// 14:00: D bids all 4 devices at 500¢, which alone would win the hour at
	// 500¢ and preempt B. Its hold of 4 × 500¢ declines before the clearing:
	// the bid stops and sits the hour out, so B (2 devices at 120¢) is alone
	// and wins at the floor, 100¢, not preempted. A's window ended with 13:00.
	bidD := f.bid(d, o, 4, 500, h4, h4)
	f.tick(h4.Add(-30 * time.Minute))
	rsD, err := f.db.ListBuyerSpotBids(f.ctx, d.ID)
	if err != nil || len(rsD) != 1 || rsD[0].Bid.State != market.SpotBidCancelled || len(rsD[0].Hours) != 0 || rsD[0].Bid.ID != bidD.ID {
		t.Fatalf("d's bids %+v, %v", rsD, err)
	}
	if !f.notified(d.ID, fmt.Sprintf("Spot bid #%d stopped", bidD.ID)) {
		t.Fatal("d is not told its bid stopped")
	}
	hsA, hsB = f.spotHours(a, bidA.ID), f.spotHours(b, bidB.ID)
	if hsA[2].Preempted || hsB[1].Preempted || len(hsB) != 3 || hsB[2].PriceCents != 100 || !hsB[2].Hour.Equal(h4) ||
		hsB[2].State != market.ReservationConfirmed {
		t.Fatalf("14:00: a %+v b %+v", hsA, hsB)
	}
	if paid := f.paymentsOf(d.ID); paid != 0 {
		t.Fatalf("d's declining card was charged %d", paid)
	}

	// Run to the end and settle everything.
	for at := h4.Add(-29 * time.Minute); at.Before(h4.Add(3 * time.Hour)); at = at.Add(10 * time.Minute) {
		f.tick(at)
	}
	// The preempted 11:00 hour of B: charged in full, no SLA credit, no refund;
	// payout 200 less the 10% fee.
	s := f.settlement(hsB[0].ReservationID)
	if s.RefundCents != 0 || len(s.Transfers) != 1 || s.Transfers[0].Amount != 180 || s.Transfers[0].Fee != 20 || s.State != store.SettlementDone {
		t.Fatalf("b's preempted hour settled: refund %d transfers %+v state %s", s.RefundCents, s.Transfers, s.State)
	}
	for _, cl := range s.Statement.Pieces[0].Clauses {
		if cl.SLA {
			t.Fatalf("an SLA credit for a preemption: %+v", cl)
		}
	}
	// Every won hour: paid = price × devices ≤ max × devices; the provider got at least the floor before the fee.
	for _, x := range []struct {
		u   market.User
		bid market.SpotBid
	}{{a, bidA}, {b, bidB}, {c, bidC}} {
		for _, h := range f.spotHours(x.u, x.bid.ID) {
			paid := f.ledgerSum(h.ReservationID, market.EntryCharge)
			if paid != h.PriceCents*market.Cents(h.Devices) || h.PriceCents > x.bid.MaxCents || h.PriceCents < 100 {
				t.Fatalf("bid %d hour %s: paid %d at %d (max %d)", x.bid.ID, h.Hour, paid, h.PriceCents, x.bid.MaxCents)
			}
			st := f.settlement(h.ReservationID)
			if st.Transfers[0].Amount+st.Transfers[0].Fee != paid {
				t.Fatalf("bid %d hour %s: payout %d + fee %d != paid %d", x.bid.ID, h.Hour, st.Transfers[0].Amount, st.Transfers[0].Fee, paid)
			}
		}
	}
	f.requireReconciled()
}

// TestSpotObservedRateInQuotes: once an offer has run 24 spot hours, quotes
// for its interruptible capacity price in its own preemption record (here
// 3 preemptions in 30 hours, 10% per hour, ten times the default), after a
// full reload of the index and after a refresh of the one offer alike.
func TestSpotObservedRateInQuotes(t *testing.T) {
	f := newFixture(t, nil)
	o := f.spotOffer()
	a, b := f.buyer, f.user("b@example.com")
	start := t0.Add(60 * time.Hour)
	req := market.Request{Workload: market.Workload{Kind: market.WorkTraining, Devices: 4, Hours: 10, CheckpointMins: 60, RestartMins: 10},
		Constraints: market.Constraints{EarliestStart: start, Deadline: start.Add(10 * time.Hour), OfferIDs: []int64{o.ID}, AllowInterruption: true}}
	failedWork := func() market.Cents {
		t.Helper()
		res, err := f.wf.Index().Match(req, f.now)
		if err != nil || len(res.Quotes) != 1 || !res.Quotes[0].Pieces[0].Interruptible {
			t.Fatalf("quotes %+v, %v", res.Quotes, err)
		}
		return res.Quotes[0].Cost.FailedWork
	}
	before := failedWork()

	h0 := t0.Add(2 * time.Hour)
	bid := func(u market.User, max market.Cents, first, last time.Time) {
		t.Helper()
		if _, err := f.db.PlaceSpotBid(f.ctx, market.SpotBid{BuyerID: u.ID, OfferID: o.ID, Devices: 4, MaxCents: max, FirstHour: first, LastHour: last,
			ConfirmAboveOnDemand: true}, t0); err != nil {
			t.Fatal(err)
		}
	}
	bid(a, 150, h0, h0.Add(29*time.Hour))
	for _, k := range []int{5, 10, 15} {
		h := h0.Add(time.Duration(k) * time.Hour)
		bid(b, 300, h, h)
	}
	for k := 0; k < 30; k++ {
		h := h0.Add(time.Duration(k) * time.Hour)
		res, err := f.db.ClearSpotHour(f.ctx, o.ID, h, h.Add(-30*time.Minute), time.Hour)
		if err != nil || len(res.Awards) != 1 {
			t.Fatalf("hour %d: %+v, %v", k, res, err)
		}
		if _, err := f.db.ConfirmReservation(f.ctx, res.Awards[0].Reservation.ID, h.Add(-30*time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	f.now = h0.Add(30 * time.Hour)
	if _, err := f.db.AdvanceReservations(f.ctx, f.now); err != nil {
		t.Fatal(err)
	}
	if err := f.wf.ReloadIndex(f.ctx); err != nil {
		t.Fatal(err)
	}
	reloaded := failedWork()
	if reloaded <= before {
		t.Fatalf("expected failed work %s with a 10%% record, %s with the 1%% default: want more", reloaded, before)
	}
	f.wf.RefreshOffer(f.ctx, o.ID) // the feed's read of one offer prices it as the full reload does
	if got := failedWork(); got != reloaded {
		t.Fatalf("after a refresh the failed work is %s, after a reload %s", got, reloaded)
	}
	t.Logf("expected failed work of 4 devices × 10 h: %s at the default rate, %s at the offer's observed rate", before, reloaded)
}

// TestSpotLateClearingChargesMinutesDelivered: the background work clears
// the 11:00 hour late, at 11:40:20; the winner is charged for the 19
// minutes from 11:41 only, and settles on that. By hand: one 2-device bid
// fits, so it pays the 100¢ floor; 100 × 2 × 19 / 60 = 63.33 → 63¢
// (today's code charged the full 200¢).
func TestSpotLateClearingChargesMinutesDelivered(t *testing.T) {
	f := newFixture(t, nil)
	f.onboard()
	o := f.spotOffer()
	a := f.buyer
	f.saveCard(a.ID, "4242 4242 4242 4242")
	h1 := t0.Add(2 * time.Hour)
	bid := f.bid(a, o, 2, 150, h1, h1)
	f.tick(h1.Add(40*time.Minute + 20*time.Second))
	hs := f.spotHours(a, bid.ID)
	if len(hs) != 1 || hs[0].PriceCents != 100 || hs[0].AmountCents != 63 || hs[0].State != market.ReservationConfirmed {
		t.Fatalf("late hour: %+v", hs)
	}
	if paid := f.ledgerSum(hs[0].ReservationID, market.EntryCharge); paid != 63 {
		t.Fatalf("charged %d, want 63", paid)
	}
	r, err := f.db.FindReservation(f.ctx, hs[0].ReservationID)
	if err != nil || !r.Start().Equal(h1.Add(41*time.Minute)) || !r.End().Equal(h1.Add(time.Hour)) || r.AmountCents != 63 {
		t.Fatalf("reservation %+v, %v", r, err)
	}
	for at := h1.Add(41 * time.Minute); at.Before(h1.Add(4 * time.Hour)); at = at.Add(10 * time.Minute) {
		f.tick(at)
	}
	s := f.settlement(r.ID)
	if s.State != store.SettlementDone || s.RefundCents != 0 || len(s.Transfers) != 1 || s.Transfers[0].Amount+s.Transfers[0].Fee != 63 {
		t.Fatalf("settled: state %s refund %d transfers %+v", s.State, s.RefundCents, s.Transfers)
	}
	f.requireReconciled()
}

// TestSpotBidNeedsRecentCard: a bid needs a default card saved or charged
// successfully within 30 days. A card saved 31 days ago and never charged
// is refused with a message asking for a card; once a charge of it
// succeeds (a booking paid with it), the same bid is placed.
func TestSpotBidNeedsRecentCard(t *testing.T) {
	f := newFixture(t, nil)
	f.onboard()
	o := f.spotOffer()
	a := f.buyer
	now := f.now
	f.now = now.Add(-31 * 24 * time.Hour)
	f.saveCard(a.ID, "4242 4242 4242 4242")
	f.now = now
	h1 := t0.Add(2 * time.Hour)
	want := market.SpotBid{BuyerID: a.ID, OfferID: o.ID, Devices: 2, MaxCents: 150, FirstHour: h1, LastHour: h1}
	_, err := f.wf.PlaceSpotBid(f.ctx, want)
	if market.ErrorCode(err) != market.CodeInvalid || !strings.Contains(market.ErrorMessage(err), "has not been charged or verified in the last 30 days") {
		t.Fatalf("bid with a stale card: %v", err)
	}
	if recs, _ := f.db.ListBuyerSpotBids(f.ctx, a.ID); len(recs) != 0 {
		t.Fatalf("refused bid stored: %+v", recs)
	}
	r := f.book(t0.Add(48 * time.Hour))
	if _, err := f.wf.PayWithSavedMethod(f.ctx, a.ID, r.ID); err != nil {
		t.Fatal(err)
	}
	if m, err := f.db.DefaultPaymentMethod(f.ctx, a.ID); err != nil || !m.LastChargedAt.Equal(now) {
		t.Fatalf("card after the charge: %+v, %v", m, err)
	}
	if _, err := f.wf.PlaceSpotBid(f.ctx, want); err != nil {
		t.Fatalf("bid after a successful charge: %v", err)
	}
	f.requireReconciled()
}

// A bidder whose card declines does not set the price the others pay. On
// a 4-device offer (floor 100¢, on-demand 249¢) three bids of 2 devices:
// d at 300¢ (declines), a at 150¢, b at 120¢. Without holds d and a would
// win at the lowest winner's maximum, 150¢, and d never pay. With them,
// d's hold of 2 × 300¢ declines before the clearing, so the hour is
// cleared among a and b: both fit, no bid loses, and the price is the
// floor, 100¢; each pays 2 × 100¢, captured from holds of 2 × 150¢ and
// 2 × 120¢ whose rest is released. The clearing is fully paid, so quotes
// price the capacity at it (100¢).
func TestDecliningBidderDoesNotSetThePrice(t *testing.T) {
	f := newFixture(t, nil)
	f.onboard()
	o := f.spotOffer()
	a, b, d := f.buyer, f.user("b@example.com"), f.user("d@example.com")
	f.saveCard(a.ID, "4242 4242 4242 4242")
	f.saveCard(b.ID, "4242 4242 4242 4242")
	f.saveCard(d.ID, "4000 0000 0000 0002")
	h1 := t0.Add(2 * time.Hour)
	h2 := h1.Add(time.Hour)
	f.bid(d, o, 2, 300, h1, h1)
	f.bid(a, o, 2, 150, h1, h1)
	f.bid(b, o, 2, 120, h1, h1)

	f.tick(h1.Add(-30 * time.Minute))
	for _, u := range []market.User{a, b} {
		rs, err := f.db.ListBuyerSpotBids(f.ctx, u.ID)
		if err != nil || len(rs) != 1 || len(rs[0].Hours) != 1 {
			t.Fatalf("user %d bids %+v, %v", u.ID, rs, err)
		}
		h := rs[0].Hours[0]
		if h.PriceCents != 100 || h.State != market.ReservationConfirmed || f.ledgerSum(h.ReservationID, market.EntryCharge) != 200 {
			t.Fatalf("user %d hour %+v charged %d, want confirmed at 100, 200 charged", u.ID, h, f.ledgerSum(h.ReservationID, market.EntryCharge))
		}
		if got := f.paymentsOf(u.ID); got != 200 {
			t.Fatalf("user %d paid the processor %d, want 200", u.ID, got)
		}
	}
	if rs, err := f.db.ListBuyerSpotBids(f.ctx, d.ID); err != nil || len(rs) != 1 || len(rs[0].Hours) != 0 || rs[0].Bid.State != market.SpotBidCancelled {
		t.Fatalf("d's bids %+v, %v", rs, err)
	}
	if got := f.paymentsOf(d.ID); got != 0 {
		t.Fatalf("d paid %d", got)
	}
	// a's hold of 300 and b's of 240 were captured at 200 each; none is left.
	captured := map[market.Cents]market.Cents{}
	for _, p := range f.processorPayments() {
		captured[p.Amount] = p.AmountReceived
	}
	if len(captured) != 2 || captured[300] != 200 || captured[240] != 200 || len(f.paymentsInStatus("requires_capture")) != 0 {
		t.Fatalf("captured holds %v (authorised → received), holds left %d", captured, len(f.paymentsInStatus("requires_capture")))
	}
	prices, err := f.db.SpotQuotePrices(f.ctx, f.now, o.ID)
	if err != nil || prices[o.ID] != 100 {
		t.Fatalf("quote prices after a fully paid clearing %v, %v; want 100", prices, err)
	}

	bidA2 := f.bid(a, o, 2, 150, h2, h2)
	f.tick(h2.Add(-30 * time.Minute))
	if hs := f.spotHours(a, bidA2.ID); len(hs) != 1 || hs[0].PriceCents != 100 || hs[0].State != market.ReservationConfirmed {
		t.Fatalf("a's 13:00 hours: %+v, want one confirmed at the floor", hs)
	}
	prices, err = f.db.SpotQuotePrices(f.ctx, f.now, o.ID)
	if err != nil || prices[o.ID] != 100 {
		t.Fatalf("quote prices after a paid clearing %v, %v; want 100", prices, err)
	}
	f.requireReconciled()
}

// paymentsOf is what the processor received from the user: its succeeded
// payments of the user's reservations.
func (f *fixture) paymentsOf(userID int64) market.Cents {
	f.t.Helper()
	var sum market.Cents
	for _, p := range f.processorPayments() {
		if p.ReservationID == 0 {
			continue
		}
		r, err := f.db.FindReservation(f.ctx, p.ReservationID)
		if err != nil {
			f.t.Fatal(err)
		}
		if r.BuyerID == userID {
			sum += p.AmountReceived
		}
	}
	return sum
}

// paymentsInStatus is every processor payment in the given status.
func (f *fixture) paymentsInStatus(status string) []billing.Payment {
	f.t.Helper()
	ps, err := f.local.ListPayments(f.ctx, time.Time{})
	if err != nil {
		f.t.Fatal(err)
	}
	var out []billing.Payment
	for _, p := range ps {
		if p.Status == status {
			out = append(out, p)
		}
	}
	return out
}
