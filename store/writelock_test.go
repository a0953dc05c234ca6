package store

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store/pgtest"
)

// The write lock on PostgreSQL (postgres.go, groupcommit.go): bookings take
// the global lock shared and a lock per offer and per buyer exclusive;
// every other write takes the global lock exclusive. These tests always run
// on PostgreSQL (SQLite has one writer and nothing to narrow). They watch
// the server's own lock table, pg_locks, to see who holds and who waits.

// lockWatch reads pg_locks of one test database on a connection of its own
// and holds locks and rows the way another transaction would.
type lockWatch struct {
	t    *testing.T
	conn *sql.DB
}

func newLockWatch(t *testing.T, dsn string) *lockWatch {
	conn, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &lockWatch{t: t, conn: conn}
}

// advisory counts the advisory locks on key in this database that are
// granted (or waited for, granted false) in mode ("ExclusiveLock",
// "ShareLock"). A bigint key is classid (its upper half), objid (its
// lower), objsubid 1.
func (w *lockWatch) advisory(key int64, granted bool, mode string) int {
	w.t.Helper()
	var n int
	err := w.conn.QueryRow(`SELECT COUNT(*) FROM pg_locks
		WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
		AND classid::bigint = $1 AND objid::bigint = $2 AND objsubid = 1 AND granted = $3 AND mode = $4`,
		uint64(key)>>32, uint64(key)&0xffffffff, granted, mode).Scan(&n)
	if err != nil {
		w.t.Fatal(err)
	}
	return n
}

