package workflow

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
	"github.com/gpumarket/gpumarket/store/pgtest"
)

// gangRequest asks for devices H100s as one gang for hours from start,
// to finish by start+hours: one slot.
func gangRequest(start time.Time, devices, hours int) market.Request {
	return market.Request{Workload: market.Workload{Kind: market.WorkTraining, Devices: devices, Hours: hours},
		Constraints: market.Constraints{AcceleratorIDs: []string{"nvidia-h100-80gb-sxm"}, EarliestStart: start,
			Deadline: start.Add(time.Duration(hours) * time.Hour)}}
}

// place places a standing order for buyerID with a limit per reference
// device-hour, to fill within two days.
func (f *fixture) place(buyerID int64, req market.Request, limit market.Cents, onFill market.OnFill) market.StandingOrder {
	f.t.Helper()
	o, err := f.wf.PlaceStandingOrder(f.ctx, market.StandingOrder{BuyerID: buyerID, Request: req,
		LimitKind: market.LimitPerRefDeviceHour, LimitCents: limit, FillBy: f.now.Add(47 * time.Hour), OnFill: onFill})
	if err != nil {
		f.t.Fatal(err)
	}
	return o
}

// matchInBackground runs the order matcher as the process owner does,
// until the test ends.
func (f *fixture) matchInBackground() {
	ctx, cancel := context.WithCancel(f.ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.wf.MatchOrders(ctx)
	}()
	f.t.Cleanup(func() { cancel(); <-done })
}

