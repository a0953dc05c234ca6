package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

func TestLeaseOneHolderUntilItExpires(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	ttl := 10 * time.Second
	take := func(holder string, at time.Time) bool {
		t.Helper()
		_, ok, err := db.TakeLease(ctx, "background", holder, at, ttl)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	holder := func(at time.Time) string {
		t.Helper()
		h, err := db.LeaseHolder(ctx, "background", at)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	if h := holder(t0); h != "" {
		t.Fatalf("holder before anyone took it = %q", h)
	}
	if !take("a", t0) || take("b", t0.Add(time.Second)) {
		t.Fatal("a should take the free lease and b be refused while a holds it")
	}
	if !take("a", t0.Add(9*time.Second)) { // renewed: now until t0+19s
		t.Fatal("a could not renew its own lease")
	}
	if take("b", t0.Add(18*time.Second)) || holder(t0.Add(18*time.Second)) != "a" {
		t.Fatal("b took a renewed lease before it expired")
	}
	if !take("b", t0.Add(19*time.Second)) || holder(t0.Add(19*time.Second)) != "b" {
		t.Fatal("b could not take the lease once a's expired")
	}
	if take("a", t0.Add(20*time.Second)) {
		t.Fatal("a took back b's live lease")
	}
	// Another lease name is independent.
	if _, ok, err := db.TakeLease(ctx, "other", "a", t0.Add(20*time.Second), ttl); err != nil || !ok {
		t.Fatalf("TakeLease(other) = %v, %v", ok, err)
	}
	// Released, it is free at once; releasing someone else's does nothing.
	if err := db.ReleaseLease(ctx, "background", "a"); err != nil {
		t.Fatal(err)
	}
	if holder(t0.Add(21*time.Second)) != "b" {
		t.Fatal("a released b's lease")
	}
	if err := db.ReleaseLease(ctx, "background", "b"); err != nil {
		t.Fatal(err)
	}
	if holder(t0.Add(21*time.Second)) != "" || !take("a", t0.Add(21*time.Second)) {
		t.Fatal("a released lease was not free at once")
	}
}

// TestLeaseGenerationCountsAcquisitions: renewing keeps the generation;
// taking a free, expired or released lease — by another or by the same
// holder — bumps it by one.
func TestLeaseGenerationCountsAcquisitions(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	ttl := 10 * time.Second
	steps := []struct {
		holder  string
		at      time.Duration
		wantOK  bool
		wantGen int64
		wantBy  string
	}{
		{"a", 0, true, 1, "a"},                 // first acquisition
		{"a", 5 * time.Second, true, 1, "a"},   // renewal in time: same generation
		{"b", 6 * time.Second, false, 1, "a"},  // refused: a's lease runs to 15 s
		{"b", 15 * time.Second, true, 2, "b"},  // expired: b takes it
		{"a", 16 * time.Second, false, 2, "b"}, // a cannot take it back
		{"b", 30 * time.Second, true, 3, "b"},  // b's own lease expired at 25 s: a new acquisition
	}
	for i, st := range steps {
		l, ok, err := db.TakeLease(ctx, "background", st.holder, t0.Add(st.at), ttl)
		if err != nil {
			t.Fatal(err)
		}
		if ok != st.wantOK || l.Generation != st.wantGen || l.Holder != st.wantBy || l.Name != "background" {
			t.Fatalf("step %d (%s at %v): ok %v, lease %+v; want ok %v, generation %d, holder %s", i, st.holder, st.at, ok, l, st.wantOK, st.wantGen, st.wantBy)
		}
	}
	if err := db.ReleaseLease(ctx, "background", "b"); err != nil {
		t.Fatal(err)
	}
	if l, ok, err := db.TakeLease(ctx, "background", "b", t0.Add(31*time.Second), ttl); err != nil || !ok || l.Generation != 4 {
		t.Fatalf("taking a released lease again: %+v, %v, %v; want generation 4", l, ok, err)
	}
}

// TestFencedWriteRefusedAfterTakeover: a holder paused past its lease
// resumes after another replica took it over; its writes under the old
// generation are refused and change nothing, its successor's go through,
// and a write under an expired lease no one took is refused too.
func TestFencedWriteRefusedAfterTakeover(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	ttl := 10 * time.Second
	var mu sync.Mutex
	now := t0
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	set := func(at time.Time) { mu.Lock(); now = at; mu.Unlock() }

	la, ok, err := db.TakeLease(ctx, "background", "a", clock(), ttl)
	if err != nil || !ok {
		t.Fatalf("a takes the lease: %v, %v", ok, err)
	}
	aCtx := WithFence(ctx, la, clock)
	if _, err := db.CreateUser(aCtx, market.User{Email: "a1@example.com", DisplayName: "A", IsBuyer: true}, []byte("h"), clock()); err != nil {
		t.Fatalf("a's write while it holds the lease: %v", err)
	}
	if err := db.ConfirmLease(aCtx); err != nil {
		t.Fatalf("ConfirmLease while held: %v", err)
	}

	// a is paused; its lease expires and b takes over.
	set(t0.Add(ttl))
	lb, ok, err := db.TakeLease(ctx, "background", "b", clock(), ttl)
	if err != nil || !ok || lb.Generation != la.Generation+1 {
		t.Fatalf("b takes the expired lease: %+v, %v, %v", lb, ok, err)
	}
	bCtx := WithFence(ctx, lb, clock)

	// a resumes: every kind of write it makes is refused.
	if _, err := db.CreateUser(aCtx, market.User{Email: "a2@example.com", DisplayName: "A", IsBuyer: true}, []byte("h"), clock()); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("a's write after the takeover: %v, want ErrLeaseLost", err)
	}
	if err := db.ConfirmLease(aCtx); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("ConfirmLease after the takeover: %v, want ErrLeaseLost", err)
	}
	if _, _, err := db.FindUserByEmail(ctx, "a2@example.com"); market.ErrorCode(err) != market.CodeNotFound {
		t.Fatalf("the refused write was stored: %v", err)
	}
	// Unfenced work (a web request) and the new holder's work go on.
	if _, err := db.CreateUser(ctx, market.User{Email: "web@example.com", DisplayName: "W", IsBuyer: true}, []byte("h"), clock()); err != nil {
		t.Fatalf("unfenced write: %v", err)
	}
	if _, err := db.CreateUser(bCtx, market.User{Email: "b1@example.com", DisplayName: "B", IsBuyer: true}, []byte("h"), clock()); err != nil {
		t.Fatalf("b's write: %v", err)
	}

	// b's lease runs out with no one taking it: b's late write is refused.
	set(lb.Expires)
	if _, err := db.CreateUser(bCtx, market.User{Email: "b2@example.com", DisplayName: "B", IsBuyer: true}, []byte("h"), clock()); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("b's write after its lease expired: %v, want ErrLeaseLost", err)
	}
}

