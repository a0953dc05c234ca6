package store

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store/pgtest"
)

// TestBackupWhileBooking takes a backup of an SQLite file while four
// buyers book and pay through the store: the copy opens, passes its
// integrity check, its ledger balances, and every booking acknowledged
// before the backup began is in it, paid, with its ledger entries.
func TestBackupWhileBooking(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db, err := Open(ctx, filepath.Join(dir, "live.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	prov := createUser(t, db, "prov@example.com", true)
	o := listedOffer(t, db, prov.ID, 8)

	type ack struct {
		id     int64
		amount market.Cents
		at     time.Time // when CreateReservation and RecordPayment had both returned
	}
	var (
		mu     sync.Mutex
		acks   []ack
		stop   atomic.Bool
		wg     sync.WaitGroup
		booked atomic.Int64
	)
	for w := range 4 {
		buyer := createUser(t, db, fmt.Sprintf("buyer%d@example.com", w), false)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				// One device for one hour per booking; four workers, eight devices.
				start := t0.Add(48*time.Hour + time.Duration(i)*time.Hour)
				p := piece(o, 1, start, 1)
				r, err := db.CreateReservation(ctx, buyer.ID, []market.ReservationPiece{p}, `{"version":1}`, t0, hold)
				if err != nil {
					t.Errorf("book: %v", err)
					return
				}
				if _, err := db.RecordPayment(ctx, PaymentEvent{EventID: fmt.Sprintf("evt_%d", r.ID), EventType: "checkout.session.completed",
					ReservationID: r.ID, PaymentIntentID: fmt.Sprintf("pi_%d", r.ID), Amount: r.AmountCents, Currency: "usd"}, t0); err != nil {
					t.Errorf("pay: %v", err)
					return
				}
				mu.Lock()
				acks = append(acks, ack{r.ID, r.AmountCents, time.Now()})
				mu.Unlock()
				booked.Add(1)
			}
		}()
	}
	for booked.Load() < 40 { // bookings are being written when the backup starts
		time.Sleep(5 * time.Millisecond)
	}
	to := filepath.Join(dir, "backup", "copy.db")
	if err := os.MkdirAll(filepath.Dir(to), 0o750); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	rep, err := db.BackupTo(ctx, to)
	ended := time.Now()
	for n := booked.Load(); booked.Load() < n+40 && time.Since(ended) < 5*time.Second; {
		time.Sleep(5 * time.Millisecond) // and go on being written after it
	}
	stop.Store(true)
	wg.Wait()
	if err != nil {
		t.Fatalf("BackupTo: %v", err)
	}
	if _, err := os.Stat(to + ".partial"); !os.IsNotExist(err) {
		t.Errorf("the partial copy was left behind: %v", err)
	}

	cp, err := Open(ctx, to)
	if err != nil {
		t.Fatalf("the copy does not open: %v", err)
	}
	defer cp.Close()
	var check string
	if err := cp.reader.QueryRowContext(ctx, `PRAGMA integrity_check`).Scan(&check); err != nil || check != "ok" {
		t.Fatalf("integrity_check of the copy: %q %v", check, err)
	}
	es, err := cp.ListAllLedger(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := market.CheckBalanced(es); err != nil {
		t.Fatal(err)
	}
	if rep.LedgerEntries != len(es) || rep.Path != to || rep.Bytes <= 0 {
		t.Errorf("report %+v, want %d ledger entries at %s", rep, len(es), to)
	}
	entries := map[int64]int{}
	for _, e := range es {
		entries[e.ReservationID]++
	}
	before, after := 0, 0
	for _, a := range acks {
		if a.at.After(began) {
			if a.at.After(ended) {
				after++
			}
			continue
		}
		before++
		r, err := cp.FindReservation(ctx, a.id)
		if err != nil {
			t.Errorf("booking %d, acknowledged before the backup began, is not in the copy: %v", a.id, err)
			continue
		}
		if r.State != market.ReservationConfirmed {
			t.Errorf("booking %d in the copy is %s, want confirmed (its payment was acknowledged before the backup)", a.id, r.State)
		}
		if entries[a.id] == 0 {
			t.Errorf("booking %d: its payment (%d¢) has no ledger entries in the copy", a.id, a.amount)
		}
	}
	if before < 40 || after == 0 {
		t.Fatalf("%d bookings acknowledged before the backup and %d after it: the backup did not run amid the bookings", before, after)
	}
	if rep.Reservations < before || rep.Reservations >= len(acks)+4 {
		t.Errorf("the copy holds %d reservations; %d were acknowledged before it began, %d in all", rep.Reservations, before, len(acks))
	}
	t.Logf("backup of %d bytes in %v amid %d bookings (%d acknowledged before it began); %d ledger entries",
		rep.Bytes, ended.Sub(began).Round(time.Millisecond), len(acks), before, len(es))

	// A second backup to the same file is refused, and the first is kept.
	if _, err := db.BackupTo(ctx, to); market.ErrorCode(err) != market.CodeInvalid || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("a backup over an existing file: %v", err)
	}
}

// TestBackupRefusedOnPostgres: on PostgreSQL the backup is refused with a
// message naming pg_dump, and nothing is written.
func TestBackupRefusedOnPostgres(t *testing.T) {
	db, err := Open(context.Background(), pgtest.Database(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	to := filepath.Join(t.TempDir(), "copy.db")
	_, err = db.BackupTo(context.Background(), to)
	if market.ErrorCode(err) != market.CodeInvalid || !strings.Contains(err.Error(), "pg_dump") {
		t.Fatalf("BackupTo on PostgreSQL: %v, want a refusal naming pg_dump", err)
	}
	if _, err := os.Stat(to); !os.IsNotExist(err) {
		t.Errorf("something was written at %s: %v", to, err)
	}
}
