package store

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// listedOffer stores an approved, active offer of the provider with the
// given number of devices on one node, and returns it as stored.
func listedOffer(t testing.TB, db *DB, providerID int64, devices int) market.Offer {
	t.Helper()
	ctx := context.Background()
	in := validOffer(providerID)
	in.DevicesPerNode = devices
	o, err := db.CreateOffer(ctx, in, t0)
	if err != nil {
		t.Fatalf("CreateOffer: %v", err)
	}
	if err := db.ReviewOffer(ctx, o.ID, market.ReviewApproved, "", t0); err != nil {
		t.Fatalf("ReviewOffer: %v", err)
	}
	o, err = db.FindProviderOffer(ctx, providerID, o.ID)
	if err != nil {
		t.Fatalf("FindProviderOffer: %v", err)
	}
	return o
}

// piece is a piece on o of devices over [start, start+hours), priced at
// the offer's rate.
func piece(o market.Offer, devices int, start time.Time, hours int) market.ReservationPiece {
	return market.ReservationPiece{
		OfferID: o.ID, Devices: devices, Start: start, End: start.Add(time.Duration(hours) * time.Hour),
		PriceCents:  o.PriceCentsPerDeviceHour,
		AmountCents: o.PriceCentsPerDeviceHour * market.Cents(devices*hours),
	}
}

const hold = 30 * time.Minute

func book(t *testing.T, db *DB, buyerID int64, now time.Time, pieces ...market.ReservationPiece) market.Reservation {
	t.Helper()
	r, err := db.CreateReservation(context.Background(), buyerID, pieces, `{"version":1}`, now, hold)
	if err != nil {
		t.Fatalf("CreateReservation: %v", err)
	}
	return r
}

func wantMessage(t *testing.T, err error, code market.Code, contains string) {
	t.Helper()
	wantCode(t, err, code)
	if !strings.Contains(market.ErrorMessage(err), contains) {
		t.Fatalf("message %q does not contain %q", market.ErrorMessage(err), contains)
	}
}

