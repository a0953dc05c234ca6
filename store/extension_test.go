package store

import (
	"context"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// running books pieces for the buyer, confirms them and advances the
// clock to at, so the reservation is active.
func running(t *testing.T, db *DB, buyerID int64, at time.Time, pieces ...market.ReservationPiece) market.Reservation {
	t.Helper()
	ctx := context.Background()
	r := book(t, db, buyerID, t0, pieces...)
	if _, err := db.ConfirmReservation(ctx, r.ID, t0); err != nil {
		t.Fatal(err)
	}
	if _, err := db.AdvanceReservations(ctx, at); err != nil {
		t.Fatal(err)
	}
	r, err := db.FindReservation(ctx, r.ID)
	if err != nil || r.State != market.ReservationActive {
		t.Fatalf("reservation %+v, %v: want active", r, err)
	}
	return r
}

// TestCreateExtension: a running reservation is continued on the very
// nodes it holds, re-checked node by node in the transaction, as a new
// held reservation that names what it extends; all pieces or none.
func TestCreateExtension(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	prov := createUser(t, db, "prov@example.com", true)
	buyer := createUser(t, db, "buyer@example.com", false)
	other := createUser(t, db, "other@example.com", false)
	o := nodesOffer(t, db, prov.ID, 2, 8, false)
	small := listedOffer(t, db, prov.ID, 4)

	start := t0.Add(2 * time.Hour)
	end := start.Add(10 * time.Hour)
	now := start.Add(time.Hour)
	r := running(t, db, buyer.ID, now, onNode(piece(o, 4, start, 10), 1), piece(small, 2, start, 10))
	// Another buyer holds 5 devices of node 1 from 6 hours after the end: 3 free there then, 4 needed.
	// Node 0 stays wholly free, which does not help: the extension keeps its node.
	confirmed(t, db, book(t, db, other.ID, t0, onNode(piece(o, 5, end.Add(6*time.Hour), 4), 1)))

	offers := map[int64]market.Offer{o.ID: o, small.ID: small}
	long, err := market.ExtensionPieces(r, offers, 8, 100, now)
	if err != nil {
		t.Fatal(err)
	}
	_, err = db.CreateExtension(ctx, buyer.ID, r.ID, long.Pieces, now, hold)
	wantMessage(t, err, market.CodeConflict, "cannot be extended that long")
	if exts, err := db.FindExtensions(ctx, r.ID); err != nil || len(exts) != 0 {
		t.Fatalf("a refused extension left %+v, %v", exts, err)
	}

	ext, err := market.ExtensionPieces(r, offers, 6, 100, now)
	if err != nil {
		t.Fatal(err)
	}
	_, err = db.CreateExtension(ctx, other.ID, r.ID, ext.Pieces, now, hold)
	wantCode(t, err, market.CodeNotFound)

	got, err := db.CreateExtension(ctx, buyer.ID, r.ID, ext.Pieces, now, hold)
	if err != nil {
		t.Fatal(err)
	}
	// 4 × 6 h × $2.49, plus storage of 100 GB × 8¢ per GB-month × 6 h / 730 h
	// (4,800/730 = 6.58 → 7¢); 2 × 6 h × $2.49 plus the same 7¢.
	want := market.Cents(4*6*249+7) + market.Cents(2*6*249+7)
	if got.ID == 0 || got.ExtendsID != r.ID || got.State != market.ReservationHeld || got.BuyerID != buyer.ID ||
		got.AmountCents != want || got.RequestJSON != r.RequestJSON || !got.HoldExpiresAt.Equal(now.Add(hold)) || len(got.Pieces) != 2 {
		t.Fatalf("extension %+v; want held, extending %d, %d¢", got, r.ID, want)
	}
	for i, p := range got.Pieces {
		orig := r.Pieces[i]
		if p.OfferID != orig.OfferID || p.Devices != orig.Devices || !slices.Equal(p.Nodes, orig.Nodes) ||
			!p.Start.Equal(end) || !p.End.Equal(end.Add(6*time.Hour)) || p.ID == 0 || p.Terms.UptimeBP != o.UptimeBP {
			t.Errorf("extension piece %d = %+v; original %+v", i, p, orig)
		}
	}
	found, err := db.FindReservation(ctx, got.ID)
	if err != nil || !reflect.DeepEqual(found, got) {
		t.Errorf("FindReservation = %+v, %v; want %+v", found, err, got)
	}
	if exts, err := db.FindExtensions(ctx, r.ID); err != nil || len(exts) != 1 || exts[0].ID != got.ID {
		t.Errorf("FindExtensions = %+v, %v", exts, err)
	}
	cs, err := db.ListOfferCommitments(ctx, o.ID, now)
	if err != nil || len(cs) != 3 || !cs[1].Start.Equal(end) || cs[1].ID != got.Pieces[0].ID {
		t.Errorf("commitments after the extension = %+v, %v", cs, err)
	}

	// While it holds capacity, a second one is refused; once cancelled, it may be asked again.
	_, err = db.CreateExtension(ctx, buyer.ID, r.ID, ext.Pieces, now, hold)
	wantMessage(t, err, market.CodeConflict, "already continues")
	if _, err := db.CancelReservation(ctx, buyer.ID, got.ID, 0, now); err != nil {
		t.Fatal(err)
	}
	again, err := db.CreateExtension(ctx, buyer.ID, r.ID, ext.Pieces, now, hold)
	if err != nil || again.ExtendsID != r.ID {
		t.Fatalf("extension after cancelling the first: %+v, %v", again, err)
	}

	// Pieces that are not the reservation's own continuation are refused.
	moved := slices.Clone(ext.Pieces)
	moved[0].Nodes = []market.NodeShare{{Node: 0, Devices: 4}}
	_, err = db.CreateExtension(ctx, buyer.ID, r.ID, moved, now, hold)
	wantCode(t, err, market.CodeInvalid)
	_, err = db.CreateExtension(ctx, buyer.ID, r.ID, ext.Pieces[:1], now, hold)
	wantCode(t, err, market.CodeInvalid)

	// Once it has ended it no longer runs.
	if _, err := db.AdvanceReservations(ctx, end); err != nil {
		t.Fatal(err)
	}
	_, err = db.CreateExtension(ctx, buyer.ID, r.ID, ext.Pieces, end, hold)
	wantCode(t, err, market.CodeConflict)
}