// waitFor polls until the condition holds, or fails the test after 10 s.
func (w *lockWatch) waitFor(what string, cond func() bool) {
	w.t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			w.t.Fatalf("after 10 s, still not: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// hold begins a transaction on the watch's connection that runs query
// (taking a lock or a row) and keeps it until the returned func ends it.
func (w *lockWatch) hold(query string, args ...any) func() {
	w.t.Helper()
	tx, err := w.conn.Begin()
	if err != nil {
		w.t.Fatal(err)
	}
	// Ended at the latest when the test ends, before the store handles
	// opened earlier are closed (cleanups run last first): a test that
	// fails while a booking waits on it then still ends.
	w.t.Cleanup(func() { tx.Rollback() })
	if _, err := tx.Exec(query, args...); err != nil {
		w.t.Fatal(err)
	}
	return func() { tx.Rollback() }
}

// offerKey and buyerKey are the keys of an offer's and a buyer's booking
// lock, as postgres.go defines them.
func offerKey(id int64) int64 { return offerLockSpace<<32 | id }
func buyerKey(id int64) int64 { return buyerLockSpace<<32 | id }

type bookingResultErr struct {
	r   market.Reservation
	err error
}

// bookAsync books pieces for buyerID through h in a goroutine.
func bookAsync(ctx context.Context, h *DB, buyerID int64, pieces ...market.ReservationPiece) chan bookingResultErr {
	ch := make(chan bookingResultErr, 1)
	go func() {
		r, err := h.CreateReservation(ctx, buyerID, pieces, "{}", t0, hold)
		ch <- bookingResultErr{r, err}
	}()
	return ch
}

// pendingFor reports whether ch has no answer yet after a moment.
func pendingFor(ch chan bookingResultErr, d time.Duration) bool {
	select {
	case res := <-ch:
		ch <- res
		return false
	case <-time.After(d):
		return true
	}
}

// TestBookingLocksOnPostgres holds a first booking of offer A open through
// replica 1 (its buyer's row is locked by another transaction, so its
// insert waits after it has taken its locks) and checks, through other
// replicas: a booking of another offer for another buyer goes through at
// once; a booking of the same offer waits on that offer's lock, and once
// the first commits it finds the devices taken; a booking for the same
// buyer of a third offer waits on the buyer's lock; a money step (a top-up
// paid) waits for the global lock the bookings share, and runs once they
// have committed. Each wait is seen in pg_locks, so a booking that skipped
// its lock (or took the global lock exclusive) fails the test.
func TestBookingLocksOnPostgres(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.Database(t)
	replicas := make([]*DB, 4)
	for i := range replicas {
		h, err := Open(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		replicas[i] = h
	}
	db := replicas[0]
	w := newLockWatch(t, dsn)

	prov := createUser(t, db, "prov@example.com", true)
	a, b, c := listedOffer(t, db, prov.ID, 8), listedOffer(t, db, prov.ID, 8), listedOffer(t, db, prov.ID, 8)
	x := createUser(t, db, "x@example.com", false)
	y := createUser(t, db, "y@example.com", false)
	z := createUser(t, db, "z@example.com", false)
	start := t0.Add(24 * time.Hour)
	topUp, err := db.CreateTopUp(ctx, y.ID, 5000, TopUpCheckout, t0)
	if err != nil {
		t.Fatal(err)
	}

	// Booking 1: 5 of A's 8 devices for x, held open at its insert.
	release := w.hold(`SELECT id FROM users WHERE id = $1 FOR UPDATE`, x.ID)
	first := bookAsync(ctx, replicas[1], x.ID, piece(a, 5, start, 2))
	w.waitFor("booking 1 holds offer A's lock", func() bool { return w.advisory(offerKey(a.ID), true, "ExclusiveLock") == 1 })
	w.waitFor("booking 1 holds the global lock shared", func() bool { return w.advisory(writeLockKey, true, "ShareLock") == 1 })

	// Another offer, another buyer, another replica: through at once.
	quick, cancel := context.WithTimeout(ctx, 10*time.Second)
	other, err := replicas[2].CreateReservation(quick, y.ID, []market.ReservationPiece{piece(b, 8, start, 2)}, "{}", t0, hold)
	cancel()
	if err != nil {
		t.Fatalf("a booking of another offer while booking 1 is open: %v; want it booked without waiting", err)
	}

	// The same offer: waits on A's lock, while booking 1 is open.
	same := bookAsync(ctx, replicas[3], z.ID, piece(a, 5, start.Add(time.Hour), 2))
	w.waitFor("a booking of the same offer waits on its lock", func() bool { return w.advisory(offerKey(a.ID), false, "ExclusiveLock") == 1 })
	// The same buyer, a third offer: waits on the buyer's lock.
	sameBuyer := bookAsync(ctx, replicas[2], x.ID, piece(c, 1, start, 1))
	w.waitFor("a booking for the same buyer waits on the buyer's lock", func() bool { return w.advisory(buyerKey(x.ID), false, "ExclusiveLock") == 1 })
	// A money step waits for the bookings' shared global lock.
	paid := make(chan error, 1)
	go func() {
		_, err := replicas[2].RecordTopUpPaid(ctx, topUp.ID, "pi_lock_test", t0)
		paid <- err
	}()
	w.waitFor("a money step waits for the global lock", func() bool { return w.advisory(writeLockKey, false, "ExclusiveLock") == 1 })
	if !pendingFor(first, 50*time.Millisecond) || !pendingFor(same, 0) || !pendingFor(sameBuyer, 0) {
		t.Fatal("a booking was answered while booking 1 was held open")
	}
	select {
	case err := <-paid:
		t.Fatalf("the money step ran beside open bookings (err %v)", err)
	default:
	}

	release()
	if res := <-first; res.err != nil {
		t.Fatalf("booking 1: %v", res.err)
	}
	res := <-same
	wantMessage(t, res.err, market.CodeConflict, "Someone else just booked")
	if res := <-sameBuyer; res.err != nil {
		t.Fatalf("the same buyer's booking of a third offer: %v", res.err)
	}
	if err := <-paid; err != nil {
		t.Fatalf("the money step: %v", err)
	}

	// What is stored: A holds booking 1's 5 devices (no more), B the other
	// booking's 8, C one; y's balance is the top-up's 5000, in a balanced
	// ledger.
	for _, o := range []struct {
		offer market.Offer
		want  int
	}{{a, 5}, {b, 8}, {c, 1}} {
		cs, err := db.ListOfferCommitments(ctx, o.offer.ID, t0)
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		for _, cm := range cs {
			got += cm.Devices
		}
		if got != o.want {
			t.Errorf("offer %d: %d devices committed, want %d", o.offer.ID, got, o.want)
		}
	}
	if other.ID == 0 {
		t.Error("the booking of another offer has no id")
	}
	bal, err := db.FindBalance(ctx, y.ID)
	if err != nil {
		t.Fatal(err)
	}
	if bal.Balance != 5000 {
		t.Errorf("balance after the top-up = %d, want 5000", bal.Balance)
	}
	var cash, credited int64
	if err := db.reader.QueryRowContext(ctx, `SELECT
			COALESCE(SUM(CASE WHEN debit_account = ? THEN amount_cents ELSE 0 END), 0),
			COALESCE(SUM(CASE WHEN credit_account = ? THEN amount_cents ELSE 0 END), 0) FROM balance_entries`,
		market.AccountPlatformCash, market.BalanceAccount(y.ID)).Scan(&cash, &credited); err != nil {
		t.Fatal(err)
	}
	if cash != 5000 || credited != 5000 {
		t.Errorf("balance entries: %d debited to cash, %d credited to the buyer; want the top-up's 5000 each", cash, credited)
	}
}

// TestBookingLocksInOneOrder: a booking locks its offers in one order
// whatever order its request names them in, so two bookings of the same
// offers never each hold one while waiting for the other. With the lower
// offer's lock held elsewhere, a booking naming the higher offer first
// waits on the lower one holding neither.
func TestBookingLocksInOneOrder(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.Database(t)
	db, err := Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	w := newLockWatch(t, dsn)
	prov := createUser(t, db, "prov@example.com", true)
	buyer := createUser(t, db, "buyer@example.com", false)
	lo, hi := listedOffer(t, db, prov.ID, 8), listedOffer(t, db, prov.ID, 8)
	if offerKey(lo.ID) > offerKey(hi.ID) {
		lo, hi = hi, lo
	}
	release := w.hold(`SELECT pg_advisory_xact_lock($1)`, offerKey(lo.ID))
	start := t0.Add(24 * time.Hour)
	done := bookAsync(ctx, db, buyer.ID, piece(hi, 1, start, 1), piece(lo, 1, start, 1))
	w.waitFor("the booking waits on the lower offer's lock", func() bool { return w.advisory(offerKey(lo.ID), false, "ExclusiveLock") == 1 })
	if n := w.advisory(offerKey(hi.ID), true, "ExclusiveLock"); n != 0 {
		t.Errorf("the booking holds the higher offer's lock while it waits for the lower one's")
	}
	release()
	if res := <-done; res.err != nil {
		t.Fatalf("booking: %v", res.err)
	}
}

// TestMoneyStepExcludesBookingsOnPostgres: while a write that is not a
// booking holds the global lock (exclusive, as begin takes it), a booking
// waits for it, shared.
func TestMoneyStepExcludesBookingsOnPostgres(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.Database(t)
	db, err := Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	w := newLockWatch(t, dsn)
	prov := createUser(t, db, "prov@example.com", true)
	buyer := createUser(t, db, "buyer@example.com", false)
	o := listedOffer(t, db, prov.ID, 8)
	if !strings.Contains(pgLockQuery, "pg_advisory_xact_lock(") {
		t.Fatalf("begin's lock %q is not the exclusive advisory lock", pgLockQuery)
	}
	release := w.hold(pgLockQuery)
	done := bookAsync(ctx, db, buyer.ID, piece(o, 1, t0.Add(24*time.Hour), 1))
	w.waitFor("the booking waits for the global lock", func() bool { return w.advisory(writeLockKey, false, "ShareLock") == 1 })
	if !pendingFor(done, 50*time.Millisecond) {
		t.Fatal("the booking was answered while another write held the global lock")
	}
	release()
	if res := <-done; res.err != nil {
		t.Fatalf("booking: %v", res.err)
	}
}

// TestEveryBookingPathTakesItsLocks: each path that books through the
// shared batches (db.book with named locks) waits on the lock of every
// offer it books, every buyer it books for and the template whose use it
// counts. For each key in turn another transaction holds it; the booking
// must be seen waiting on it, and is then given up (its context cancelled,
// so nothing is stored); at the end it books with nothing held.
func TestEveryBookingPathTakesItsLocks(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.Database(t)
	db, err := Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	w := newLockWatch(t, dsn)
	templateKey := func(id int64) int64 { return templateLockSpace<<32 | id }

	prov := createUser(t, db, "prov@example.com", true)
	plain, metered := listedOffer(t, db, prov.ID, 8), meteredOffer(t, db, prov.ID, 60)
	buyers := make([]market.User, 4)
	for i := range buyers {
		buyers[i] = createUser(t, db, fmt.Sprintf("b%d@example.com", i), false)
	}
	tpl, err := db.SaveTemplate(ctx, buyers[1].ID, market.Template{Name: "shared", Public: true,
		Runtime: market.Runtime{Image: "docker.io/library/busybox:1.36", Launch: market.LaunchSSH}}, t0)
	if err != nil {
		t.Fatal(err)
	}
	rt := tpl.Runtime
	rt.TemplateID = tpl.ID
	start := t0.Add(2 * time.Hour)
	now := start.Add(time.Hour)
	orig := running(t, db, buyers[2].ID, now, piece(plain, 2, start, 10))
	ext, err := market.ExtensionPieces(orig, map[int64]market.Offer{plain.ID: plain}, 6, 100, now)
	if err != nil {
		t.Fatal(err)
	}
	topUp(t, db, buyers[3].ID, 100000, "pi_metered")

	for _, path := range []struct {
		name string
		keys []int64
		book func(ctx context.Context) error
	}{
		{"CreateReservation", []int64{offerKey(plain.ID), buyerKey(buyers[0].ID)}, func(ctx context.Context) error {
			_, err := db.CreateReservation(ctx, buyers[0].ID, []market.ReservationPiece{piece(plain, 1, start.Add(48*time.Hour), 1)}, "{}", now, hold)
			return err
		}},
		{"CreateReservationWithRuntime", []int64{offerKey(plain.ID), buyerKey(buyers[1].ID), templateKey(tpl.ID)}, func(ctx context.Context) error {
			_, err := db.CreateReservationWithRuntime(ctx, buyers[1].ID, []market.ReservationPiece{piece(plain, 1, start.Add(48*time.Hour), 1)}, "{}", rt, now, hold)
			return err
		}},
		{"CreateExtension", []int64{offerKey(plain.ID), buyerKey(buyers[2].ID)}, func(ctx context.Context) error {
			_, err := db.CreateExtension(ctx, buyers[2].ID, orig.ID, ext.Pieces, now, hold)
			return err
		}},
		{"StartMeteredRental", []int64{offerKey(metered.ID), buyerKey(buyers[3].ID)}, func(ctx context.Context) error {
			_, err := db.StartMeteredRental(ctx, buyers[3].ID, metered.ID, 1, 0, now)
			return err
		}},
	} {
		for _, key := range path.keys {
			release := w.hold(`SELECT pg_advisory_xact_lock($1)`, key)
			callCtx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- path.book(callCtx) }()
			w.waitFor(fmt.Sprintf("%s waits on key %#x", path.name, key), func() bool { return w.advisory(key, false, "ExclusiveLock") == 1 })
			cancel()
			if err := <-done; err == nil {
				t.Fatalf("%s booked while key %#x was held elsewhere", path.name, key)
			}
			release()
		}
		if err := path.book(ctx); err != nil {
			t.Fatalf("%s with no lock held elsewhere: %v", path.name, err)
		}
	}
	got, err := db.FindTemplateForUse(ctx, buyers[1].ID, tpl.ID)
	if err != nil || got.UsedBy != 1 {
		t.Errorf("template used by %d (%v), want the one booking that ran", got.UsedBy, err)
	}
}