func TestReservationLifecycle(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	prov := createUser(t, db, "prov@example.com", true)
	buyer := createUser(t, db, "buyer@example.com", false)
	other := createUser(t, db, "other@example.com", false)
	o := listedOffer(t, db, prov.ID, 8)
	o2 := listedOffer(t, db, prov.ID, 4)

	start := t0.Add(48 * time.Hour)
	p1 := piece(o, 4, start, 2)
	p2 := piece(o2, 2, start.Add(time.Hour), 3)
	// Policy fields and terms in the request are ignored: the offer's, at booking, apply.
	p1.FreeCancelHours, p1.CancelFeeBP = 1, 1
	p1.Terms = market.SLATerms{BillingBasis: market.BillingSuccessfulWork, UptimeBP: 1}
	r, err := db.CreateReservation(ctx, buyer.ID, []market.ReservationPiece{p1, p2}, `{"version":1}`, t0, hold)
	if err != nil {
		t.Fatal(err)
	}
	if r.ID == 0 || r.BuyerID != buyer.ID || r.State != market.ReservationHeld || r.RequestJSON != `{"version":1}` ||
		!r.HoldExpiresAt.Equal(t0.Add(hold)) || r.AmountCents != p1.AmountCents+p2.AmountCents ||
		r.CancelFeeCents != 0 || !r.CreatedAt.Equal(t0) || !r.UpdatedAt.Equal(t0) || len(r.Pieces) != 2 {
		t.Fatalf("CreateReservation = %+v", r)
	}
	for i, want := range []market.ReservationPiece{p1, p2} {
		got := r.Pieces[i]
		want.ID, want.ProviderID, want.FreeCancelHours, want.CancelFeeBP = got.ID, prov.ID, o.FreeCancelHours, o.CancelFeeBP
		want.Terms = market.TermsOf([]market.Offer{o, o2}[i])
		want.Nodes = []market.NodeShare{{Node: 0, Devices: want.Devices}} // one-node offers
		if got.ID == 0 || !reflect.DeepEqual(got, want) {
			t.Errorf("piece %d = %+v, want %+v", i, got, want)
		}
	}

	found, err := db.FindReservation(ctx, r.ID)
	if err != nil || !reflect.DeepEqual(found, r) {
		t.Errorf("FindReservation = %+v, %v; want %+v", found, err, r)
	}
	mine, err := db.FindBuyerReservation(ctx, buyer.ID, r.ID)
	if err != nil || !reflect.DeepEqual(mine, r) {
		t.Errorf("FindBuyerReservation = %+v, %v", mine, err)
	}
	_, err = db.FindBuyerReservation(ctx, other.ID, r.ID)
	wantCode(t, err, market.CodeNotFound)
	_, err = db.FindReservation(ctx, r.ID+100)
	wantCode(t, err, market.CodeNotFound)
	_, err = db.CancelReservation(ctx, other.ID, r.ID, 1000, t0)
	wantCode(t, err, market.CodeNotFound)
	if list, err := db.ListBuyerReservations(ctx, other.ID); err != nil || len(list) != 0 {
		t.Errorf("other buyer's reservations = %v, %v", list, err)
	}

	later := book(t, db, buyer.ID, t0.Add(time.Minute), piece(o, 1, start.Add(100*time.Hour), 1))
	list, err := db.ListBuyerReservations(ctx, buyer.ID)
	if err != nil || len(list) != 2 || list[0].ID != later.ID || !reflect.DeepEqual(list[1], r) {
		t.Errorf("ListBuyerReservations = %+v, %v; want newest first", list, err)
	}

	pp, err := db.ListProviderPieces(ctx, prov.ID)
	if err != nil || len(pp) != 3 {
		t.Fatalf("ListProviderPieces = %+v, %v", pp, err)
	}
	if !reflect.DeepEqual(pp[0].Piece, r.Pieces[0]) || pp[0].ReservationID != r.ID || pp[0].State != market.ReservationHeld ||
		pp[0].OfferTitle != o.Title || pp[0].BuyerName != buyer.DisplayName ||
		!reflect.DeepEqual(pp[1].Piece, r.Pieces[1]) || pp[2].ReservationID != later.ID {
		t.Errorf("ListProviderPieces = %+v", pp)
	}
	if pp, err := db.ListProviderPieces(ctx, buyer.ID); err != nil || len(pp) != 0 {
		t.Errorf("pieces of a non-provider = %v, %v", pp, err)
	}

	cs, err := db.ListOfferCommitments(ctx, o.ID, t0)
	want := []market.Commitment{
		{ID: r.Pieces[0].ID, OfferID: o.ID, Devices: 4, Start: start, End: start.Add(2 * time.Hour), Nodes: []market.NodeShare{{Node: 0, Devices: 4}}},
		{ID: later.Pieces[0].ID, OfferID: o.ID, Devices: 1, Start: start.Add(100 * time.Hour), End: start.Add(101 * time.Hour), Nodes: []market.NodeShare{{Node: 0, Devices: 1}}},
	}
	if err != nil || !reflect.DeepEqual(cs, want) {
		t.Errorf("ListOfferCommitments = %+v, %v; want %+v", cs, err, want)
	}
	all, err := db.ListAllCommitments(ctx, t0)
	if err != nil || len(all) != 3 || !reflect.DeepEqual(all[:2], want) || all[2].OfferID != o2.ID || all[2].ID != r.Pieces[1].ID {
		t.Errorf("ListAllCommitments = %+v, %v", all, err)
	}

	// Pay, then let time pass.
	conf, err := db.ConfirmReservation(ctx, r.ID, t0.Add(10*time.Minute))
	if err != nil || conf.State != market.ReservationConfirmed || !conf.UpdatedAt.Equal(t0.Add(10*time.Minute)) {
		t.Fatalf("ConfirmReservation = %+v, %v", conf, err)
	}
	again, err := db.ConfirmReservation(ctx, r.ID, t0.Add(40*time.Minute))
	if err != nil || !reflect.DeepEqual(again, conf) {
		t.Errorf("repeated ConfirmReservation = %+v, %v; want it unchanged", again, err)
	}
	// A confirmed reservation keeps its capacity after the hold time.
	if cs, _ := db.ListOfferCommitments(ctx, o.ID, t0.Add(time.Hour)); len(cs) != 1 || cs[0].ID != r.Pieces[0].ID {
		t.Errorf("commitments after the hold time = %+v; want only the confirmed piece", cs)
	}
	if expired, err := db.ExpireHolds(ctx, t0.Add(time.Hour)); err != nil || len(expired) != 1 || expired[0].ID != later.ID ||
		expired[0].State != market.ReservationExpired || len(expired[0].Pieces) != 1 {
		t.Errorf("ExpireHolds = %+v, %v; want the unpaid hold only", expired, err)
	}

	for _, step := range []struct {
		at      time.Time
		changed []int64
		state   market.ReservationState
	}{
		{start.Add(-time.Second), nil, market.ReservationConfirmed},
		{start, []int64{r.ID}, market.ReservationActive},
		{start.Add(3 * time.Hour), nil, market.ReservationActive}, // the second piece runs until start+4h
		{start.Add(4 * time.Hour), []int64{r.ID}, market.ReservationCompleted},
		{start.Add(5 * time.Hour), nil, market.ReservationCompleted},
	} {
		rs, err := db.AdvanceReservations(ctx, step.at)
		if err != nil {
			t.Fatal(err)
		}
		var ids []int64
		for _, x := range rs {
			ids = append(ids, x.ID)
			if x.State != step.state || len(x.Pieces) != 2 || !x.UpdatedAt.Equal(step.at) {
				t.Errorf("at %s: changed %+v", step.at, x)
			}
		}
		if !reflect.DeepEqual(ids, step.changed) {
			t.Errorf("AdvanceReservations(%s) changed %v, want %v", step.at, ids, step.changed)
		}
		if got, _ := db.FindReservation(ctx, r.ID); got.State != step.state {
			t.Errorf("at %s: state %s, want %s", step.at, got.State, step.state)
		}
	}
	if got, err := db.ConfirmReservation(ctx, r.ID, start.Add(5*time.Hour)); err != nil || got.State != market.ReservationCompleted {
		t.Errorf("a late payment notification = %+v, %v; want the completed reservation, no error", got, err)
	}
	_, err = db.CancelReservation(ctx, buyer.ID, r.ID, 1000, start.Add(5*time.Hour))
	wantCode(t, err, market.CodeConflict)

	// A confirmed booking that was never seen active goes straight to completed.
	quick := book(t, db, buyer.ID, t0, piece(o, 1, start.Add(200*time.Hour), 1))
	if _, err := db.ConfirmReservation(ctx, quick.ID, t0); err != nil {
		t.Fatal(err)
	}
	if rs, err := db.AdvanceReservations(ctx, start.Add(300*time.Hour)); err != nil || len(rs) != 1 || rs[0].State != market.ReservationCompleted {
		t.Errorf("AdvanceReservations past the end = %+v, %v", rs, err)
	}
}