// TestFencedBookingInABatch: bookings share a transaction (group commit);
// each is checked against its own fence, so a stale holder's bookings are
// refused and the unfenced ones beside them in the batch are stored.
func TestFencedBookingInABatch(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	clock := func() time.Time { return t0 }
	stale, _, err := db.TakeLease(ctx, "background", "a", t0.Add(-time.Hour), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := db.TakeLease(ctx, "background", "b", t0, time.Minute); err != nil || !ok {
		t.Fatalf("b takes the lease: %v, %v", ok, err)
	}
	staleCtx := WithFence(ctx, stale, clock)
	prov := createUser(t, db, "prov@example.com", true)
	o := listedOffer(t, db, prov.ID, 8)
	const n = 16
	buyers := make([]market.User, n) // one each: a buyer may hold only a few unpaid bookings
	for i := range buyers {
		buyers[i] = createUser(t, db, fmt.Sprintf("buyer%d@example.com", i), false)
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := ctx
			if i%2 == 1 {
				c = staleCtx
			}
			<-start
			_, errs[i] = db.CreateReservation(c, buyers[i].ID, []market.ReservationPiece{piece(o, 1, t0.Add(time.Duration(24+i)*time.Hour), 1)}, "{}", t0, hold)
		}()
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if i%2 == 1 && !errors.Is(err, ErrLeaseLost) {
			t.Errorf("stale booking %d: %v, want ErrLeaseLost", i, err)
		}
		if i%2 == 0 && err != nil {
			t.Errorf("unfenced booking %d: %v", i, err)
		}
	}
	var stored int
	if err := db.reader.QueryRowContext(ctx, `SELECT COUNT(*) FROM reservations`).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if stored != n/2 {
		t.Fatalf("%d reservations stored, want the %d unfenced", stored, n/2)
	}
}
