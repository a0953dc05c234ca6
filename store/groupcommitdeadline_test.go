package store

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// TestGroupCommitDeadlineAfterItsStatements: three bookings share a batch —
// X (a real CreateReservation whose context has a deadline), Y (a real
// CreateReservation without one) and a last job that, inside the shared
// transaction, first sees X's and Y's reservations there (both ran their
// statements and were kept) and then waits until X's deadline has passed.
// So X's deadline passes after its statements ran but before the commit.
// X's caller is told context.DeadlineExceeded and nothing of X is stored
// (its devices are free again: the same piece books afterwards); Y and the
// last job commit, and when the batch runs again without X, X's rows are
// not in it. On both engines (GPUMARKET_TEST_DB=postgres).
func TestGroupCommitDeadlineAfterItsStatements(t *testing.T) {
	db, _ := openTestDB(t)
	ctx := context.Background()
	prov := createUser(t, db, "prov@example.com", true)
	o := listedOffer(t, db, prov.ID, 8)
	buyerX := createUser(t, db, "x@example.com", false)
	buyerY := createUser(t, db, "y@example.com", false)
	pieceX := piece(o, 8, t0.Add(24*time.Hour), 1) // all 8 devices: a later booking of it fits only if X is gone
	pieceY := piece(o, 8, t0.Add(26*time.Hour), 1)

	// A first booking holds the transaction while the three queue behind
	// it, so they make the next batch, in this order.
	started, release := make(chan struct{}), make(chan struct{})
	firstErr := make(chan error, 1)
	go func() {
		firstErr <- db.book(ctx, bookingLocks{}, func(ctx context.Context, tx preparedTx) error {
			close(started)
			<-release
			return nil
		})
	}()
	<-started

	// X's deadline passes when the last job says so (pass), once it has
	// seen X's rows.
	xctx := newLateDeadline(ctx)

	xErr, yErr, lastErr := make(chan error, 1), make(chan error, 1), make(chan error, 1)
	go func() {
		_, err := db.CreateReservation(xctx, buyerX.ID, []market.ReservationPiece{pieceX}, "{}", t0, hold)
		xErr <- err
	}()
	waitQueued(t, db, 1)
	go func() {
		_, err := db.CreateReservation(ctx, buyerY.ID, []market.ReservationPiece{pieceY}, "{}", t0, hold)
		yErr <- err
	}()
	waitQueued(t, db, 2)
	var runs atomic.Int32
	seen := make(chan [2]int, 2) // X's and Y's held reservations, as each run of the last job saw them
	go func() {
		lastErr <- db.book(ctx, bookingLocks{}, func(ctx context.Context, tx preparedTx) error {
			nx, err := countHeld(ctx, tx, buyerX.ID, t0)
			if err != nil {
				return err
			}
			ny, err := countHeld(ctx, tx, buyerY.ID, t0)
			if err != nil {
				return err
			}
			seen <- [2]int{nx, ny}
			if runs.Add(1) == 1 {
				// X's statements ran; now its deadline passes, before the commit.
				xctx.pass()
			}
			return nil
		})
	}()
	waitQueued(t, db, 3)
	close(release)

	wait := func(what string, c chan error) error {
		t.Helper()
		select {
		case err := <-c:
			return err
		case <-time.After(10 * time.Second):
			t.Fatalf("%s still waiting after 10 s", what)
			return nil
		}
	}
	if err := wait("the first booking", firstErr); err != nil {
		t.Fatalf("the first booking: %v", err)
	}
	err := wait("X", xErr)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("X, whose deadline passed before the commit: %v, want context.DeadlineExceeded", err)
	}
	if err := wait("Y", yErr); err != nil {
		t.Errorf("Y: %v, want booked", err)
	}
	if err := wait("the last job", lastErr); err != nil {
		t.Errorf("the last job: %v", err)
	}

	if first := <-seen; first != [2]int{1, 1} {
		t.Fatalf("the last job first saw %d of X's and %d of Y's reservations in the batch, want 1 and 1: X's statements had run", first[0], first[1])
	}
	select {
	case again := <-seen:
		if again != [2]int{0, 1} {
			t.Errorf("the batch run again saw %d of X's and %d of Y's reservations, want 0 and 1: it runs without X", again[0], again[1])
		}
	default:
		// Committed without re-running: then X must still be absent (below).
	}
	if n, err := db.CountHeld(ctx, buyerX.ID, t0); err != nil || n != 0 {
		t.Errorf("X's held reservations after the batch: %d, %v; want 0: its caller was told it failed", n, err)
	}
	if n, err := db.CountHeld(ctx, buyerY.ID, t0); err != nil || n != 1 {
		t.Errorf("Y's held reservations after the batch: %d, %v; want 1", n, err)
	}
	// X's devices are free: the same piece books now.
	if _, err := db.CreateReservation(ctx, buyerX.ID, []market.ReservationPiece{pieceX}, "{}", t0, hold); err != nil {
		t.Errorf("booking X's piece again after its rollback: %v", err)
	}
}

