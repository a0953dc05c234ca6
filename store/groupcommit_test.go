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

// TestGroupCommitKeepsEachBookingAllOrNothing races many bookings on one
// handle, so they share transactions (groupcommit.go), and checks that
// each is judged on the state the earlier ones in its batch left: one
// buyer gets exactly market.MaxUnpaidHolds holds, and a split whose second
// piece cannot fit leaves no trace of its first piece.
func TestGroupCommitKeepsEachBookingAllOrNothing(t *testing.T) {
	db, _ := openTestDB(t)
	ctx := context.Background()
	prov := createUser(t, db, "prov@example.com", true)
	a := listedOffer(t, db, prov.ID, 8)
	b := listedOffer(t, db, prov.ID, 2)
	greedy := createUser(t, db, "greedy@example.com", false)
	start := t0.Add(24 * time.Hour)

	const n = 40
	others := make([]market.User, n)
	for i := range others {
		others[i] = createUser(t, db, fmt.Sprintf("b%d@example.com", i), false)
	}
	var wg sync.WaitGroup
	begin := make(chan struct{})
	greedyErrs := make([]error, n)
	splitErrs := make([]error, n)
	ghostErrs := make([]error, n)
	for i := range n {
		wg.Add(3)
		go func() {
			defer wg.Done()
			<-begin
			// No such buyer: the insert fails on its foreign key inside
			// the shared transaction, which must not spoil the others.
			_, ghostErrs[i] = db.CreateReservation(ctx, 1_000_000+int64(i),
				[]market.ReservationPiece{piece(a, 1, start.Add(time.Duration(200+i)*time.Hour), 1)}, "{}", t0, hold)
		}()
		go func() {
			defer wg.Done()
			<-begin
			_, greedyErrs[i] = db.CreateReservation(ctx, greedy.ID,
				[]market.ReservationPiece{piece(a, 1, start.Add(time.Duration(i)*time.Hour), 1)}, "{}", t0, hold)
		}()
		go func() {
			defer wg.Done()
			<-begin
			// One device of a, one of b (2 devices) in the same hour: only
			// two of these splits fit, and a loser's piece on a must vanish.
			at := start.Add(100 * time.Hour)
			_, splitErrs[i] = db.CreateReservation(ctx, others[i].ID,
				[]market.ReservationPiece{piece(a, 1, at, 1), piece(b, 1, at, 1)}, "{}", t0, hold)
		}()
	}
	close(begin)
	wg.Wait()

	count := func(errs []error) (ok int) {
		for i, err := range errs {
			if err == nil {
				ok++
			} else if market.ErrorCode(err) != market.CodeConflict {
				t.Errorf("booking %d failed with %v; want a conflict", i, err)
			}
		}
		return ok
	}
	if got := count(greedyErrs); got != market.MaxUnpaidHolds {
		t.Errorf("greedy buyer got %d holds, want exactly %d", got, market.MaxUnpaidHolds)
	}
	if got := count(splitErrs); got != 2 {
		t.Errorf("%d splits booked, want exactly 2 (offer b has 2 devices)", got)
	}
	for i, err := range ghostErrs {
		if err == nil || market.ErrorCode(err) != market.CodeInternal {
			t.Errorf("booking %d for a missing buyer: %v; want an internal error", i, err)
		}
	}
	var onA, onB int
	at := unix(start.Add(100 * time.Hour))
	if err := db.reader.QueryRowContext(ctx, `SELECT
		COALESCE(SUM(CASE WHEN offer_id = ? THEN devices END), 0),
		COALESCE(SUM(CASE WHEN offer_id = ? THEN devices END), 0)
		FROM reservation_pieces WHERE start_at = ?`, a.ID, b.ID, at).Scan(&onA, &onB); err != nil {
		t.Fatal(err)
	}
	if onA != 2 || onB != 2 {
		t.Errorf("devices stored at the split hour: a %d, b %d; want 2 and 2 (no half-booked split)", onA, onB)
	}
	if held, err := db.CountHeld(ctx, greedy.ID, t0); err != nil || held != market.MaxUnpaidHolds {
		t.Errorf("CountHeld(greedy) = %d, %v; want %d", held, err, market.MaxUnpaidHolds)
	}
}

// TestGroupCommitSkipsCancelledCallers checks that a booking whose context
// has ended is refused with the context's error and stores nothing.
func TestGroupCommitSkipsCancelledCallers(t *testing.T) {
	db, _ := openTestDB(t)
	prov := createUser(t, db, "prov@example.com", true)
	a := listedOffer(t, db, prov.ID, 8)
	buyer := createUser(t, db, "buyer@example.com", false)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := db.CreateReservation(ctx, buyer.ID, []market.ReservationPiece{piece(a, 1, t0.Add(24*time.Hour), 1)}, "{}", t0, hold); err == nil {
		t.Fatal("CreateReservation with a cancelled context succeeded")
	}
	if held, err := db.CountHeld(context.Background(), buyer.ID, t0); err != nil || held != 0 {
		t.Errorf("CountHeld = %d, %v; want 0", held, err)
	}
}

