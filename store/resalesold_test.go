package store

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// ListResalesSoldInto reads, for several reservations at once, the
// listings whose sales made them: the two bought ones come back with
// their own listing and price, an open listing and a reservation not
// bought on resale do not, and no ids is no query and nothing.
func TestListResalesSoldInto(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	prov := createUser(t, db, "prov@example.com", true)
	seller := createUser(t, db, "seller@example.com", false)
	buyer := createUser(t, db, "buyer@example.com", false)
	o := twoNodeOffer(t, db, prov.ID)
	start := t0.Add(24 * time.Hour)
	var bought []market.Reservation
	var listings []market.ResaleListing
	for i, price := range []market.Cents{1000, 2000} {
		r := paidRental(t, db, seller.ID, o, 8, start.Add(time.Duration(i)*8*time.Hour), 4, fmt.Sprintf("pi_seller_%d", i))
		l, err := db.CreateResaleListing(ctx, seller.ID, r.ID, r.Start(), price, t0)
		if err != nil {
			t.Fatal(err)
		}
		l, n, err := db.SellResaleListing(ctx, l.ID, buyer.ID, fmt.Sprintf("pi_buyer_%d", i), 0, 1000, t0.Add(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		bought, listings = append(bought, n), append(listings, l)
	}
	open := paidRental(t, db, seller.ID, o, 8, start.Add(16*time.Hour), 4, "pi_open")
	if _, err := db.CreateResaleListing(ctx, seller.ID, open.ID, open.Start(), 500, t0); err != nil {
		t.Fatal(err)
	}
	own := paidRental(t, db, buyer.ID, o, 8, start.Add(24*time.Hour), 4, "pi_own")

	ls, err := db.ListResalesSoldInto(ctx, []int64{bought[0].ID, own.ID, bought[1].ID, open.ID})
	if err != nil {
		t.Fatal(err)
	}
	if len(ls) != 2 {
		t.Fatalf("listings %+v, want the two sold", ls)
	}
	// Newest first: the second sale, then the first.
	for i, want := range []int{1, 0} {
		got := ls[i]
		if got.ID != listings[want].ID || got.SoldReservationID != bought[want].ID || got.ReservationID == bought[want].ID ||
			got.Price != []market.Cents{1000, 2000}[want] || got.State != market.ListingSold {
			t.Errorf("listing %d = %+v, want #%d sold into %d at %s", i, got, listings[want].ID, bought[want].ID, []market.Cents{1000, 2000}[want])
		}
	}
	if ls, err := db.ListResalesSoldInto(ctx, nil); err != nil || len(ls) != 0 {
		t.Fatalf("no ids: %+v, %v", ls, err)
	}
}