func TestHoldExpiryFreesCapacity(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	prov := createUser(t, db, "prov@example.com", true)
	first := createUser(t, db, "first@example.com", false)
	second := createUser(t, db, "second@example.com", false)
	o := listedOffer(t, db, prov.ID, 8)
	start := t0.Add(48 * time.Hour)

	r1 := book(t, db, first.ID, t0, piece(o, 8, start, 2))
	_, err := db.CreateReservation(ctx, second.ID, []market.ReservationPiece{piece(o, 1, start.Add(time.Hour), 2)}, "{}", t0.Add(29*time.Minute), hold)
	wantMessage(t, err, market.CodeConflict, "Someone else just booked")

	// At the hold's expiry the devices are free again, before any sweep.
	r2, err := db.CreateReservation(ctx, second.ID, []market.ReservationPiece{piece(o, 1, start.Add(time.Hour), 2)}, "{}", t0.Add(hold), hold)
	if err != nil {
		t.Fatalf("booking after the hold expired: %v", err)
	}
	if got, _ := db.FindReservation(ctx, r1.ID); got.State != market.ReservationHeld {
		t.Fatalf("the lapsed hold was changed before the sweep: %s", got.State)
	}
	if cs, err := db.ListOfferCommitments(ctx, o.ID, t0.Add(hold)); err != nil || len(cs) != 1 || cs[0].ID != r2.Pieces[0].ID {
		t.Errorf("commitments after the hold lapsed = %+v, %v", cs, err)
	}
	_, err = db.ConfirmReservation(ctx, r1.ID, t0.Add(hold))
	wantMessage(t, err, market.CodeConflict, "expired")

	expired, err := db.ExpireHolds(ctx, t0.Add(hold))
	if err != nil || len(expired) != 1 || expired[0].ID != r1.ID || expired[0].State != market.ReservationExpired ||
		len(expired[0].Pieces) != 1 || !reflect.DeepEqual(expired[0].Pieces[0], r1.Pieces[0]) {
		t.Fatalf("ExpireHolds = %+v, %v", expired, err)
	}
	if again, err := db.ExpireHolds(ctx, t0.Add(hold+time.Minute)); err != nil || len(again) != 0 {
		t.Errorf("second ExpireHolds = %+v, %v; want nothing", again, err)
	}
	_, err = db.ConfirmReservation(ctx, r1.ID, t0.Add(hold))
	wantMessage(t, err, market.CodeConflict, "expired")
	_, err = db.CancelReservation(ctx, first.ID, r1.ID, 1000, t0.Add(hold))
	wantCode(t, err, market.CodeConflict)
	if got, _ := db.FindReservation(ctx, r2.ID); got.State != market.ReservationHeld {
		t.Errorf("an unexpired hold was expired: %+v", got)
	}
}