// TestGroupCommitPanicFailsItsBatchOnly: a booking that panics inside a
// shared transaction fails every booking of its batch with an error —
// nothing of the batch is stored — and the queue moves on: a booking made
// afterwards is served. Callers recover a panic as the web server's
// recover middleware does; before, the leader's panic left the queue led
// by nobody and every later booking waited for ever.
func TestGroupCommitPanicFailsItsBatchOnly(t *testing.T) {
	db, _ := openTestDB(t)
	ctx := context.Background()
	prov := createUser(t, db, "prov@example.com", true)
	o := listedOffer(t, db, prov.ID, 8)
	buyers := make([]market.User, 4)
	for i := range buyers {
		buyers[i] = createUser(t, db, fmt.Sprintf("b%d@example.com", i), false)
	}
	book := func(i int) error {
		_, err := db.CreateReservation(ctx, buyers[i].ID,
			[]market.ReservationPiece{piece(o, 1, t0.Add(time.Duration(24+i)*time.Hour), 1)}, "{}", t0, hold)
		return err
	}
	// call runs f as a request would: a panic reaching it is recovered
	// and reported.
	call := func(f func() error) (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("panic reached the caller: %v", r)
			}
		}()
		return f()
	}
	pending := func() int {
		db.bookings.mu.Lock()
		defer db.bookings.mu.Unlock()
		return len(db.bookings.pending)
	}
	waitPending := func(n int) {
		deadline := time.Now().Add(10 * time.Second)
		for pending() < n {
			if time.Now().After(deadline) {
				t.Fatalf("%d bookings queued, want %d", pending(), n)
			}
			time.Sleep(time.Millisecond)
		}
	}

	// A first booking holds the transaction while three queue behind it:
	// booking 1, one that panics, booking 2. They make the next batch.
	started, release := make(chan struct{}), make(chan struct{})
	firstErr := make(chan error, 1)
	go func() {
		firstErr <- call(func() error {
			return db.book(ctx, bookingLocks{}, func(ctx context.Context, tx preparedTx) error {
				close(started)
				<-release
				return nil
			})
		})
	}()
	<-started
	errs := make([]chan error, 3)
	for i := range errs {
		errs[i] = make(chan error, 1)
		go func() {
			switch i {
			case 0, 2:
				errs[i] <- call(func() error { return book(i / 2) })
			case 1:
				errs[i] <- call(func() error {
					return db.book(ctx, bookingLocks{}, func(ctx context.Context, tx preparedTx) error { panic("a bug in a booking") })
				})
			}
		}()
		waitPending(i + 1)
	}
	close(release)

	wait := func(what string, c chan error) error {
		select {
		case err := <-c:
			return err
		case <-time.After(10 * time.Second):
			t.Fatalf("%s still waiting after 10 s", what)
			return nil
		}
	}
	if err := wait("the first booking", firstErr); err != nil {
		t.Errorf("the first booking: %v", err)
	}
	for i, c := range errs {
		err := wait(fmt.Sprintf("booking %d of the panicking batch", i), c)
		if err == nil || strings.Contains(err.Error(), "reached the caller") || market.ErrorCode(err) != market.CodeInternal {
			t.Errorf("booking %d of the panicking batch: %v; want an internal error, the panic recovered in the store", i, err)
		} else if !strings.Contains(err.Error(), "a bug in a booking") {
			t.Errorf("booking %d of the panicking batch: %v; want the panic's value in the error", i, err)
		}
	}
	if held, err := db.CountHeld(ctx, buyers[0].ID, t0); err != nil || held != 0 {
		t.Errorf("CountHeld(buyer 0) = %d, %v; want 0: nothing of the panicking batch is stored", held, err)
	}
	if held, err := db.CountHeld(ctx, buyers[1].ID, t0); err != nil || held != 0 {
		t.Errorf("CountHeld(buyer 1) = %d, %v; want 0: nothing of the panicking batch is stored", held, err)
	}

	later := make(chan error, 1)
	go func() { later <- call(func() error { return book(3) }) }()
	if err := wait("a booking after the panic", later); err != nil {
		t.Errorf("a booking after the panic: %v", err)
	}
	if held, err := db.CountHeld(ctx, buyers[3].ID, t0); err != nil || held != 1 {
		t.Errorf("CountHeld(buyer 3) = %d, %v; want 1", held, err)
	}
}
