package store

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

func standingOrder(buyerID int64, o market.Offer, start time.Time, devices int) market.StandingOrder {
	return market.StandingOrder{BuyerID: buyerID,
		Request: market.Request{Workload: market.Workload{Kind: market.WorkTraining, Devices: devices, Hours: 2},
			Constraints: market.Constraints{OfferIDs: []int64{o.ID}, EarliestStart: start, Deadline: start.Add(2 * time.Hour)}},
		LimitKind: market.LimitTotalBudget, LimitCents: 1_000_000, FillBy: t0.Add(24 * time.Hour), OnFill: market.FillHold}
}

// Creating: validation, at most MaxOpenStandingOrders open per buyer (a
// cancelled one frees a place); finding, listing and cancelling by the
// owner only; cancelling twice is a conflict; expiry at the fill-by date.
func TestStandingOrderLifecycleAndOwnership(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	prov, buyer, other := createUser(t, db, "p@example.com", true), createUser(t, db, "b@example.com", false), createUser(t, db, "o@example.com", false)
	off := listedOffer(t, db, prov.ID, 8)
	start := t0.Add(48 * time.Hour)

	bad := standingOrder(buyer.ID, off, start, 8)
	bad.FillBy = t0
	_, err := db.CreateStandingOrder(ctx, bad, t0)
	wantCode(t, err, market.CodeInvalid)

	var orders []market.StandingOrder
	for i := range market.MaxOpenStandingOrders {
		o, err := db.CreateStandingOrder(ctx, standingOrder(buyer.ID, off, start, 8), t0.Add(time.Duration(i)*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if o.ID == 0 || o.State != market.OrderOpen || o.RequestJSON == "" {
			t.Fatalf("created: %+v", o)
		}
		orders = append(orders, o)
	}
	_, err = db.CreateStandingOrder(ctx, standingOrder(buyer.ID, off, start, 8), t0)
	wantMessage(t, err, market.CodeConflict, "5 open standing orders")
	if _, err := db.CreateStandingOrder(ctx, standingOrder(other.ID, off, start, 8), t0); err != nil {
		t.Fatalf("another buyer's first order: %v", err)
	}

	_, err = db.FindStandingOrder(ctx, other.ID, orders[0].ID)
	wantCode(t, err, market.CodeNotFound)
	_, err = db.CancelStandingOrder(ctx, other.ID, orders[0].ID, t0)
	wantCode(t, err, market.CodeNotFound)
	c, err := db.CancelStandingOrder(ctx, buyer.ID, orders[0].ID, t0)
	if err != nil || c.State != market.OrderCancelled {
		t.Fatalf("cancel: %+v %v", c.State, err)
	}
	_, err = db.CancelStandingOrder(ctx, buyer.ID, orders[0].ID, t0)
	wantCode(t, err, market.CodeConflict)
	if _, err := db.CreateStandingOrder(ctx, standingOrder(buyer.ID, off, start, 8), t0.Add(time.Minute)); err != nil {
		t.Fatalf("after a cancellation: %v", err)
	}

	list, err := db.ListStandingOrders(ctx, buyer.ID)
	if err != nil || len(list) != 6 {
		t.Fatalf("list: %d orders, %v", len(list), err)
	}
	for _, o := range list {
		if o.BuyerID != buyer.ID {
			t.Fatalf("list has order %d of buyer %d", o.ID, o.BuyerID)
		}
	}
	open, err := db.ListOpenStandingOrders(ctx, t0)
	if err != nil || len(open) != 6 { // 5 of the buyer's, 1 of the other's
		t.Fatalf("open: %d, %v", len(open), err)
	}
	for i := 1; i < len(open); i++ {
		if open[i].CreatedAt.Before(open[i-1].CreatedAt) {
			t.Fatalf("open orders not oldest first: %v then %v", open[i-1].CreatedAt, open[i].CreatedAt)
		}
	}

	if exp, err := db.ExpireStandingOrders(ctx, t0.Add(24*time.Hour-time.Second)); err != nil || len(exp) != 0 {
		t.Fatalf("expired early: %d %v", len(exp), err)
	}
	exp, err := db.ExpireStandingOrders(ctx, t0.Add(24*time.Hour))
	if err != nil || len(exp) != 6 {
		t.Fatalf("expired at the fill-by: %d %v", len(exp), err)
	}
	if o, _ := db.FindStandingOrder(ctx, buyer.ID, orders[1].ID); o.State != market.OrderExpired {
		t.Fatalf("after expiry: %s", o.State)
	}
	_, _, err = db.FillStandingOrder(ctx, orders[1].ID, []market.ReservationPiece{piece(off, 8, start, 2)}, t0, hold)
	wantCode(t, err, market.CodeConflict)
}

// A fill books with the booking's own capacity check, all or nothing: a
// fill over taken capacity stores nothing and leaves the order open; a
// fill of an order already filled stores nothing. Concurrent fills of
// one order and of two orders for the same devices: one reservation each
// at most, never more devices than the offer has.
func TestFillStandingOrderIsAtomicAndOnce(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	prov, a, b, c := createUser(t, db, "p@example.com", true), createUser(t, db, "a@example.com", false),
		createUser(t, db, "b@example.com", false), createUser(t, db, "c@example.com", false)
	off := listedOffer(t, db, prov.ID, 8)
	start := t0.Add(48 * time.Hour)
	held := book(t, db, c.ID, t0, piece(off, 6, start, 2))

	oa, err := db.CreateStandingOrder(ctx, standingOrder(a.ID, off, start, 4), t0)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = db.FillStandingOrder(ctx, oa.ID, []market.ReservationPiece{piece(off, 4, start, 2)}, t0, hold)
	wantCode(t, err, market.CodeConflict)
	if o, _ := db.FindStandingOrder(ctx, a.ID, oa.ID); o.State != market.OrderOpen || o.ReservationID != 0 {
		t.Fatalf("after a refused fill: %s %d", o.State, o.ReservationID)
	}
	if rs, _ := db.ListBuyerReservations(ctx, a.ID); len(rs) != 0 {
		t.Fatalf("a refused fill stored %d reservations", len(rs))
	}
	if _, err := db.CancelReservation(ctx, c.ID, held.ID, 1000, t0); err != nil {
		t.Fatal(err)
	}

	ob, err := db.CreateStandingOrder(ctx, standingOrder(b.ID, off, start, 4), t0)
	if err != nil {
		t.Fatal(err)
	}
	// Three fills of a, three of b, at once, each wanting 6 of 8 devices:
	// exactly one succeeds.
	var wg sync.WaitGroup
	var mu sync.Mutex
	var wins []market.Reservation
	for i := range 6 {
		id := oa.ID
		if i%2 == 1 {
			id = ob.ID
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, r, err := db.FillStandingOrder(ctx, id, []market.ReservationPiece{piece(off, 6, start, 2)}, t0, hold)
			if err != nil {
				if market.ErrorCode(err) != market.CodeConflict {
					t.Error(err)
				}
				return
			}
			mu.Lock()
			wins = append(wins, r)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if len(wins) != 1 {
		t.Fatalf("%d fills succeeded, want 1", len(wins))
	}
	filled := 0
	for _, who := range []struct{ buyer, id int64 }{{a.ID, oa.ID}, {b.ID, ob.ID}} {
		o, _ := db.FindStandingOrder(ctx, who.buyer, who.id)
		rs, _ := db.ListBuyerReservations(ctx, who.buyer)
		if o.State == market.OrderFilled {
			filled++
			if o.ReservationID != wins[0].ID || len(rs) != 1 || rs[0].ID != wins[0].ID || o.ReservationState != market.ReservationHeld {
				t.Fatalf("filled order %d: reservation %d (%s), buyer's reservations %d", o.ID, o.ReservationID, o.ReservationState, len(rs))
			}
		} else if o.State != market.OrderOpen || len(rs) != 0 {
			t.Fatalf("unfilled order %d: %s with %d reservations", o.ID, o.State, len(rs))
		}
	}
	if filled != 1 {
		t.Fatalf("%d orders filled", filled)
	}
	cs, err := db.ListCommitmentsOfOffers(ctx, []int64{off.ID}, t0)
	if err != nil || len(cs[off.ID]) != 1 || cs[off.ID][0].Devices != 6 {
		t.Fatalf("commitments: %+v %v", cs, err)
	}
	ns, _ := db.ListNotifications(ctx, wins[0].BuyerID, 10)
	found := false
	for _, n := range ns {
		found = found || n.Kind == NotifyOrderFilled
	}
	if !found {
		t.Error("no fill notification")
	}
}