func TestUnpaidHoldLimit(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	prov := createUser(t, db, "prov@example.com", true)
	buyer := createUser(t, db, "buyer@example.com", false)
	o := listedOffer(t, db, prov.ID, 8)
	start := t0.Add(48 * time.Hour)

	var held []market.Reservation
	for i := range market.MaxUnpaidHolds {
		held = append(held, book(t, db, buyer.ID, t0, piece(o, 1, start, 1+i)))
	}
	if n, err := db.CountHeld(ctx, buyer.ID, t0); err != nil || n != market.MaxUnpaidHolds {
		t.Errorf("CountHeld = %d, %v", n, err)
	}
	_, err := db.CreateReservation(ctx, buyer.ID, []market.ReservationPiece{piece(o, 1, start, 1)}, "{}", t0, hold)
	wantMessage(t, err, market.CodeConflict, fmt.Sprintf("You already have %d unpaid reservations", market.MaxUnpaidHolds))

	// Paying for one makes room.
	if _, err := db.ConfirmReservation(ctx, held[0].ID, t0); err != nil {
		t.Fatal(err)
	}
	book(t, db, buyer.ID, t0, piece(o, 1, start, 1))
	_, err = db.CreateReservation(ctx, buyer.ID, []market.ReservationPiece{piece(o, 1, start, 1)}, "{}", t0, hold)
	wantCode(t, err, market.CodeConflict)
	// So does cancelling one.
	if _, err := db.CancelReservation(ctx, buyer.ID, held[1].ID, 1000, t0); err != nil {
		t.Fatal(err)
	}
	book(t, db, buyer.ID, t0, piece(o, 1, start, 1))
	// And holds that lapsed no longer count, swept or not.
	if n, err := db.CountHeld(ctx, buyer.ID, t0.Add(hold)); err != nil || n != 0 {
		t.Errorf("CountHeld after expiry = %d, %v", n, err)
	}
	book(t, db, buyer.ID, t0.Add(hold), piece(o, 1, start, 1))
}

