package store

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// spotOffer stores a listed offer of nodes×perNode devices selling
// interruptible capacity at a floor of 100 cents per device-hour with 30
// minutes' notice, and a minimum rental of 4 hours (spot rents by the hour
// whatever it is).
func spotOffer(t *testing.T, db *DB, providerID int64, perNode, nodes int) market.Offer {
	t.Helper()
	ctx := context.Background()
	in := validOffer(providerID)
	in.DevicesPerNode, in.Nodes, in.PlacementGroup = perNode, nodes, true
	in.Interruptible, in.InterruptibleCentsPerDH, in.PreemptNoticeMins, in.MinRentalHours = true, 100, 30, 4
	o, err := db.CreateOffer(ctx, in, t0)
	if err != nil {
		t.Fatalf("CreateOffer: %v", err)
	}
	if err := db.ReviewOffer(ctx, o.ID, market.ReviewApproved, "", t0); err != nil {
		t.Fatalf("ReviewOffer: %v", err)
	}
	return o
}

func placeBid(t *testing.T, db *DB, buyerID, offerID int64, devices int, max market.Cents, first, last time.Time, now time.Time) market.SpotBid {
	t.Helper()
	// Confirmed: some tests bid above the 249¢ on-demand price (within 3×).
	b, err := db.PlaceSpotBid(context.Background(), market.SpotBid{BuyerID: buyerID, OfferID: offerID, Devices: devices, MaxCents: max,
		FirstHour: first, LastHour: last, ConfirmAboveOnDemand: true}, now)
	if err != nil {
		t.Fatalf("PlaceSpotBid: %v", err)
	}
	return b
}

// TestSpotClearingOncePerOfferHour: clearing an hour twice, or from four
// writers at once, clears it once: one clearing row, one reservation per
// winner.
func TestSpotClearingOncePerOfferHour(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	prov := createUser(t, db, "prov@example.com", true)
	b1 := createUser(t, db, "b1@example.com", false)
	b2 := createUser(t, db, "b2@example.com", false)
	o := spotOffer(t, db, prov.ID, 4, 2)
	hour := t0.Add(3 * time.Hour)
	placeBid(t, db, b1.ID, o.ID, 3, 150, hour, hour, t0)
	placeBid(t, db, b2.ID, o.ID, 4, 120, hour, hour.Add(time.Hour), t0)

	now := hour.Add(-30 * time.Minute)
	var wg sync.WaitGroup
	results := make([]SpotResult, 4)
	errs := make([]error, 4)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = db.ClearSpotHour(ctx, o.ID, hour, now, time.Hour)
		}()
	}
	wg.Wait()
	cleared := 0
	var res SpotResult
	for i, r := range results {
		if errs[i] != nil {
			t.Fatalf("ClearSpotHour: %v", errs[i])
		}
		if r.Cleared {
			cleared++
			res = r
		}
	}
	if cleared != 1 {
		t.Fatalf("%d clearings of one hour, want 1", cleared)
	}
	// 8 devices, 3+4 bid, both win: the price is the floor.
	c := res.Clearing
	if c.PriceCents != 100 || c.Capacity != 8 || c.DevicesBid != 7 || c.DevicesSold != 7 || len(res.Awards) != 2 {
		t.Fatalf("clearing %+v with %d awards", c, len(res.Awards))
	}
	for _, a := range res.Awards {
		r, err := db.FindReservation(ctx, a.Reservation.ID)
		if err != nil {
			t.Fatal(err)
		}
		p := r.Pieces[0]
		if r.State != market.ReservationHeld || !p.Interruptible || p.PriceCents != 100 || p.AmountCents != 100*market.Cents(p.Devices) ||
			!p.Start.Equal(hour) || !p.End.Equal(hour.Add(time.Hour)) || r.AmountCents != p.AmountCents {
			t.Errorf("spot reservation %+v piece %+v", r, p)
		}
	}
	again, err := db.ClearSpotHour(ctx, o.ID, hour, now.Add(time.Minute), time.Hour)
	if err != nil || again.Cleared {
		t.Fatalf("second clearing: %+v, %v", again, err)
	}
	rows, err := db.ListSpotClearings(ctx, hour, hour.Add(time.Hour))
	if err != nil || len(rows) != 1 {
		t.Fatalf("clearings %+v, %v", rows, err)
	}
	due, err := db.SpotHoursDue(ctx, now)
	if err != nil {
		t.Fatal(err)
	}
	if len(due) != 0 {
		t.Fatalf("due after clearing: %+v", due)
	}
	// The next hour is due at its own clearing time, not before.
	if due, _ := db.SpotHoursDue(ctx, hour.Add(30*time.Minute-time.Second)); len(due) != 0 {
		t.Fatalf("due early: %+v", due)
	}
	due, _ = db.SpotHoursDue(ctx, hour.Add(30*time.Minute))
	if len(due) != 1 || due[0].OfferID != o.ID || !due[0].Hour.Equal(hour.Add(time.Hour)) {
		t.Fatalf("due %+v", due)
	}
}

