package workflow

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/billing"
	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
	"github.com/gpumarket/gpumarket/store/pgtest"
)

// autoTopUps returns the buyer's automatic top-ups by state.
func (f *fixture) autoTopUps(buyerID int64) map[string]int {
	f.t.Helper()
	ts, err := f.db.ListTopUps(f.ctx, buyerID)
	if err != nil {
		f.t.Fatal(err)
	}
	out := map[string]int{}
	for _, t := range ts {
		if t.Method == store.TopUpAuto {
			out[t.State]++
		}
	}
	return out
}

// A balance of 5.00 under a threshold of 6.00 is topped up by 10.00 from
// the saved card at the next tick, once however many ticks follow (15.00
// is no longer below); the threshold raised to 20.00, one more (25.00);
// cleared, none. Reconciled.
func TestAutoTopUpBelowThreshold(t *testing.T) {
	f := newFixture(t, nil)
	f.onboard()
	f.meteredSetup(500)
	if err := f.wf.SetAutoTopUp(f.ctx, f.buyer.ID, 600, 1000); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 5; i++ {
		f.tick(f.now.Add(time.Minute))
	}
	if got := f.autoTopUps(f.buyer.ID); got[store.TopUpPaid] != 1 || len(got) != 1 {
		t.Fatalf("automatic top-ups %v, want one paid", got)
	}
	if bal, _ := f.db.FindBalance(f.ctx, f.buyer.ID); bal.Balance != 1500 || bal.TopUps != 1500 {
		t.Fatalf("balance %+v, want 15.00 of top-ups", bal)
	}
	if err := f.wf.SetAutoTopUp(f.ctx, f.buyer.ID, 2000, 1000); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		f.tick(f.now.Add(time.Minute))
	}
	if bal, _ := f.db.FindBalance(f.ctx, f.buyer.ID); bal.Balance != 2500 {
		t.Fatalf("balance %s, want 25.00", bal.Balance)
	}
	// Cleared: nothing more.
	if err := f.wf.SetAutoTopUp(f.ctx, f.buyer.ID, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.wf.SetAutoTopUp(f.ctx, f.buyer.ID, 0, 0); err != nil {
		t.Fatal(err)
	}
	f.tick(f.now.Add(time.Minute))
	if got := f.autoTopUps(f.buyer.ID); got[store.TopUpPaid] != 2 {
		t.Fatalf("automatic top-ups %v, want two paid", got)
	}
	f.requireReconciled()
}

// Invalid settings are refused per field; no saved card, no setting.
func TestAutoTopUpValidation(t *testing.T) {
	f := newFixture(t, nil)
	err := f.wf.SetAutoTopUp(f.ctx, f.buyer.ID, 50, 100)
	fe := market.FieldErrors(err)
	if fe["threshold"] == "" || fe["amount"] == "" {
		t.Fatalf("bad threshold and amount: %v", err)
	}
	if err := f.wf.SetAutoTopUp(f.ctx, f.buyer.ID, 600, 1000); market.ErrorCode(err) != market.CodeInvalid {
		t.Fatalf("without a saved card: %v, want invalid", err)
	}
}

// A declined card is recorded, the buyer notified once, and the automatic
// top-up paused: later ticks charge nothing until the buyer tops up by
// hand, after which it runs again.
func TestAutoTopUpDeclinedPauses(t *testing.T) {
	f := newFixture(t, nil)
	f.onboard()
	f.meteredSetup(500)
	f.saveCard(f.buyer.ID, "4000 0000 0000 0002") // the newer card is the default
	if err := f.wf.SetAutoTopUp(f.ctx, f.buyer.ID, 600, 1000); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 5; i++ {
		f.tick(f.now.Add(time.Minute))
	}
	if got := f.autoTopUps(f.buyer.ID); got[store.TopUpFailed] != 1 || len(got) != 1 {
		t.Fatalf("automatic top-ups %v, want one failed", got)
	}
	if n := f.countNotified(f.buyer.ID, "automatic top-up was declined"); n != 1 {
		t.Fatalf("notified %d times of the decline, want once", n)
	}
	a, err := f.db.FindAutoTopUp(f.ctx, f.buyer.ID)
	if err != nil || a.PausedReason == "" {
		t.Fatalf("auto top-up %+v, %v: want paused", a, err)
	}
	// A good card and a top-up by hand resume it.
	f.saveCard(f.buyer.ID, "4242 4242 4242 4242")
	if _, err := f.wf.TopUpWithSavedCard(f.ctx, f.buyer.ID, 500); err != nil {
		t.Fatal(err)
	}
	if err := f.wf.SetAutoTopUp(f.ctx, f.buyer.ID, 1100, 1000); err != nil {
		t.Fatal(err)
	}
	f.tick(f.now.Add(time.Minute))
	if got := f.autoTopUps(f.buyer.ID); got[store.TopUpPaid] != 1 || got[store.TopUpFailed] != 1 {
		t.Fatalf("automatic top-ups %v, want one failed and one paid", got)
	}
	if bal, _ := f.db.FindBalance(f.ctx, f.buyer.ID); bal.Balance != 2000 {
		t.Fatalf("balance %s, want 5.00 + 5.00 + 10.00", bal.Balance)
	}
	f.requireReconciled()
}