func TestCancellationFee(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	prov := createUser(t, db, "prov@example.com", true)
	buyer := createUser(t, db, "buyer@example.com", false)
	o := listedOffer(t, db, prov.ID, 8) // free until 24 h before the start, then 10 %
	start := t0.Add(48 * time.Hour)

	confirmed := func(devices int) market.Reservation {
		r := book(t, db, buyer.ID, t0, piece(o, devices, start, 10))
		r, err := db.ConfirmReservation(ctx, r.ID, t0)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	for _, c := range []struct {
		name string
		at   time.Time
		fee  market.Cents
	}{
		{"outside the free period", start.Add(-25 * time.Hour), 0},
		{"at the free period's start", start.Add(-24 * time.Hour), 0},
		{"inside the free period", start.Add(-23 * time.Hour), 249 * 8 * 10 / 10},
	} {
		r := confirmed(8)
		got, err := db.CancelReservation(ctx, buyer.ID, r.ID, 1000, c.at)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got.State != market.ReservationCancelled || got.CancelFeeCents != c.fee || !got.UpdatedAt.Equal(c.at) {
			t.Errorf("%s: cancelled = %+v; want fee %d", c.name, got, c.fee)
		}
		if stored, _ := db.FindReservation(ctx, r.ID); !reflect.DeepEqual(stored, got) {
			t.Errorf("%s: stored %+v, returned %+v", c.name, stored, got)
		}
		_, err = db.CancelReservation(ctx, buyer.ID, r.ID, 1000, c.at)
		wantCode(t, err, market.CodeConflict)
	}

	// A cancelled booking releases its devices: all 8 fit once more.
	r := confirmed(8)
	_, err := db.CancelReservation(ctx, buyer.ID, r.ID, 1000, start)
	wantMessage(t, err, market.CodeConflict, "started")
	h := book(t, db, buyer.ID, t0, piece(o, 1, start.Add(20*time.Hour), 1))
	got, err := db.CancelReservation(ctx, buyer.ID, h.ID, 1000, start.Add(-time.Hour))
	if err != nil || got.CancelFeeCents != 0 || got.State != market.ReservationCancelled {
		t.Errorf("cancelling an unpaid hold = %+v, %v; want no fee", got, err)
	}
	_, err = db.ConfirmReservation(ctx, h.ID, t0)
	wantCode(t, err, market.CodeConflict)
}

func TestBookingRefusals(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	prov := createUser(t, db, "prov@example.com", true)
	buyer := createUser(t, db, "buyer@example.com", false)
	o := listedOffer(t, db, prov.ID, 8)
	full := listedOffer(t, db, prov.ID, 2)
	start := t0.Add(48 * time.Hour)
	book(t, db, buyer.ID, t0, piece(full, 2, start, 4))

	pending, err := db.CreateOffer(ctx, validOffer(prov.ID), t0)
	if err != nil {
		t.Fatal(err)
	}
	outside := piece(o, 1, o.AvailableUntil.Add(-time.Hour), 2)
	backwards := piece(o, 1, start, 1)
	backwards.End = start.Add(-time.Hour)
	for _, c := range []struct {
		name     string
		pieces   []market.ReservationPiece
		code     market.Code
		contains string
	}{
		{"no pieces", nil, market.CodeInvalid, "quote"},
		{"unknown offer", []market.ReservationPiece{{OfferID: o.ID + 100, Devices: 1, Start: start, End: start.Add(time.Hour)}}, market.CodeConflict, "no longer available"},
		{"offer pending review", []market.ReservationPiece{piece(pending, 1, start, 1)}, market.CodeConflict, "no longer available"},
		{"outside the window", []market.ReservationPiece{outside}, market.CodeConflict, "no longer available"},
		{"more devices than the offer has", []market.ReservationPiece{piece(o, 9, start, 1)}, market.CodeConflict, "has 8 devices"},
		{"ends before it starts", []market.ReservationPiece{backwards}, market.CodeInvalid, "end after"},
		{"two pieces overbook one offer", []market.ReservationPiece{piece(o, 5, start, 2), piece(o, 4, start.Add(time.Hour), 2)}, market.CodeConflict, "overbooked"},
		{"one piece of a split taken", []market.ReservationPiece{piece(o, 4, start, 2), piece(full, 1, start, 2)}, market.CodeConflict, "Someone else just booked"},
	} {
		_, err := db.CreateReservation(ctx, buyer.ID, c.pieces, "{}", t0, hold)
		if market.ErrorCode(err) != c.code || !strings.Contains(market.ErrorMessage(err), c.contains) {
			t.Errorf("%s: err = %v; want %s containing %q", c.name, err, c.code, c.contains)
		}
	}
	// All or nothing: the refused split left no piece on o.
	if cs, err := db.ListOfferCommitments(ctx, o.ID, t0); err != nil || len(cs) != 0 {
		t.Errorf("commitments on o after refusals = %+v, %v", cs, err)
	}

	// A paused offer and a suspended provider's offer cannot be booked.
	if err := db.SetOfferState(ctx, prov.ID, o.ID, market.OfferPaused, t0); err != nil {
		t.Fatal(err)
	}
	_, err = db.CreateReservation(ctx, buyer.ID, []market.ReservationPiece{piece(o, 1, start, 1)}, "{}", t0, hold)
	wantMessage(t, err, market.CodeConflict, "no longer available")
	if err := db.SetOfferState(ctx, prov.ID, o.ID, market.OfferActive, t0); err != nil {
		t.Fatal(err)
	}
	suspend(t, db, prov.ID)
	_, err = db.CreateReservation(ctx, buyer.ID, []market.ReservationPiece{piece(o, 1, start, 1)}, "{}", t0, hold)
	wantMessage(t, err, market.CodeConflict, "no longer available")
	reinstate(t, db, prov.ID)
	book(t, db, buyer.ID, t0, piece(o, 1, start, 1))
}

// TestReservationRace has many buyers, through three handles on the same
// database as three replicas would have, race for the last devices of an
// offer, some of them booking a split across two offers, named in either
// order (on PostgreSQL each booking locks both offers, in one order
// whatever the request's: a circle of waits would fail some with a
// deadlock). No instant may ever be overbooked, every loser must get a
// conflict and nothing else may fail; and since some losers asked for a
// single device, the contested instant must end up booked to exactly the
// offer's capacity.
func TestReservationRace(t *testing.T) {
	ctx := context.Background()
	db, path := openTestDB(t)
	handles := []*DB{db}
	for range 2 {
		h, err := Open(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		handles = append(handles, h)
	}

	prov := createUser(t, db, "prov@example.com", true)
	a := listedOffer(t, db, prov.ID, 8)
	b := listedOffer(t, db, prov.ID, 8)
	// Three of a's devices are taken already over the whole contested span.
	early := createUser(t, db, "early@example.com", false)
	base := t0.Add(24 * time.Hour)
	pre := book(t, db, early.ID, t0, piece(a, 3, base, 8))
	if _, err := db.ConfirmReservation(ctx, pre.ID, t0); err != nil {
		t.Fatal(err)
	}

	const n = 48
	buyers := make([]market.User, n)
	for i := range buyers {
		buyers[i] = createUser(t, db, fmt.Sprintf("b%d@example.com", i), false)
	}
	// Every interval contains [base+3h, base+4h), the contested instant.
	contested := base.Add(3 * time.Hour)
	request := func(i int) []market.ReservationPiece {
		start := base.Add(time.Duration(i%4) * time.Hour)
		ps := []market.ReservationPiece{piece(a, 1+i%3, start, 4+i%3)}
		switch i % 5 {
		case 0:
			ps = append(ps, piece(b, 3, start, 4))
		case 1:
			ps = append([]market.ReservationPiece{piece(b, 3, start, 4)}, ps...)
		}
		return ps
	}

	var wg sync.WaitGroup
	begin := make(chan struct{})
	results := make([]market.Reservation, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-begin
			results[i], errs[i] = handles[i%3].CreateReservation(ctx, buyers[i].ID, request(i), "{}", t0, hold)
		}()
	}
	close(begin)
	wg.Wait()

	winners := map[int64]int{} // reservation id → goroutine
	for i, err := range errs {
		if err == nil {
			winners[results[i].ID] = i
			if len(results[i].Pieces) != len(request(i)) {
				t.Errorf("booker %d: %d pieces, asked %d", i, len(results[i].Pieces), len(request(i)))
			}
			continue
		}
		var me *market.Error
		if !errors.As(err, &me) || me.Code != market.CodeConflict || me.Message == "" {
			t.Errorf("booker %d failed with %v; want a conflict *market.Error", i, err)
		}
	}

	// Read back every capacity-holding piece and check each offer at every
	// instant where usage can rise, by brute force.
	rows, err := db.reader.QueryContext(ctx, `SELECT p.reservation_id, p.offer_id, p.devices, p.start_at, p.end_at
		FROM reservation_pieces p JOIN reservations r ON r.id = p.reservation_id WHERE r.state IN ('held', 'confirmed')`)
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		res, offer int64
		devices    int
		start, end int64
	}
	var pieces []row
	perReservation := map[int64]int{}
	for rows.Next() {
		var p row
		if err := rows.Scan(&p.res, &p.offer, &p.devices, &p.start, &p.end); err != nil {
			t.Fatal(err)
		}
		pieces = append(pieces, p)
		perReservation[p.res]++
	}
	if err := closeRows(rows); err != nil {
		t.Fatal(err)
	}
	usage := func(offer, at int64) int {
		u := 0
		for _, p := range pieces {
			if p.offer == offer && p.start <= at && at < p.end {
				u += p.devices
			}
		}
		return u
	}
	for _, p := range pieces {
		if u := usage(p.offer, p.start); u > 8 {
			t.Errorf("offer %d overbooked at %s: %d of 8 devices", p.offer, fromUnix(p.start), u)
		}
	}
	if u := usage(a.ID, contested.Unix()); u != 8 {
		t.Errorf("devices of offer a booked at the contested instant = %d, want exactly its capacity 8", u)
	}
	if len(perReservation) != len(winners)+1 {
		t.Errorf("%d reservations stored, %d winners (+1 booked before)", len(perReservation), len(winners))
	}
	for id, count := range perReservation {
		if i, ok := winners[id]; ok && count != len(request(i)) {
			t.Errorf("reservation %d stored with %d pieces, booker %d asked %d", id, count, i, len(request(i)))
		}
	}
	if len(winners) == 0 || len(winners) == n {
		t.Errorf("%d of %d bookers won; the race did not contest anything", len(winners), n)
	}
	t.Logf("%d of %d bookers won", len(winners), n)
}