// waitOrder waits (without any tick) until the order leaves state open,
// and returns it.
func (f *fixture) waitOrder(buyerID, id int64) store.StandingOrderRow {
	f.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		o, err := f.db.FindStandingOrder(f.ctx, buyerID, id)
		if err != nil {
			f.t.Fatal(err)
		}
		if o.State != market.OrderOpen || time.Now().After(deadline) {
			return o
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A standing order waiting behind a held booking fills when that booking
// is cancelled — through the change the index follows, with no tick — at
// the quoted amount (8 devices × 10 h × 249¢ = 19,920¢). An older order
// whose limit is below the price stays open. The buyer is notified (and
// mailed), pays as for any hold, and the ledger reconciles.
func TestStandingOrderFillsWhenACancellationFreesCapacity(t *testing.T) {
	f := newFixture(t, nil)
	start := t0.Add(48 * time.Hour)
	other := f.user("other@example.com")
	taken, err := f.wf.Book(f.ctx, other.ID, []market.ReservationPiece{{OfferID: f.offer.ID, Devices: 8, Start: start,
		End: start.Add(10 * time.Hour), PriceCents: 249, AmountCents: 19920}}, `{"version":1}`, 30*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	cheap := f.user("cheap@example.com")
	low := f.place(cheap.ID, gangRequest(start, 8, 10), 1, market.FillHold) // older, limit 1¢
	f.now = f.now.Add(time.Minute)
	o := f.place(f.buyer.ID, gangRequest(start, 8, 10), 100_000, market.FillHold)
	if o.State != market.OrderOpen {
		t.Fatalf("order placed with the capacity taken is %s, want open", o.State)
	}
	f.matchInBackground()

	cancelled := time.Now()
	if _, err := f.wf.Cancel(f.ctx, other.ID, taken.ID); err != nil {
		t.Fatal(err)
	}
	got := f.waitOrder(f.buyer.ID, o.ID)
	t.Logf("filled %s after the cancellation began", time.Since(cancelled).Round(time.Millisecond))
	if got.State != market.OrderFilled || got.ReservationID == 0 {
		t.Fatalf("order after the cancellation: %s reservation %d, want filled", got.State, got.ReservationID)
	}
	if l, err := f.db.FindStandingOrder(f.ctx, cheap.ID, low.ID); err != nil || l.State != market.OrderOpen {
		t.Fatalf("the order below the price: %+v %v, want open", l.State, err)
	}
	r, err := f.db.FindBuyerReservation(f.ctx, f.buyer.ID, got.ReservationID)
	if err != nil {
		t.Fatal(err)
	}
	if r.State != market.ReservationHeld || r.AmountCents != 19920 || r.Devices() != 8 || !r.Start().Equal(start) ||
		!r.End().Equal(start.Add(10*time.Hour)) || r.RequestJSON != o.RequestJSON || !r.HoldExpiresAt.Equal(f.now.Add(30*time.Minute)) {
		t.Fatalf("fill's reservation: %+v", r)
	}
	if !f.notified(f.buyer.ID, fmt.Sprintf("Standing order #%d filled: reservation #%d", o.ID, r.ID)) {
		t.Error("buyer not notified of the fill")
	}
	mailed := false
	for _, m := range f.mailTo(f.buyer.ID) {
		mailed = mailed || m.Kind == store.NotifyOrderFilled
	}
	if !mailed {
		t.Error("the fill was not mailed")
	}
	f.pay(r)
	if r, _ = f.db.FindBuyerReservation(f.ctx, f.buyer.ID, r.ID); r.State != market.ReservationConfirmed {
		t.Fatalf("after paying: %s", r.State)
	}
	if paid := f.ledgerSum(r.ID, market.EntryCharge); paid != 19920 {
		t.Errorf("ledger payment %d, want 19920", paid)
	}
	f.requireReconciled()
}

// A standing order for a model nobody offers fills when a provider's offer
// of it is approved (the index follows the offer), and an order that never
// finds a price expires at its fill-by date on the next tick, notified.
func TestStandingOrderFillsWhenAnOfferIsListedAndExpiresAtItsFillBy(t *testing.T) {
	f := newFixture(t, nil)
	start := t0.Add(48 * time.Hour)
	req := gangRequest(start, 4, 5)
	req.Constraints.AcceleratorIDs = []string{"nvidia-a100-80gb-sxm"}
	o := f.place(f.buyer.ID, req, 100_000, market.FillHold)
	never := f.place(f.buyer.ID, gangRequest(start, 8, 10), 1, market.FillHold)
	f.matchInBackground()

	a100 := f.offer
	a100.ID, a100.Title, a100.AcceleratorID, a100.PriceCentsPerDeviceHour = 0, "4× A100", "nvidia-a100-80gb-sxm", 150
	a100.DevicesPerNode = 4
	created, err := f.db.CreateOffer(f.ctx, a100, f.now)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := f.db.FindStandingOrder(f.ctx, f.buyer.ID, o.ID); got.State != market.OrderOpen {
		t.Fatalf("filled from an offer awaiting review: %s", got.State)
	}
	if err := f.db.ReviewOffer(f.ctx, created.ID, market.ReviewApproved, "", f.now); err != nil {
		t.Fatal(err)
	}
	got := f.waitOrder(f.buyer.ID, o.ID)
	if got.State != market.OrderFilled {
		t.Fatalf("order after the listing: %s", got.State)
	}
	r, err := f.db.FindBuyerReservation(f.ctx, f.buyer.ID, got.ReservationID)
	if err != nil {
		t.Fatal(err)
	}
	// 4 devices × 5 h × 150¢ = 3,000¢ on the new offer.
	if r.AmountCents != 3000 || r.Pieces[0].OfferID != created.ID || r.Pieces[0].Devices != 4 {
		t.Fatalf("fill: %d¢ on offer %d, %d devices", r.AmountCents, r.Pieces[0].OfferID, r.Pieces[0].Devices)
	}

	f.tick(never.FillBy.Add(-time.Second))
	if n, _ := f.db.FindStandingOrder(f.ctx, f.buyer.ID, never.ID); n.State != market.OrderOpen {
		t.Fatalf("expired before its fill-by: %s", n.State)
	}
	f.tick(never.FillBy)
	if n, _ := f.db.FindStandingOrder(f.ctx, f.buyer.ID, never.ID); n.State != market.OrderExpired {
		t.Fatalf("at its fill-by: %s, want expired", n.State)
	}
	if !f.notified(f.buyer.ID, fmt.Sprintf("Standing order #%d (limit $0.01 per reference device-hour) reached its fill-by date", never.ID)) {
		t.Error("buyer not notified of the expiry")
	}
}

// The unpaid fill lapses with its hold: after two lapses within 30 days
// new standing orders are refused for 7 days after the second.
func TestUnpaidFillsBlockNewOrders(t *testing.T) {
	f := newFixture(t, nil)
	f.matchInBackground()
	var last time.Time
	for i := range 2 {
		start := t0.Add(time.Duration(48+24*i) * time.Hour)
		o := f.place(f.buyer.ID, gangRequest(start, 8, 2), 100_000, market.FillHold)
		if o.State != market.OrderFilled {
			t.Fatalf("order %d: %s, want filled at once (capacity free)", i, o.State)
		}
		r, _ := f.db.FindBuyerReservation(f.ctx, f.buyer.ID, o.ReservationID)
		last = r.HoldExpiresAt
		f.waitIdle()
		f.tick(r.HoldExpiresAt) // unpaid: the hold lapses
	}
	rows, _ := f.db.ListStandingOrders(f.ctx, f.buyer.ID)
	for _, r := range rows {
		if !r.Lapsed() {
			t.Fatalf("order %d not lapsed: %s / %s", r.ID, r.State, r.ReservationState)
		}
	}
	_, err := f.wf.PlaceStandingOrder(f.ctx, market.StandingOrder{BuyerID: f.buyer.ID, Request: gangRequest(t0.Add(120*time.Hour), 8, 2),
		LimitKind: market.LimitTotalBudget, LimitCents: 1, FillBy: f.now.Add(24 * time.Hour), OnFill: market.FillHold})
	if market.ErrorCode(err) != market.CodeConflict {
		t.Fatalf("third order after two lapses: %v, want a conflict", err)
	}
	f.waitIdle()
	f.now = last.Add(7 * 24 * time.Hour)
	if _, err := f.wf.PlaceStandingOrder(f.ctx, market.StandingOrder{BuyerID: f.buyer.ID, Request: gangRequest(f.now.Add(48*time.Hour), 8, 2),
		LimitKind: market.LimitTotalBudget, LimitCents: 1, FillBy: f.now.Add(24 * time.Hour), OnFill: market.FillHold}); err != nil {
		t.Fatalf("an order 7 days after the second lapse: %v", err)
	}
}

// waitIdle waits until the background matcher has no pass to run, so the
// test may move the clock.
func (f *fixture) waitIdle() {
	for range 100 {
		f.wf.orders.pass.Lock()
		f.wf.orders.mu.Lock()
		idle := len(f.wf.orders.changed) == 0 && len(f.wf.orders.wake) == 0
		f.wf.orders.mu.Unlock()
		f.wf.orders.pass.Unlock()
		if idle {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Two standing orders and a person booking by hand race, in goroutines,
// for the same last devices, round after round (each round a new slot on
// the one 8-device offer, 5 devices wanted by each). Both orders wait
// behind a hold; then, at once, the hold is cancelled (which wakes this
// process's matcher), the person books, and a second replica over the
// same database reloads its index and runs its own matching pass. Never
// more than 8 devices are committed in any hour, each order fills at most
// once, and exactly one of the three gets each slot.
func TestStandingOrdersAndABookingRaceForTheLastDevices(t *testing.T) {
	f := newFixture(t, nil)
	f.matchInBackground()
	replica, err := New(f.ctx, Config{Billing: f.proc, PlatformFeeBP: feeBP, Now: func() time.Time { return f.now }}, f.db,
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	const rounds = 30
	won := map[string]int{}
	rng := rand.New(rand.NewPCG(15, 15))
	for round := range rounds {
		start := t0.Add(time.Duration(48+12*round) * time.Hour)
		a, b, p, blocker := f.user(fmt.Sprintf("a%d@example.com", round)), f.user(fmt.Sprintf("b%d@example.com", round)),
			f.user(fmt.Sprintf("p%d@example.com", round)), f.user(fmt.Sprintf("x%d@example.com", round))
		hold, err := f.wf.Book(f.ctx, blocker.ID, []market.ReservationPiece{{OfferID: f.offer.ID, Devices: 8, Start: start,
			End: start.Add(2 * time.Hour), PriceCents: 249, AmountCents: 3984}}, `{"version":1}`, 30*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		ordA := f.place(a.ID, gangRequest(start, 5, 2), 100_000, market.FillHold)
		ordB, err := f.wf.PlaceStandingOrder(f.ctx, market.StandingOrder{BuyerID: b.ID, Request: gangRequest(start, 5, 2),
			LimitKind: market.LimitTotalBudget, LimitCents: 100_000, FillBy: f.now.Add(47 * time.Hour), OnFill: market.FillHold})
		if err != nil || ordA.State != market.OrderOpen || ordB.State != market.OrderOpen {
			t.Fatalf("round %d: orders placed behind the hold: %s %s %v", round, ordA.State, ordB.State, err)
		}
		delays := [3]time.Duration{}
		for i := range delays {
			delays[i] = time.Duration(rng.IntN(1500)) * time.Microsecond
		}
		var wg sync.WaitGroup
		var errP, errC error
		wg.Add(3)
		go func() {
			defer wg.Done()
			time.Sleep(delays[0])
			_, errC = f.wf.Cancel(f.ctx, blocker.ID, hold.ID)
		}()
		go func() {
			defer wg.Done()
			time.Sleep(delays[1])
			_, errP = f.wf.Book(f.ctx, p.ID, []market.ReservationPiece{{OfferID: f.offer.ID, Devices: 5, Start: start,
				End: start.Add(2 * time.Hour), PriceCents: 249, AmountCents: 2490}}, `{"version":1}`, 30*time.Minute)
		}()
		go func() {
			defer wg.Done()
			time.Sleep(delays[2])
			if err := replica.ReloadIndex(f.ctx); err != nil {
				t.Error(err)
			}
			replica.matchOrders(f.ctx, nil)
		}()
		wg.Wait()
		if errC != nil {
			t.Fatal(errC)
		}
		if errP != nil && market.ErrorCode(errP) != market.CodeConflict {
			t.Fatalf("round %d: booking: %v", round, errP)
		}
		f.waitIdle()
		if errP != nil {
			// The person lost; if the replica ran before the cancel, only
			// this process's matcher, woken by the cancel, fills.
			f.waitIdle()
		}
		winners := 0
		for _, who := range []struct {
			name  string
			buyer int64
			id    int64
		}{{"order a", a.ID, ordA.ID}, {"order b", b.ID, ordB.ID}} {
			o, err := f.db.FindStandingOrder(f.ctx, who.buyer, who.id)
			if err != nil {
				t.Fatal(err)
			}
			if o.State == market.OrderFilled {
				winners++
				won[who.name]++
			}
		}
		if errP == nil {
			winners++
			won["person"]++
		}
		if winners != 1 {
			t.Fatalf("round %d: %d winners for one slot of 8 devices wanted 5 at a time", round, winners)
		}
	}
	// Every hour of every round: devices committed on the offer ≤ 8.
	cs, err := f.db.ListCommitmentsOfOffers(f.ctx, []int64{f.offer.ID}, t0)
	if err != nil {
		t.Fatal(err)
	}
	for h := t0.Add(48 * time.Hour); h.Before(t0.Add(time.Duration(48+12*rounds) * time.Hour)); h = h.Add(time.Hour) {
		used := 0
		for _, c := range cs[f.offer.ID] {
			if c.Start.Before(h.Add(time.Hour)) && h.Before(c.End) {
				used += c.Devices
			}
		}
		if used > 8 {
			t.Fatalf("hour %s: %d devices committed on an 8-device offer", h, used)
		}
	}
	if len(cs[f.offer.ID]) != rounds {
		t.Fatalf("%d commitments over %d rounds, want one per round", len(cs[f.offer.ID]), rounds)
	}
	t.Logf("winners over %d rounds: %v", rounds, won)
}

// An order that pays at once needs a saved card when placed; when it
// fills (here on a cancellation, with no tick) the card is charged the
// reservation's amount: the reservation is confirmed and the charge in the
// ledger, and the ledger reconciles with the processor. A declined card
// leaves the fill held, and the order and a notification say so.
func TestStandingOrderPaysAtOnceWithTheSavedCard(t *testing.T) {
	f := newFixture(t, nil)
	start := t0.Add(48 * time.Hour)
	_, err := f.wf.PlaceStandingOrder(f.ctx, market.StandingOrder{BuyerID: f.buyer.ID, Request: gangRequest(start, 8, 10),
		LimitKind: market.LimitPerRefDeviceHour, LimitCents: 100_000, FillBy: f.now.Add(47 * time.Hour), OnFill: market.FillPay})
	if market.FieldErrors(err)["on_fill"] == "" {
		t.Fatalf("pay at once without a saved card: %v, want a message on on_fill", err)
	}
	other := f.user("other@example.com")
	taken, err := f.wf.Book(f.ctx, other.ID, []market.ReservationPiece{{OfferID: f.offer.ID, Devices: 8, Start: start,
		End: start.Add(10 * time.Hour), PriceCents: 249, AmountCents: 19920}}, `{"version":1}`, 30*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	f.saveCard(f.buyer.ID, "4242 4242 4242 4242")
	o := f.place(f.buyer.ID, gangRequest(start, 8, 10), 100_000, market.FillPay)
	decliner := f.user("decline@example.com")
	f.saveCard(decliner.ID, "4000 0000 0000 0002")
	late := start.Add(24 * time.Hour)
	d := f.place(decliner.ID, gangRequest(late, 8, 10), 100_000, market.FillPay) // its slot is free: fills at once
	f.matchInBackground()

	if _, err := f.wf.Cancel(f.ctx, other.ID, taken.ID); err != nil {
		t.Fatal(err)
	}
	got := f.waitOrder(f.buyer.ID, o.ID)
	if got.State != market.OrderFilled {
		t.Fatalf("order: %s", got.State)
	}
	var r market.Reservation
	for range 200 { // the charge follows the fill
		if r, err = f.db.FindBuyerReservation(f.ctx, f.buyer.ID, got.ReservationID); err != nil || r.State != market.ReservationHeld {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if r.State != market.ReservationConfirmed || r.AmountCents != 19920 {
		t.Fatalf("paid-at-once fill: %s %d¢, want confirmed 19920¢", r.State, r.AmountCents)
	}
	if paid := f.ledgerSum(r.ID, market.EntryCharge); paid != 19920 {
		t.Errorf("ledger charge %d, want 19920", paid)
	}

	dd, err := f.db.FindStandingOrder(f.ctx, decliner.ID, d.ID)
	if err != nil || dd.State != market.OrderFilled || dd.ReservationState != market.ReservationHeld || dd.Note == "" {
		t.Fatalf("declined order: %+v %v", dd, err)
	}
	if !f.notified(decliner.ID, fmt.Sprintf("Standing order #%d: ", d.ID)) {
		t.Error("the decline was not notified")
	}
	f.waitIdle()
	// The paid fill sends one notification, that it was booked and paid;
	// the declined one says it is held (the order's note and the decline),
	// with no "held for you" of the booking and no "being charged" beside.
	about := func(userID, reservationID int64) []market.Notice {
		ns, err := f.db.ListNotifications(f.ctx, userID, 100)
		if err != nil {
			t.Fatal(err)
		}
		var out []market.Notice
		for _, n := range ns {
			if n.URL == fmt.Sprintf("/reservations/%d", reservationID) {
				out = append(out, n.Notice)
			}
		}
		return out
	}
	want := fmt.Sprintf("Standing order #%d filled and paid: reservation #%d is booked and your payment of $199.20 arrived.", o.ID, r.ID)
	if ns := about(f.buyer.ID, r.ID); len(ns) != 1 || !strings.HasPrefix(ns[0].Text(), want) {
		t.Errorf("the paid fill's notifications: %+v, want one that begins %q", ns, want)
	}
	declined := about(decliner.ID, dd.ReservationID)
	for _, n := range declined {
		if n.Kind == market.NoticeBookingHeld || n.Kind == market.NoticeOrderFilledCharging {
			t.Errorf("the declined fill also says %q", n.Text())
		}
	}
	if len(declined) != 2 || declined[0].Kind != market.NoticeOrderNote || !strings.Contains(declined[0].Text(), "is held until") {
		t.Errorf("the declined fill's notifications: %+v, want the order's note and the decline", declined)
	}
	f.requireReconciled()
}

// TestStandingOrderFillsOnAnotherReplicasChange runs on PostgreSQL in
// every run: replica b follows the change feed and runs the order
// matcher; replica a, which runs no matcher, holds the only slot, takes a
// standing order for it, then cancels the hold. Replica b hears the
// cancellation through the feed and fills the order — no tick, no call.
func TestStandingOrderFillsOnAnotherReplicasChange(t *testing.T) {
	dsn := pgtest.Database(t)
	f := newFixtureAt(t, dsn, nil)
	dbB, err := store.Open(f.ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer dbB.Close()
	b, err := New(f.ctx, Config{Billing: f.proc, PlatformFeeBP: feeBP, Now: func() time.Time { return t0 }, Replica: "b"}, dbB,
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(f.ctx)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); b.Follow(ctx) }()
	go func() { defer wg.Done(); b.MatchOrders(ctx) }()
	defer func() { cancel(); wg.Wait() }()

	start := t0.Add(48 * time.Hour)
	other := f.user("other@example.com")
	taken, err := f.wf.Book(f.ctx, other.ID, []market.ReservationPiece{{OfferID: f.offer.ID, Devices: 8, Start: start,
		End: start.Add(10 * time.Hour), PriceCents: 249, AmountCents: 19920}}, `{"version":1}`, 30*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	o := f.place(f.buyer.ID, gangRequest(start, 8, 10), 100_000, market.FillHold)
	if o.State != market.OrderOpen {
		t.Fatalf("placed behind the hold: %s", o.State)
	}
	began := time.Now()
	if _, err := f.wf.Cancel(f.ctx, other.ID, taken.ID); err != nil {
		t.Fatal(err)
	}
	got := f.waitOrder(f.buyer.ID, o.ID)
	if got.State != market.OrderFilled {
		t.Fatalf("after a's cancellation: %s, want filled by b", got.State)
	}
	t.Logf("b filled the order %s after a's cancellation", time.Since(began).Round(time.Millisecond))
	r, err := f.db.FindBuyerReservation(f.ctx, f.buyer.ID, got.ReservationID)
	if err != nil || r.AmountCents != 19920 || r.State != market.ReservationHeld {
		t.Fatalf("b's fill: %+v %v", r, err)
	}
}