// Two replicas running their background loops on one database (one
// PostgreSQL on a PostgreSQL run) top a balance below its threshold up
// once.
func TestAutoTopUpOnceAcrossReplicas(t *testing.T) {
	dsn := pgtest.DSN(t, filepath.Join(t.TempDir(), "gpm.db"))
	f := newFixtureAt(t, dsn, nil)
	f.meteredSetup(500)
	if err := f.wf.SetAutoTopUp(f.ctx, f.buyer.ID, 600, 1000); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	now := f.now
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	ctx, cancel := context.WithCancel(f.ctx)
	var wg sync.WaitGroup
	for _, name := range []string{"a", "b"} {
		db, err := store.Open(f.ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		s, err := New(f.ctx, Config{Billing: billing.NewLocal(billing.LocalConfig{Store: db}), PlatformFeeBP: feeBP, Now: clock, Replica: name}, db,
			slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() { defer wg.Done(); s.Run(ctx, 2*time.Millisecond) }()
	}
	for range 60 {
		time.Sleep(20 * time.Millisecond)
		mu.Lock()
		now = now.Add(10 * time.Second)
		mu.Unlock()
	}
	cancel()
	wg.Wait()
	f.now = clock()
	if got := f.autoTopUps(f.buyer.ID); got[store.TopUpPaid] != 1 || len(got) != 1 {
		t.Fatalf("automatic top-ups %v, want one paid", got)
	}
	if bal, _ := f.db.FindBalance(f.ctx, f.buyer.ID); bal.Balance != 1500 {
		t.Fatalf("balance %s, want 15.00", bal.Balance)
	}
	f.requireReconciled()
}

// A crash between recording an automatic top-up and charging it: the
// pending top-up blocks a second one, and the tick's retry (past the
// grace) charges it once under its key. Reconciled (the processor holds
// one payment of 10.00 for it).
func TestAutoTopUpAfterACrash(t *testing.T) {
	f := newFixture(t, nil)
	f.meteredSetup(500)
	if err := f.wf.SetAutoTopUp(f.ctx, f.buyer.ID, 600, 1000); err != nil {
		t.Fatal(err)
	}
	pending, ok, err := f.db.StartAutoTopUp(f.ctx, f.buyer.ID, f.now) // recorded, then the process died
	if err != nil || !ok {
		t.Fatalf("start: %v %v", ok, err)
	}
	if _, ok, err := f.db.StartAutoTopUp(f.ctx, f.buyer.ID, f.now); err != nil || ok {
		t.Fatalf("a second one while the first is pending: %v %v", ok, err)
	}
	start := f.now
	for i := 1; i <= 12; i++ {
		f.tick(start.Add(time.Duration(i) * market.ChargeRetryGrace / 4))
	}
	if got := f.autoTopUps(f.buyer.ID); got[store.TopUpPaid] != 1 || len(got) != 1 {
		t.Fatalf("automatic top-ups %v, want the recorded one paid", got)
	}
	if got, _ := f.db.FindTopUp(f.ctx, f.buyer.ID, pending.ID); got.State != store.TopUpPaid {
		t.Fatalf("top-up %d is %s", pending.ID, got.State)
	}
	if bal, _ := f.db.FindBalance(f.ctx, f.buyer.ID); bal.Balance != 1500 {
		t.Fatalf("balance %s, want 15.00", bal.Balance)
	}
	f.requireReconciled()
}