// TestHoldLimitRace has one buyer book many different offers at once
// through three handles, as through three replicas: on PostgreSQL those
// bookings need no common offer lock, so only the buyer's own lock keeps
// two of them from counting the same unpaid holds. Exactly
// market.MaxUnpaidHolds must be held, every other booking refused with the
// hold limit's conflict.
func TestHoldLimitRace(t *testing.T) {
	ctx := context.Background()
	db, path := openTestDB(t)
	handles := []*DB{db}
	for range 2 {
		h, err := Open(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		handles = append(handles, h)
	}
	prov := createUser(t, db, "prov@example.com", true)
	buyer := createUser(t, db, "buyer@example.com", false)
	const n = 12
	offers := make([]market.Offer, n)
	for i := range offers {
		offers[i] = listedOffer(t, db, prov.ID, 8)
	}
	var wg sync.WaitGroup
	begin := make(chan struct{})
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-begin
			_, errs[i] = handles[i%3].CreateReservation(ctx, buyer.ID,
				[]market.ReservationPiece{piece(offers[i], 1, t0.Add(time.Hour), 1)}, "{}", t0, hold)
		}()
	}
	close(begin)
	wg.Wait()
	booked := 0
	for i, err := range errs {
		switch {
		case err == nil:
			booked++
		case market.ErrorCode(err) != market.CodeConflict || !strings.Contains(market.ErrorMessage(err), "unpaid reservations"):
			t.Errorf("booking %d failed with %v; want the hold limit's conflict", i, err)
		}
	}
	var held int
	if err := db.reader.QueryRowContext(ctx, `SELECT COUNT(*) FROM reservations WHERE buyer_id = ? AND state = ?`,
		buyer.ID, string(market.ReservationHeld)).Scan(&held); err != nil {
		t.Fatal(err)
	}
	if booked != market.MaxUnpaidHolds || held != market.MaxUnpaidHolds {
		t.Errorf("%d bookings answered booked and %d held; want the limit, %d, each", booked, held, market.MaxUnpaidHolds)
	}
}