// TestSpotNeverOverbooks: on-demand bookings and spot clearings share the
// booking's capacity check; racing them never commits more devices than
// the offer has at any instant.
func TestSpotNeverOverbooks(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	prov := createUser(t, db, "prov@example.com", true)
	buyer := createUser(t, db, "buyer@example.com", false)
	bidder := createUser(t, db, "bidder@example.com", false)
	o := spotOffer(t, db, prov.ID, 4, 2)
	hour := t0.Add(5 * time.Hour)

	// 5 devices on demand over the hour (4 hours, the minimum rental): 3 left.
	confirmed(t, db, book(t, db, buyer.ID, t0, piece(o, 5, hour.Add(-time.Hour), 4)))
	big := placeBid(t, db, bidder.ID, o.ID, 4, 500, hour, hour, t0)
	small := placeBid(t, db, bidder.ID, o.ID, 3, 110, hour, hour, t0)
	res, err := db.ClearSpotHour(ctx, o.ID, hour, hour.Add(-30*time.Minute), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	// The 4-device bid does not fit 3; the 3-device one does; one eligible bid lost, so the price is the winner's 110.
	if res.Clearing.Capacity != 3 || res.Clearing.DevicesSold != 3 || res.Clearing.PriceCents != 110 ||
		len(res.Awards) != 1 || res.Awards[0].BidID != small.ID {
		t.Fatalf("clearing %+v awards %+v (big bid %d)", res.Clearing, res.Awards, big.ID)
	}
	// Now the offer is full over the hour: an on-demand booking of one more device conflicts.
	if _, err := db.CreateReservation(ctx, buyer.ID, []market.ReservationPiece{piece(o, 1, hour.Add(-2*time.Hour), 4)}, "{}", t0, hold); market.ErrorCode(err) != market.CodeConflict {
		t.Fatalf("on-demand booking over a spot allocation: %v", err)
	}

	// Race: on-demand bookings of 2 devices and spot clearings of later hours, all wanting the same devices.
	var wg sync.WaitGroup
	var mu sync.Mutex
	booked, sold := 0, 0
	// Each hour: 4 devices on demand for 4 hours from it, or a 5-device
	// spot bid for it: one of the two fits, never both.
	const races = 8
	for i := 0; i < races; i++ {
		h := hour.Add(time.Duration(4+4*i) * time.Hour)
		// A bidder per hour: each won hour is held unpaid, and a buyer with
		// 3 unpaid holds takes no part in a clearing.
		spotter := createUser(t, db, fmt.Sprintf("spotter%d@example.com", i), false)
		placeBid(t, db, spotter.ID, o.ID, 5, 300, h, h, t0)
		racer := createUser(t, db, fmt.Sprintf("racer%d@example.com", i), false)
		wg.Add(2)
		go func() {
			defer wg.Done()
			// Held for long enough to still hold capacity when the hour clears.
			_, err := db.CreateReservation(ctx, racer.ID, []market.ReservationPiece{piece(o, 4, h, 4)}, "{}", t0, 72*time.Hour)
			if err == nil {
				mu.Lock()
				booked++
				mu.Unlock()
			} else if market.ErrorCode(err) != market.CodeConflict {
				t.Errorf("CreateReservation: %v", err)
			}
		}()
		go func() {
			defer wg.Done()
			res, err := db.ClearSpotHour(ctx, o.ID, h, h.Add(-30*time.Minute), time.Hour)
			if err != nil {
				t.Errorf("ClearSpotHour: %v", err)
			}
			mu.Lock()
			sold += len(res.Awards)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if booked+sold != races {
		t.Fatalf("the race booked %d on demand and sold %d spot hours; want one of the two in each of %d hours", booked, sold, races)
	}
	all, err := db.ListAllCommitments(ctx, t0)
	if err != nil {
		t.Fatal(err)
	}
	// Brute force: devices committed at every minute of the horizon.
	for m := t0; m.Before(hour.Add(48 * time.Hour)); m = m.Add(time.Minute) {
		used := 0
		for _, c := range all {
			if c.OfferID == o.ID && !m.Before(c.Start) && m.Before(c.End) {
				used += c.Devices
			}
		}
		if used > 8 {
			t.Fatalf("%d devices committed at %s on an 8-device offer", used, m)
		}
	}
}

// TestSpotPreemption: a higher bid for a full offer takes the next hour;
// the lower bids that held the hour before are preempted at the hour, with
// a zero-length preemption incident on their piece and a notification; a
// bid whose window ended is not preempted.
func TestSpotPreemption(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	prov := createUser(t, db, "prov@example.com", true)
	a := createUser(t, db, "a@example.com", false)
	b := createUser(t, db, "b@example.com", false)
	c := createUser(t, db, "c@example.com", false)
	o := spotOffer(t, db, prov.ID, 4, 1)
	h1 := t0.Add(2 * time.Hour)
	h2 := h1.Add(time.Hour)
	bidA := placeBid(t, db, a.ID, o.ID, 2, 150, h1, h2.Add(5*time.Hour), t0)
	placeBid(t, db, b.ID, o.ID, 2, 120, h1, h1, t0) // ends with h1: not preempted
	res, err := db.ClearSpotHour(ctx, o.ID, h1, h1.Add(-30*time.Minute), time.Hour)
	if err != nil || len(res.Awards) != 2 || res.Clearing.PriceCents != 100 {
		t.Fatalf("h1: %+v, %v", res, err)
	}
	for _, aw := range res.Awards {
		confirmed(t, db, aw.Reservation)
	}
	bidC := placeBid(t, db, c.ID, o.ID, 4, 300, h2, h2, h1)
	res, err = db.ClearSpotHour(ctx, o.ID, h2, h2.Add(-30*time.Minute), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Awards) != 1 || res.Awards[0].BidID != bidC.ID || res.Clearing.PriceCents != 300 || len(res.Preempted) != 1 {
		t.Fatalf("h2: %+v", res)
	}
	var aRes int64
	records, err := db.ListBuyerSpotBids(ctx, a.ID)
	if err != nil || len(records) != 1 || len(records[0].Hours) != 1 {
		t.Fatalf("a's bids %+v, %v", records, err)
	}
	won := records[0].Hours[0]
	aRes = won.ReservationID
	if !won.Preempted || won.PriceCents != 100 || won.Devices != 2 || !won.Hour.Equal(h1) || records[0].Bid.State != market.SpotBidLive {
		t.Fatalf("a's hour %+v bid %+v", won, records[0].Bid)
	}
	incs, err := db.ListIncidents(ctx, aRes)
	if err != nil || len(incs) != 1 {
		t.Fatalf("incidents %+v, %v", incs, err)
	}
	inc := incs[0]
	if inc.Kind != market.IncidentPreemption || !inc.Start.Equal(h2) || !inc.End.Equal(h2) || !inc.Acknowledged ||
		inc.DevicesAffected != 2 || inc.ReportedBy != ReportedBySpot || inc.ReporterID != prov.ID {
		t.Fatalf("incident %+v", inc)
	}
	// b's window ended with h1: finished, not preempted.
	records, _ = db.ListBuyerSpotBids(ctx, b.ID)
	if records[0].Bid.State != market.SpotBidFinished || records[0].Hours[0].Preempted {
		t.Fatalf("b's bid %+v", records[0])
	}
	// Only the owner cancels; a's bid stays live and then cancels once.
	if _, err := db.CancelSpotBid(ctx, b.ID, bidA.ID, h2); market.ErrorCode(err) != market.CodeNotFound {
		t.Fatalf("another buyer cancels: %v", err)
	}
	if _, err := db.CancelSpotBid(ctx, a.ID, bidA.ID, h2); err != nil {
		t.Fatal(err)
	}
	if _, err := db.CancelSpotBid(ctx, a.ID, bidA.ID, h2); market.ErrorCode(err) != market.CodeConflict {
		t.Fatalf("cancel twice: %v", err)
	}
}

func TestPlaceSpotBidRefusals(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	prov := createUser(t, db, "prov@example.com", true)
	buyer := createUser(t, db, "buyer@example.com", false)
	o := spotOffer(t, db, prov.ID, 4, 1)
	plain := listedOffer(t, db, prov.ID, 4)
	h := t0.Add(2 * time.Hour)
	bid := func(by, offer int64, max market.Cents) error {
		_, err := db.PlaceSpotBid(ctx, market.SpotBid{BuyerID: by, OfferID: offer, Devices: 1, MaxCents: max, FirstHour: h, LastHour: h}, t0)
		return err
	}
	wantCode(t, bid(prov.ID, o.ID, 200), market.CodeConflict)
	if err := bid(buyer.ID, plain.ID, 200); market.FieldErrors(err)["offer"] == "" {
		t.Fatalf("bid on an on-demand offer: %v", err)
	}
	if err := bid(buyer.ID, o.ID, 99); market.FieldErrors(err)["max_price"] == "" {
		t.Fatalf("bid below the floor: %v", err)
	}
	wantCode(t, bid(buyer.ID, 9999, 200), market.CodeNotFound)
	for i := 0; i < market.SpotMaxLiveBids; i++ {
		if err := bid(buyer.ID, o.ID, 200); err != nil {
			t.Fatal(err)
		}
	}
	wantCode(t, bid(buyer.ID, o.ID, 200), market.CodeConflict)
}

// TestSpotInterruptionRates: the observed rate counts the spot hours run
// (paid, ended, in the last 30 days) and the preemptions among them; under
// 24 hours run it is unknown (absent).
func TestSpotInterruptionRates(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	prov := createUser(t, db, "prov@example.com", true)
	a := createUser(t, db, "a@example.com", false)
	b := createUser(t, db, "b@example.com", false)
	o := spotOffer(t, db, prov.ID, 1, 1)
	h0 := t0.Add(2 * time.Hour)
	placeBid(t, db, a.ID, o.ID, 1, 150, h0, h0.Add(29*time.Hour), t0)
	for _, k := range []int{5, 10, 15} { // b outbids a for these hours: a is preempted after hours 4, 9 and 14
		h := h0.Add(time.Duration(k) * time.Hour)
		placeBid(t, db, b.ID, o.ID, 1, 300, h, h, t0)
	}
	for k := 0; k < 30; k++ {
		h := h0.Add(time.Duration(k) * time.Hour)
		res, err := db.ClearSpotHour(ctx, o.ID, h, h.Add(-30*time.Minute), time.Hour)
		if err != nil || len(res.Awards) != 1 {
			t.Fatalf("hour %d: %+v, %v", k, res, err)
		}
		confirmed(t, db, res.Awards[0].Reservation)
	}
	if _, err := db.AdvanceReservations(ctx, h0.Add(30*time.Hour)); err != nil {
		t.Fatal(err)
	}
	// 20 hours run by h0+20h: unknown.
	if got, err := db.SpotInterruptionRates(ctx, h0.Add(20*time.Hour)); err != nil || len(got) != 0 {
		t.Fatalf("rates after 20 hours: %v, %v", got, err)
	}
	// 30 hours run, 3 preemptions: 3/30 per hour = 100,000 ppm.
	got, err := db.SpotInterruptionRate(ctx, o.ID, h0.Add(30*time.Hour))
	if err != nil || got != 100_000 {
		t.Fatalf("rate after 30 hours: %d, %v", got, err)
	}
	// 31 days later nothing is in the window.
	if got, _ := db.SpotInterruptionRate(ctx, o.ID, h0.Add(31*24*time.Hour)); got != 0 {
		t.Fatalf("rate a month later: %d", got)
	}
}

// TestSpotLateClearingChargesMinutes: an hour cleared 40 minutes 20
// seconds late is booked from the clearing time rounded up to the minute
// and charged only for the 19 minutes left. By hand: one 2-device bid
// fits, so it pays the 100¢ floor; 100 × 2 × 19 / 60 = 63.33 → 63¢. An
// hour cleared on time costs the full 200¢.
func TestSpotLateClearingChargesMinutes(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	prov := createUser(t, db, "prov@example.com", true)
	a := createUser(t, db, "a@example.com", false)
	o := spotOffer(t, db, prov.ID, 4, 1)
	h1 := t0.Add(2 * time.Hour)
	h2 := h1.Add(time.Hour)
	placeBid(t, db, a.ID, o.ID, 2, 150, h1, h2, t0)
	res, err := db.ClearSpotHour(ctx, o.ID, h1, h1.Add(40*time.Minute+20*time.Second), time.Hour)
	if err != nil || len(res.Awards) != 1 || res.Clearing.PriceCents != 100 {
		t.Fatalf("late h1: %+v, %v", res, err)
	}
	r := res.Awards[0].Reservation
	p := r.Pieces[0]
	if !p.Start.Equal(h1.Add(41*time.Minute)) || !p.End.Equal(h2) || p.AmountCents != 63 || r.AmountCents != 63 || p.PriceCents != 100 {
		t.Fatalf("late hour booked %s–%s at %d¢, amount %d¢ (reservation %d¢); want from %s, 63¢",
			p.Start, p.End, p.PriceCents, p.AmountCents, r.AmountCents, h1.Add(41*time.Minute))
	}
	stored, err := db.FindReservation(ctx, r.ID)
	if err != nil || stored.AmountCents != 63 || !stored.Start().Equal(h1.Add(41*time.Minute)) {
		t.Fatalf("stored %+v, %v", stored, err)
	}
	confirmed(t, db, r)
	res, err = db.ClearSpotHour(ctx, o.ID, h2, h2.Add(-30*time.Minute), time.Hour)
	if err != nil || len(res.Awards) != 1 || res.Awards[0].Reservation.AmountCents != 200 || !res.Awards[0].Reservation.Start().Equal(h2) {
		t.Fatalf("on-time h2: %+v, %v", res, err)
	}
	recs, err := db.ListBuyerSpotBids(ctx, a.ID)
	if err != nil || len(recs) != 1 || len(recs[0].Hours) != 2 || recs[0].Hours[0].AmountCents != 63 || recs[0].Hours[1].AmountCents != 200 {
		t.Fatalf("a's hours %+v, %v", recs, err)
	}
}

// TestSpotBidderLimits: won spot hours count toward the 3-unpaid-holds
// limit and the lapse rule. A buyer holding 3 unpaid won hours cannot
// place a bid and takes no part in the next clearing (another buyer wins
// it at the floor); once two of those hours lapse unpaid, the buyer
// cannot bid, be cleared, or place a standing order for 7 days.
func TestSpotBidderLimits(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	prov := createUser(t, db, "prov@example.com", true)
	a := createUser(t, db, "a@example.com", false)
	b := createUser(t, db, "b@example.com", false)
	o := spotOffer(t, db, prov.ID, 4, 1)
	h1 := t0.Add(2 * time.Hour)
	at := func(k int) time.Time { return h1.Add(time.Duration(k) * time.Hour) }
	bidA := placeBid(t, db, a.ID, o.ID, 4, 200, at(0), at(5), t0)
	bidB := placeBid(t, db, b.ID, o.ID, 2, 120, at(3), at(5), t0)
	// Three hours won by A, held 4 hours each and not paid.
	for k := 0; k < 3; k++ {
		res, err := db.ClearSpotHour(ctx, o.ID, at(k), at(k).Add(-30*time.Minute), 4*time.Hour)
		if err != nil || len(res.Awards) != 1 || res.Awards[0].BidID != bidA.ID {
			t.Fatalf("hour %d: %+v, %v", k, res, err)
		}
	}
	clearing := at(3).Add(-30 * time.Minute)
	if n, err := db.CountHeld(ctx, a.ID, clearing); err != nil || n != 3 {
		t.Fatalf("a holds %d, %v", n, err)
	}
	_, err := db.PlaceSpotBid(ctx, market.SpotBid{BuyerID: a.ID, OfferID: o.ID, Devices: 1, MaxCents: 150, FirstHour: at(4), LastHour: at(4)}, clearing)
	wantCode(t, err, market.CodeConflict)
	if !strings.Contains(market.ErrorMessage(err), "3 unpaid reservations") {
		t.Fatalf("holds message %q", market.ErrorMessage(err))
	}
	// Hour 3: A (200¢ × 4) is skipped; B alone fits: the 100¢ floor.
	res, err := db.ClearSpotHour(ctx, o.ID, at(3), clearing, 4*time.Hour)
	if err != nil || len(res.Awards) != 1 || res.Awards[0].BidID != bidB.ID || res.Clearing.PriceCents != 100 || res.Clearing.DevicesBid != 2 {
		t.Fatalf("hour 3 with a over the limit: %+v, %v", res, err)
	}
	confirmed(t, db, res.Awards[0].Reservation)
	// The holds lapse unpaid at at(k)+3h30: three lapses within 30 days.
	after := at(2).Add(3*time.Hour + 31*time.Minute)
	if _, err := db.ExpireHolds(ctx, after); err != nil {
		t.Fatal(err)
	}
	if n, err := db.CountHeld(ctx, a.ID, after); err != nil || n != 0 {
		t.Fatalf("a holds %d after expiry, %v", n, err)
	}
	_, err = db.PlaceSpotBid(ctx, market.SpotBid{BuyerID: a.ID, OfferID: o.ID, Devices: 1, MaxCents: 150, FirstHour: at(7), LastHour: at(7)}, after)
	wantCode(t, err, market.CodeConflict)
	if !strings.Contains(market.ErrorMessage(err), "lapsed unpaid") {
		t.Fatalf("lapse message %q", market.ErrorMessage(err))
	}
	until, blocked, err := db.StandingOrderBlock(ctx, a.ID, after)
	// Latest lapse: hour 2's hold, at(2)-30m+4h = at(2)+3h30; blocked 7 days after.
	if err != nil || !blocked || !until.Equal(at(2).Add(3*time.Hour+30*time.Minute).Add(7*24*time.Hour)) {
		t.Fatalf("standing orders: until %s blocked %v, %v", until, blocked, err)
	}
	// Hour 5 (A's window still covers it): A is skipped again, B wins at the floor.
	res, err = db.ClearSpotHour(ctx, o.ID, at(5), at(5).Add(-30*time.Minute), 4*time.Hour)
	if err != nil || len(res.Awards) != 1 || res.Awards[0].BidID != bidB.ID || res.Clearing.PriceCents != 100 {
		t.Fatalf("hour 5 with a blocked: %+v, %v", res, err)
	}
}

// An account whose address is not confirmed places no spot bid and has no
// saved card charged: the store refuses in the transactions themselves
// (market.User.MayAct), whatever the caller checked.
func TestUnconfirmedAccountBidsAndPaysNothing(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	prov := createUser(t, db, "prov@example.com", true)
	o := spotOffer(t, db, prov.ID, 4, 1)
	id, _, err := db.SignUp(ctx, market.User{Email: "squat@example.com", DisplayName: "Squat", IsBuyer: true}, []byte("h"), t0)
	if err != nil {
		t.Fatal(err)
	}
	h1 := t0.Add(2 * time.Hour)
	_, err = db.PlaceSpotBid(ctx, market.SpotBid{BuyerID: id, OfferID: o.ID, Devices: 1, MaxCents: 150, FirstHour: h1, LastHour: h1}, t0)
	wantCode(t, err, market.CodeForbidden)
	_, err = db.CreateReservationCharge(ctx, id, 1, t0)
	wantCode(t, err, market.CodeForbidden)
	_, err = db.CreateResaleCharge(ctx, id, 1, t0)
	wantCode(t, err, market.CodeForbidden)
}

// TestSpotIndicative: the next hour's indicative price is the clearing of
// the live bids covering it against the free capacity, the floor while
// nothing would sell, and what the hour then clears at.
func TestSpotIndicative(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	prov := createUser(t, db, "prov@example.com", true)
	b1 := createUser(t, db, "b1@example.com", false)
	b2 := createUser(t, db, "b2@example.com", false)
	b3 := createUser(t, db, "b3@example.com", false)
	o := spotOffer(t, db, prov.ID, 4, 1) // 4 devices, floor 100¢, 30 minutes' notice
	now := t0.Add(10 * time.Minute)
	next := t0.Truncate(time.Hour).Add(time.Hour) // clears at 30 minutes past t0's hour

	check := func(want SpotIndicative) {
		t.Helper()
		got, err := db.SpotIndicative(ctx, o.ID, now)
		if err != nil {
			t.Fatalf("SpotIndicative: %v", err)
		}
		if !got.Hour.Equal(want.Hour) || got.FloorCents != want.FloorCents || got.PriceCents != want.PriceCents ||
			got.Capacity != want.Capacity || got.DevicesBid != want.DevicesBid || got.DevicesSold != want.DevicesSold {
			t.Fatalf("indicative = %+v, want %+v", got, want)
		}
	}
	check(SpotIndicative{Hour: next, FloorCents: 100, PriceCents: 100, Capacity: 4})
	placeBid(t, db, b1.ID, o.ID, 2, 150, next, next.Add(time.Hour), now)
	placeBid(t, db, b2.ID, o.ID, 2, 120, next, next, now)
	// 4 devices asked for, 4 on sale: everyone wins at the floor.
	check(SpotIndicative{Hour: next, FloorCents: 100, PriceCents: 100, Capacity: 4, DevicesBid: 4, DevicesSold: 4})
	placeBid(t, db, b3.ID, o.ID, 2, 300, next, next, now)
	// 6 asked for: 300 and 150 win, 120 loses; the marginal winner pays its own 150.
	check(SpotIndicative{Hour: next, FloorCents: 100, PriceCents: 150, Capacity: 4, DevicesBid: 6, DevicesSold: 4})

	res, err := db.ClearSpotHour(ctx, o.ID, next, next.Add(-30*time.Minute), time.Hour)
	if err != nil {
		t.Fatalf("ClearSpotHour: %v", err)
	}
	if res.Clearing.PriceCents != 150 {
		t.Fatalf("cleared at %d, indicative said 150", res.Clearing.PriceCents)
	}
	// Once it has cleared the next hour is the one after, with b1's bid alone.
	now = next.Add(-30 * time.Minute)
	check(SpotIndicative{Hour: next.Add(time.Hour), FloorCents: 100, PriceCents: 100, Capacity: 4, DevicesBid: 2, DevicesSold: 2})
}
