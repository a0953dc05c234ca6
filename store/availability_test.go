package store

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// onNode is piece on the node named, as a booking that was placed there.
func onNode(p market.ReservationPiece, node int) market.ReservationPiece {
	p.Nodes = []market.NodeShare{{Node: node, Devices: p.Devices}}
	return p
}

// confirmed confirms r as paid at t0, so it holds capacity past its hold.
func confirmed(t *testing.T, db *DB, r market.Reservation) market.Reservation {
	t.Helper()
	r, err := db.ConfirmReservation(context.Background(), r.ID, t0)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestFindOffersFreeWindow: "available from … for … hours" keeps the offers
// with devices free on their nodes throughout, within their windows and
// rental limits, and the count and pages are of those.
func TestFindOffersFreeWindow(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	prov := createUser(t, db, "prov@example.com", true)
	buyer := createUser(t, db, "buyer@example.com", false)
	full := listedOffer(t, db, prov.ID, 8)
	half := nodesOffer(t, db, prov.ID, 2, 8, true)
	free := listedOffer(t, db, prov.ID, 4)

	day := t0.Add(24 * time.Hour)
	book(t, db, buyer.ID, t0, piece(full, 8, day, 24))
	book(t, db, buyer.ID, t0, onNode(piece(half, 8, day, 24), 0), onNode(piece(free, 1, day.Add(48*time.Hour), 2), 0))

	find := func(w market.FreeWindow, minDevices int64, limit, offset int) ([]int64, int) {
		t.Helper()
		f := OfferFilter{Now: t0, Limit: limit, Offset: offset}
		f.Free = &w
		f.Devices.Min = minDevices
		ls, total, err := db.FindOffers(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		var ids []int64
		for _, l := range ls {
			ids = append(ids, l.Offer.ID)
		}
		return ids, total
	}
	for _, tc := range []struct {
		name  string
		w     market.FreeWindow
		min   int64
		want  []int64
		total int
	}{
		{"now", market.FreeWindow{}, 0, []int64{full.ID, half.ID, free.ID}, 3},
		{"during the bookings", market.FreeWindow{From: day.Add(time.Hour), Hours: 4}, 0, []int64{half.ID, free.ID}, 2},
		{"during, with 8 free", market.FreeWindow{From: day.Add(time.Hour), Hours: 4}, 8, []int64{half.ID}, 1},
		{"during, with 9 free", market.FreeWindow{From: day.Add(time.Hour), Hours: 4}, 9, nil, 0},
		{"overlapping the start", market.FreeWindow{From: day.Add(-time.Hour), Hours: 2}, 0, []int64{half.ID, free.ID}, 2},
		{"after them", market.FreeWindow{From: day.Add(24 * time.Hour), Hours: 24}, 8, []int64{full.ID, half.ID}, 2},
		{"longer than any rental", market.FreeWindow{Hours: 721}, 0, nil, 0},
		{"past the windows", market.FreeWindow{From: t0.Add(89 * 24 * time.Hour), Hours: 48}, 0, nil, 0},
	} {
		ids, total := find(tc.w, tc.min, 0, 0)
		if !slices.Equal(ids, tc.want) || total != tc.total {
			t.Errorf("%s: %v of %d; want %v of %d", tc.name, ids, total, tc.want, tc.total)
		}
	}
	during := market.FreeWindow{From: day.Add(time.Hour), Hours: 4}
	if ids, total := find(during, 0, 1, 1); !slices.Equal(ids, []int64{free.ID}) || total != 2 {
		t.Errorf("second page of one: %v of %d", ids, total)
	}
	if ids, total := find(during, 0, 1, 5); len(ids) != 0 || total != 2 {
		t.Errorf("a page past the end: %v of %d", ids, total)
	}
}

// TestListCommitmentsOfOffers: the catalogue reads the commitments of a
// page of offers at once, those holding capacity and not yet ended.
func TestListCommitmentsOfOffers(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	prov := createUser(t, db, "prov@example.com", true)
	buyer := createUser(t, db, "buyer@example.com", false)
	a := listedOffer(t, db, prov.ID, 8)
	b := listedOffer(t, db, prov.ID, 8)
	c := listedOffer(t, db, prov.ID, 8)
	r1 := confirmed(t, db, book(t, db, buyer.ID, t0, piece(a, 2, t0.Add(time.Hour), 2), piece(b, 3, t0.Add(time.Hour), 5)))
	gone := book(t, db, buyer.ID, t0, piece(a, 1, t0.Add(10*time.Hour), 2))
	if _, err := db.CancelReservation(ctx, buyer.ID, gone.ID, 0, t0); err != nil {
		t.Fatal(err)
	}
	// At hour 4 the 2-hour piece on a has ended.
	got, err := db.ListCommitmentsOfOffers(ctx, []int64{a.ID, b.ID, c.ID}, t0.Add(4*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || len(got[b.ID]) != 1 || got[b.ID][0].ID != r1.Pieces[1].ID || got[b.ID][0].Devices != 3 {
		t.Fatalf("ListCommitmentsOfOffers = %+v; want b's piece only", got)
	}
	got, err = db.ListCommitmentsOfOffers(ctx, []int64{a.ID, b.ID}, t0)
	if err != nil || len(got[a.ID]) != 1 || len(got[b.ID]) != 1 {
		t.Fatalf("at t0: %+v, %v", got, err)
	}
}
