package store

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// The node's agent hands access over at the hour the time was resold
// from: until then it installs the seller's keys for the original piece;
// from then on it removes them and installs the buyer's for the bought
// piece, on the same node.
func TestResaleHandsAccessOver(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	prov := createUser(t, db, "prov@example.com", true)
	seller := createUser(t, db, "seller@example.com", false)
	buyer := createUser(t, db, "buyer@example.com", false)
	o := twoNodeOffer(t, db, prov.ID)
	for i, u := range []market.User{seller, buyer} {
		if _, err := db.AddSSHKey(ctx, u.ID, testKey(i), t0); err != nil {
			t.Fatal(err)
		}
	}
	start := t0.Add(2 * time.Hour)
	r := paidRental(t, db, seller.ID, o, 8, start, 4, "pi_seller")
	p := r.Pieces[0]
	node := p.Nodes[0].Node
	tok, _ := hostToken(t, db, prov.ID, o.ID, node)
	if _, err := db.AdvanceReservations(ctx, start); err != nil {
		t.Fatal(err)
	}
	conn := market.Connection{Host: "203.0.113.7", Port: 22, User: "gpu"}
	if _, err := db.RecordInstalled(ctx, tok.ID, p.ID, conn, start.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}

	now := start.Add(70 * time.Minute)
	from := start.Add(2 * time.Hour)
	l, err := db.CreateResaleListing(ctx, seller.ID, r.ID, from, 1000, now)
	if err != nil {
		t.Fatal(err)
	}
	_, n, err := db.SellResaleListing(ctx, l.ID, buyer.ID, "pi_buyer", 0, 1000, now)
	if err != nil {
		t.Fatal(err)
	}
	np := n.Pieces[0]
	if len(np.Nodes) != 1 || np.Nodes[0] != p.Nodes[0] {
		t.Fatalf("bought piece on %+v, want %+v", np.Nodes, p.Nodes)
	}

	list := func(at time.Time) []Assignment {
		t.Helper()
		as, err := db.ListAssignments(ctx, tok.ID, at)
		if err != nil {
			t.Fatal(err)
		}
		return as
	}
	as := list(from.Add(-time.Second))
	if len(as) != 1 || as[0].Piece.ID != p.ID || as[0].State != market.AccessInstall || len(as[0].SSHKeys) != 1 || as[0].SSHKeys[0] != testKey(0).Line {
		t.Fatalf("before the handover: %+v", as)
	}
	_, err = db.RecordInstalled(ctx, tok.ID, np.ID, conn, from.Add(-time.Second))
	wantCode(t, err, market.CodeConflict)
	_, err = db.RecordRemoved(ctx, tok.ID, p.ID, time.Time{}, from.Add(-time.Second))
	wantCode(t, err, market.CodeConflict)

	as = list(from)
	if len(as) != 2 {
		t.Fatalf("at the handover: %+v", as)
	}
	for _, a := range as {
		switch a.Piece.ID {
		case p.ID:
			if a.State != market.AccessRemove || len(a.SSHKeys) != 0 || a.ReservationID != r.ID {
				t.Fatalf("seller's piece at the handover: %+v", a)
			}
		case np.ID:
			if a.State != market.AccessInstall || len(a.SSHKeys) != 1 || a.SSHKeys[0] != testKey(1).Line || a.ReservationID != n.ID || a.Devices != 8 {
				t.Fatalf("buyer's piece at the handover: %+v", a)
			}
		default:
			t.Fatalf("unknown assignment %+v", a)
		}
	}
	if _, err := db.RecordRemoved(ctx, tok.ID, p.ID, time.Time{}, from.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, err := db.RecordInstalled(ctx, tok.ID, np.ID, conn, from.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	as = list(from.Add(2 * time.Minute))
	if len(as) != 1 || as[0].Piece.ID != np.ID || as[0].State != market.AccessInstall {
		t.Fatalf("after the handover: %+v", as)
	}
	if as := list(np.End); len(as) != 1 || as[0].Piece.ID != np.ID || as[0].State != market.AccessRemove {
		t.Fatalf("at the end: %+v", as)
	}
}

// Two buyers race for one listing: one sale, the other refused; the
// capacity is held exactly once throughout (commitments per offer-hour
// never exceed the offer's devices, and nobody can book the resold
// hours); listing rules are enforced in the store.
func TestResaleSaleIsAtomicAndOnce(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	prov := createUser(t, db, "prov@example.com", true)
	seller := createUser(t, db, "seller@example.com", false)
	a := createUser(t, db, "a@example.com", false)
	b := createUser(t, db, "b@example.com", false)
	o := twoNodeOffer(t, db, prov.ID)
	start := t0.Add(24 * time.Hour)
	r := paidRental(t, db, seller.ID, o, 16, start, 6, "pi_seller") // every device of both nodes
	if r.AmountCents != o.PriceCentsPerDeviceHour*16*6 {
		t.Fatalf("amount %s", r.AmountCents)
	}

	_, err := db.CreateResaleListing(ctx, a.ID, r.ID, start, 100, t0)
	wantCode(t, err, market.CodeNotFound)
	_, err = db.CreateResaleListing(ctx, seller.ID, r.ID, start, r.AmountCents+1, t0)
	wantCode(t, err, market.CodeInvalid)
	_, err = db.CreateResaleListing(ctx, seller.ID, r.ID, start.Add(time.Hour), 100, t0)
	wantCode(t, err, market.CodeInvalid)
	l, err := db.CreateResaleListing(ctx, seller.ID, r.ID, start, r.AmountCents, t0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = db.CreateResaleListing(ctx, seller.ID, r.ID, start, 100, t0)
	wantCode(t, err, market.CodeConflict)
	_, err = db.WithdrawResaleListing(ctx, a.ID, l.ID, t0)
	wantCode(t, err, market.CodeNotFound)
	if open, err := db.ListOpenResaleOffers(ctx, t0); err != nil || len(open) != 1 || open[0].Listing.ID != l.ID {
		t.Fatalf("open listings = %+v, %v", open, err)
	}
	if open, err := db.ListOpenResaleOffers(ctx, start); err != nil || len(open) != 0 {
		t.Fatalf("open listings once the start passed = %+v, %v", open, err)
	}
	_, _, err = db.SellResaleListing(ctx, l.ID, seller.ID, "pi_self", 0, 1000, t0)
	wantCode(t, err, market.CodeInvalid)

	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, u := range []market.User{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, errs[i] = db.SellResaleListing(ctx, l.ID, u.ID, "pi_"+u.Email, 0, 1000, t0.Add(time.Minute))
		}()
	}
	wg.Wait()
	if (errs[0] == nil) == (errs[1] == nil) {
		t.Fatalf("race: %v, %v; want one sale", errs[0], errs[1])
	}
	for _, err := range errs {
		if err != nil {
			wantCode(t, err, market.CodeConflict)
		}
	}
	ls, err := db.ListReservationResales(ctx, r.ID)
	if err != nil || len(ls) != 1 || ls[0].State != market.ListingSold {
		t.Fatalf("listings = %+v, %v", ls, err)
	}
	// The ledger holds one sale: a charge, the resale and the fee (10% of
	// the price, 16 × 6 × the price per device-hour), besides the seller's payment.
	es, err := db.ListLedger(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	var charges, resales, fees int
	for _, e := range es {
		switch e.Kind {
		case market.EntryCharge:
			charges++
		case market.EntryResale:
			resales++
			if e.Amount != r.AmountCents {
				t.Fatalf("resale entry %s, want %s", e.Amount, r.AmountCents)
			}
		case market.EntryFee:
			fees++
			if d := e.Amount*10 - r.AmountCents; d < -5 || d > 5 { // 10%, rounded to the cent
				t.Fatalf("fee %s is not 10%% of %s", e.Amount, r.AmountCents)
			}
		}
	}
	if charges != 2 || resales != 1 || fees != 1 {
		t.Fatalf("entries: %d charges, %d resales, %d fees", charges, resales, fees)
	}

	// Capacity: per offer and hour, the devices committed never exceed
	// the offer's 16, counted by brute force over every hour of the day.
	for h := 0; h < 48; h++ {
		at := t0.Add(time.Duration(h) * time.Hour)
		cs, err := db.ListOfferCommitments(ctx, o.ID, t0)
		if err != nil {
			t.Fatal(err)
		}
		used := 0
		for _, c := range cs {
			if !at.Before(c.Start) && at.Before(c.End) {
				used += c.Devices
			}
		}
		if used > o.DevicesPerNode*o.Nodes {
			t.Fatalf("%d devices committed at %s, offer has %d", used, at, o.DevicesPerNode*o.Nodes)
		}
		if at.Equal(start.Add(3*time.Hour)) && used != 16 {
			t.Fatalf("%d devices committed in the resold time, want 16 held once", used)
		}
	}
	_, err = db.CreateReservation(ctx, a.ID, []market.ReservationPiece{piece(o, 1, start.Add(2*time.Hour), 1)}, `{"version":1}`, t0.Add(time.Minute), hold)
	wantCode(t, err, market.CodeConflict)
	// One trade for the price index: the bought time is not a second one.
	trades, err := db.ListTrades(ctx, t0.Add(-time.Hour), t0.Add(time.Hour))
	if err != nil || len(trades) != 1 || trades[0].Devices != 16 {
		t.Fatalf("trades = %+v, %v; want the original booking only", trades, err)
	}
	// The resold reservation cannot be cancelled under the buyer.
	_, err = db.CancelReservation(ctx, seller.ID, r.ID, 1000, t0.Add(time.Minute))
	wantCode(t, err, market.CodeConflict)
}