// TestGroupCommitDeadlineDuringItsStatements: X's deadline passes while
// its own statements run inside a shared batch (the booking CreateReservation
// makes — holdReservation and notifyHeld — then the deadline, before its
// savepoint is released). X is rolled back to its savepoint and told
// context.DeadlineExceeded; Y, after it in the same batch, commits and sees
// none of X. On both engines.
func TestGroupCommitDeadlineDuringItsStatements(t *testing.T) {
	db, _ := openTestDB(t)
	ctx := context.Background()
	prov := createUser(t, db, "prov@example.com", true)
	o := listedOffer(t, db, prov.ID, 8)
	buyerX := createUser(t, db, "x@example.com", false)
	buyerY := createUser(t, db, "y@example.com", false)
	pieceX := piece(o, 8, t0.Add(24*time.Hour), 1)

	started, release := make(chan struct{}), make(chan struct{})
	firstErr := make(chan error, 1)
	go func() {
		firstErr <- db.book(ctx, bookingLocks{}, func(ctx context.Context, tx preparedTx) error {
			close(started)
			<-release
			return nil
		})
	}()
	<-started
	xctx := newLateDeadline(ctx)
	xErr, yErr := make(chan error, 1), make(chan error, 1)
	go func() {
		xErr <- db.book(xctx, bookingLocks{}, func(ctx context.Context, tx preparedTx) error {
			r, offerIDs, byOffer := newHold(buyerX.ID, []market.ReservationPiece{pieceX}, t0, hold)
			r.RequestJSON = "{}"
			if err := holdReservation(ctx, tx, &r, offerIDs, byOffer, t0); err != nil {
				return err
			}
			if err := notifyHeld(ctx, tx, r, t0); err != nil {
				return err
			}
			xctx.pass() // its statements ran; its deadline passes before they are kept
			return nil
		})
	}()
	waitQueued(t, db, 1)
	// Y books X's very devices: it fits only if X is undone.
	go func() {
		_, err := db.CreateReservation(ctx, buyerY.ID, []market.ReservationPiece{pieceX}, "{}", t0, hold)
		yErr <- err
	}()
	waitQueued(t, db, 2)
	close(release)
	for _, c := range []struct {
		what string
		ch   chan error
		want error
	}{{"the first booking", firstErr, nil}, {"X", xErr, context.DeadlineExceeded}, {"Y, booking X's devices", yErr, nil}} {
		select {
		case err := <-c.ch:
			if (c.want == nil && err != nil) || (c.want != nil && !errors.Is(err, c.want)) {
				t.Errorf("%s: %v, want %v", c.what, err, c.want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s still waiting after 10 s", c.what)
		}
	}
	if n, err := db.CountHeld(ctx, buyerX.ID, t0); err != nil || n != 0 {
		t.Errorf("X's held reservations: %d, %v; want 0", n, err)
	}
	if n, err := db.CountHeld(ctx, buyerY.ID, t0); err != nil || n != 1 {
		t.Errorf("Y's held reservations: %d, %v; want 1", n, err)
	}
}

// waitQueued waits until n bookings wait in db's group-commit queue.
func waitQueued(t *testing.T, db *DB, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		db.bookings.mu.Lock()
		got := len(db.bookings.pending)
		db.bookings.mu.Unlock()
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d bookings queued, want %d", got, n)
		}
	}
}

// lateDeadline is a context whose deadline passes when pass is called
// (not at the time Deadline names), as context.WithDeadline's does when
// its time comes: Done is closed and Err is context.DeadlineExceeded.
type lateDeadline struct {
	context.Context
	at     time.Time
	done   chan struct{}
	passed atomic.Bool
}

func newLateDeadline(parent context.Context) *lateDeadline {
	return &lateDeadline{Context: parent, at: time.Now().Add(time.Hour), done: make(chan struct{})}
}

func (c *lateDeadline) pass() {
	c.passed.Store(true)
	close(c.done)
}

func (c *lateDeadline) Deadline() (time.Time, bool) { return c.at, true }
func (c *lateDeadline) Done() <-chan struct{}       { return c.done }
func (c *lateDeadline) Err() error {
	if c.passed.Load() {
		return context.DeadlineExceeded
	}
	return nil
}
