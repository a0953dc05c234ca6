package workflow

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/billing"
	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
	"github.com/gpumarket/gpumarket/store/pgtest"
)

// meteredSetup makes the fixture's offer metered (30 minutes' notice), the
// buyer's balance topped up by amount from a saved test card, and the
// provider's agent token for node 0.
func (f *fixture) meteredSetup(amount market.Cents) store.HostToken {
	f.t.Helper()
	if err := f.wf.SetOfferMetered(f.ctx, f.prov.ID, f.offer.ID, true, 30); err != nil {
		f.t.Fatal(err)
	}
	f.saveCard(f.buyer.ID, "4242 4242 4242 4242")
	if _, err := f.wf.TopUpWithSavedCard(f.ctx, f.buyer.ID, amount); err != nil {
		f.t.Fatal(err)
	}
	tok, _, err := f.db.CreateHostToken(f.ctx, f.prov.ID, f.offer.ID, 0, f.now)
	if err != nil {
		f.t.Fatal(err)
	}
	return tok
}

// handOver reports, as the node's agent, the buyer's access in place and
// the acceptance test passed, at the fixture's now.
func (f *fixture) handOver(tok store.HostToken, pieceID int64) {
	f.t.Helper()
	if _, err := f.wf.RecordInstalled(f.ctx, tok, pieceID, market.Connection{Host: "203.0.113.7", Port: 22, User: "gpu"}); err != nil {
		f.t.Fatal(err)
	}
	res := market.AcceptanceResult{Metric: market.FigureBF16TFLOPS, PerDeviceMilli: []int64{900000}, DurationSeconds: 20}
	if _, err := f.wf.RecordAcceptance(f.ctx, tok, pieceID, res); err != nil {
		f.t.Fatal(err)
	}
}

// drawRanges returns a rental's draws' minute ranges from their keys, in
// order, and their total.
func drawRanges(t *testing.T, db *store.DB, reservationID int64) ([][2]int64, market.Cents) {
	t.Helper()
	es, err := db.ListBalanceEntries(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	var out [][2]int64
	var sum market.Cents
	for _, e := range es {
		if e.Kind != market.EntryDraw || e.ReservationID != reservationID {
			continue
		}
		var id, from, to int64
		if _, err := fmt.Sscanf(e.IdempotencyKey, "metered_%d_min_%d_%d", &id, &from, &to); err != nil {
			t.Fatalf("draw key %q: %v", e.IdempotencyKey, err)
		}
		out = append(out, [2]int64{from, to})
		sum += e.Amount
	}
	sort.Slice(out, func(i, j int) bool { return out[i][0] < out[j][0] })
	return out, sum
}

// requireEachMinuteOnce fails unless the draws' ranges tile [0, minutes)
// with no gap and no overlap: every minute billed once.
func requireEachMinuteOnce(t *testing.T, ranges [][2]int64, minutes int64) {
	t.Helper()
	var next int64
	for _, r := range ranges {
		if r[0] != next || r[1] <= r[0] {
			t.Fatalf("draw ranges %v do not tile [0, %d): at %d", ranges, minutes, next)
		}
		next = r[1]
	}
	if next != minutes {
		t.Fatalf("draw ranges %v end at %d, want %d", ranges, next, minutes)
	}
}

// The buyer's whole path in the workflow: top up 20.00 from a saved card,
// start a metered rental of one device at 249¢/h, the clock starting at
// the agent's handover (s+7m), not at the start; stopped at s+47m 30s:
// 40 whole minutes, 40 × 249 / 60 = 166¢. Fee 10 % 16.6 → 17¢, payout
// 149¢. The unused 1,834¢ refunded to the top-up's payment; reconciled.
func TestMeteredRentalInTheWorkflow(t *testing.T) {
	f := newFixture(t, nil)
	f.onboard()
	tok := f.meteredSetup(2000)
	s := t0.Add(2 * time.Hour)
	f.now = s
	m, err := f.wf.StartMetered(f.ctx, f.buyer.ID, f.offer.ID, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 6; i++ {
		f.tick(s.Add(time.Duration(i) * time.Minute))
	}
	if got, _ := f.db.FindMeteredRental(f.ctx, m.ReservationID); got.DrawnMinutes != 0 || !got.ClockStart.IsZero() {
		t.Fatalf("drew %d minutes before the handover", got.DrawnMinutes)
	}
	f.now = s.Add(7 * time.Minute)
	f.handOver(tok, m.PieceID)
	for i := 8; i <= 47; i++ {
		f.tick(s.Add(time.Duration(i) * time.Minute))
	}
	f.now = s.Add(47*time.Minute + 30*time.Second)
	if _, err := f.wf.StopMetered(f.ctx, f.buyer.ID, m.ReservationID); err != nil {
		t.Fatal(err)
	}
	// The agent confirms the removal after the stop: the stop counts.
	f.now = s.Add(48 * time.Minute)
	if _, err := f.wf.RecordRemoved(f.ctx, tok, m.PieceID, f.now); err != nil {
		t.Fatal(err)
	}
	for i := 48; i <= 52; i++ {
		f.tick(s.Add(time.Duration(i) * time.Minute))
	}
	got, err := f.db.FindMeteredRental(f.ctx, m.ReservationID)
	if err != nil {
		t.Fatal(err)
	}
	if !got.ClockStart.Equal(s.Add(7*time.Minute)) || !got.Final || got.DrawnMinutes != 40 || got.DrawnCents != 166 || got.Fee != 17 || got.Payout != 149 || got.TransferRef == "" {
		t.Fatalf("rental %+v, want 40 minutes from s+7m, 166¢, fee 17¢, payout 149¢ paid", got)
	}
	ranges, sum := drawRanges(t, f.db, m.ReservationID)
	requireEachMinuteOnce(t, ranges, 40)
	if sum != 166 {
		t.Fatalf("draws add up to %s, want 166¢", sum)
	}
	parts, err := f.wf.RefundBalance(f.ctx, f.buyer.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(parts) != 1 || parts[0].Amount != 1834 {
		t.Fatalf("refund parts %+v, want one of 1,834¢", parts)
	}
	bal, err := f.db.FindBalance(f.ctx, f.buyer.ID)
	if err != nil {
		t.Fatal(err)
	}
	if bal.TopUps != 2000 || bal.Draws != 166 || bal.Refunds != 1834 || bal.Balance != 0 {
		t.Fatalf("balance %+v", bal)
	}
	f.requireReconciled()
}

// A refund request is never more than each top-up paid: two top-ups of
// 10.00 and 5.00, 3.00 drawn; the 12.00 left goes 5.00 to the newer and
// 7.00 to the older.
func TestBalanceRefundGoesBackToEachPayment(t *testing.T) {
	f := newFixture(t, nil)
	f.onboard()
	tok := f.meteredSetup(1000)
	if _, err := f.wf.TopUpWithSavedCard(f.ctx, f.buyer.ID, 500); err != nil {
		t.Fatal(err)
	}
	s := t0.Add(time.Hour)
	f.now = s
	// 8 devices at 249¢/h are 33.2¢ a minute: 9 whole minutes are 298.8 →
	// 298¢ drawn; the 1,202¢ left refunded 500 + 702.
	m, err := f.wf.StartMetered(f.ctx, f.buyer.ID, f.offer.ID, 8, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.handOver(tok, m.PieceID)
	f.tick(s.Add(5 * time.Minute))
	f.now = s.Add(9*time.Minute + 59*time.Second)
	if _, err := f.wf.StopMetered(f.ctx, f.buyer.ID, m.ReservationID); err != nil {
		t.Fatal(err)
	}
	// A refund while its last draw is not made is refused.
	_, err = f.wf.RefundBalance(f.ctx, f.buyer.ID, 0)
	if market.ErrorCode(err) != market.CodeConflict {
		t.Fatalf("refund during the rental: %v, want a conflict", err)
	}
	f.tick(s.Add(13 * time.Minute))
	parts, err := f.wf.RefundBalance(f.ctx, f.buyer.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(parts) != 2 || parts[0].Amount != 702 || parts[1].Amount != 500 {
		t.Fatalf("refund parts %+v, want 702¢ to the first top-up and 500¢ to the second", parts)
	}
	tops, err := f.db.ListTopUps(f.ctx, f.buyer.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, tu := range tops {
		p, err := f.local.RetrievePayment(f.ctx, tu.PaymentIntentID)
		if err != nil {
			t.Fatal(err)
		}
		if tu.Refunded > tu.Amount || p.AmountReceived != tu.Amount {
			t.Fatalf("top-up %+v against payment %+v", tu, p)
		}
	}
	f.requireReconciled()
}

// meteredChildEnv names the database a kill -9 child process meters.
const meteredChildEnv = "GPUMARKET_METERED_CHILD_DSN"

// meteredSpeed is how much faster than the wall the children's clock runs:
// one real second is a minute.
const meteredSpeed = 60

// fastClock is the clock the children share across restarts: base when
// the wall clock read origin, running meteredSpeed times faster.
func fastClock(base time.Time, origin time.Time) func() time.Time {
	return func() time.Time { return base.Add(time.Since(origin) * meteredSpeed) }
}

// TestMeteredChildProcess is the replica the kill -9 test starts and kills:
// the background loop on the database it is given, on the shared fast
// clock, until it is killed.
func TestMeteredChildProcess(t *testing.T) {
	dsn := os.Getenv(meteredChildEnv)
	if dsn == "" {
		t.Skip("run by TestMeteredDrawsSurviveKillNine")
	}
	base, _ := strconv.ParseInt(os.Getenv(meteredChildEnv+"_BASE"), 10, 64)
	origin, _ := strconv.ParseInt(os.Getenv(meteredChildEnv+"_ORIGIN"), 10, 64)
	clock := fastClock(time.Unix(base, 0).UTC(), time.Unix(0, origin))
	ctx := context.Background()
	db, err := store.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	wf, err := New(ctx, Config{Billing: billing.NewLocal(billing.LocalConfig{Store: db}), PlatformFeeBP: feeBP, Now: clock, Replica: "child"},
		db, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	wf.Run(ctx, 50*time.Millisecond) // until killed
}

// Kill -9 during draws: the background loop runs in a child process on
// the same database and is killed with SIGKILL at random moments, four
// times, each time restarted; then the buyer stops the rental and the
// last draws are made. Every minute from the handover to the stop is
// billed exactly once: the draws' minute ranges tile [0, minutes) and add
// up to minutes × 249 / 60, derived here from the clock alone.
func TestMeteredDrawsSurviveKillNine(t *testing.T) {
	if testing.Short() {
		t.Skip("starts child processes for about 10 s")
	}
	dsn := pgtest.DSN(t, filepath.Join(t.TempDir(), "gpm.db"))
	f := newFixtureAt(t, dsn, nil)
	tok := f.meteredSetup(5000)
	origin := time.Now()
	base := t0.Add(time.Hour)
	clock := fastClock(base, origin)
	f.now = clock()
	m, err := f.wf.StartMetered(f.ctx, f.buyer.ID, f.offer.ID, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.now = clock()
	f.handOver(tok, m.PieceID)
	clockStart := f.now.Truncate(time.Second)

	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	kills := 0
	for range 4 {
		cmd := exec.Command(exe, "-test.run=^TestMeteredChildProcess$", "-test.count=1")
		var env []string
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "GPUMARKET_TEST_DB=") { // the child opens dsn itself, starts no server
				env = append(env, kv)
			}
		}
		cmd.Env = append(env, meteredChildEnv+"="+dsn,
			meteredChildEnv+"_BASE="+strconv.FormatInt(base.Unix(), 10),
			meteredChildEnv+"_ORIGIN="+strconv.FormatInt(origin.UnixNano(), 10))
		cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(1500+rand.IntN(1500)) * time.Millisecond)
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
		kills++
	}
	mid, err := f.db.FindMeteredRental(f.ctx, m.ReservationID)
	if err != nil {
		t.Fatal(err)
	}
	if mid.DrawnMinutes == 0 {
		t.Fatal("the children drew nothing: the test did not exercise kill -9 during draws")
	}
	// The buyer stops it; this process's workflow ticks to the last draw.
	f.now = clock()
	if _, err := f.wf.StopMetered(f.ctx, f.buyer.ID, m.ReservationID); err != nil {
		t.Fatal(err)
	}
	stop := f.now.Truncate(time.Second)
	f.tick(stop.Add(market.MeteredDrawLag + time.Second))
	got, err := f.db.FindMeteredRental(f.ctx, m.ReservationID)
	if err != nil {
		t.Fatal(err)
	}
	minutes := int64(stop.Sub(clockStart) / time.Minute)
	cents := market.Cents(minutes * 249 / 60)
	if !got.Final || got.DrawnMinutes != minutes || got.DrawnCents != cents {
		t.Fatalf("after %d kills: drew %d minutes for %s, want %d for %s (final %v)", kills, got.DrawnMinutes, got.DrawnCents, minutes, cents, got.Final)
	}
	ranges, sum := drawRanges(t, f.db, m.ReservationID)
	requireEachMinuteOnce(t, ranges, minutes)
	if sum != cents {
		t.Fatalf("draws add up to %s, want %s", sum, cents)
	}
	t.Logf("%d kills; %d minutes billed in %d draws before the stop's", kills, mid.DrawnMinutes, len(ranges))
	f.requireReconciled()
}

// Two replicas' background loops on one database (one PostgreSQL server
// on a PostgreSQL run) meter one rental: its draws are made exactly once.
func TestMeteredDrawsOnceAcrossReplicas(t *testing.T) {
	dsn := pgtest.DSN(t, filepath.Join(t.TempDir(), "gpm.db"))
	f := newFixtureAt(t, dsn, nil)
	tok := f.meteredSetup(5000)
	var mu sync.Mutex
	now := t0.Add(time.Hour)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	f.now = now
	m, err := f.wf.StartMetered(f.ctx, f.buyer.ID, f.offer.ID, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.handOver(tok, m.PieceID)
	clockStart := now
	replica := func(name string) *Service {
		// Each replica its own handle on the database, as two processes.
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
		return s
	}
	ctx, cancel := context.WithCancel(f.ctx)
	var wg sync.WaitGroup
	for _, name := range []string{"a", "b"} {
		s := replica(name)
		wg.Add(1)
		go func() { defer wg.Done(); s.Run(ctx, 2*time.Millisecond) }()
	}
	// 30 minutes in 10-second steps, while both loops run: the lease
	// (5 s of this clock) is renewed every 2 ms, ten times per step.
	for range 180 {
		time.Sleep(20 * time.Millisecond)
		mu.Lock()
		now = now.Add(10 * time.Second)
		mu.Unlock()
	}
	cancel()
	wg.Wait()
	f.now = clock()
	if _, err := f.wf.StopMetered(f.ctx, f.buyer.ID, m.ReservationID); err != nil {
		t.Fatal(err)
	}
	stopAt := f.now
	f.tick(f.now.Add(market.MeteredDrawLag))
	got, err := f.db.FindMeteredRental(f.ctx, m.ReservationID)
	if err != nil {
		t.Fatal(err)
	}
	// 30 minutes from the handover; 30 × 249 / 60 = 124.5 → 124¢.
	if d := stopAt.Sub(clockStart); d != 30*time.Minute {
		t.Fatalf("the clock ran %s", d)
	}
	if !got.Final || got.DrawnMinutes != 30 || got.DrawnCents != 124 {
		t.Fatalf("drew %d minutes for %s, want 30 for 124¢", got.DrawnMinutes, got.DrawnCents)
	}
	ranges, sum := drawRanges(t, f.db, m.ReservationID)
	requireEachMinuteOnce(t, ranges, 30)
	if sum != 124 || len(ranges) < 2 {
		t.Fatalf("draws %v add up to %s, want 124¢ in several draws", ranges, sum)
	}
	f.requireReconciled()
}

// What is for blocks is refused on a metered rental: extending, reselling,
// rejecting for a refund.
func TestMeteredRentalRefusesBlockActions(t *testing.T) {
	f := newFixture(t, nil)
	f.meteredSetup(2000)
	f.now = t0.Add(time.Hour)
	m, err := f.wf.StartMetered(f.ctx, f.buyer.ID, f.offer.ID, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.wf.Extend(f.ctx, f.buyer.ID, m.ReservationID, 1, 249, 30*time.Minute); market.ErrorCode(err) != market.CodeConflict {
		t.Errorf("extend: %v, want a conflict", err)
	}
	if _, err := f.wf.Reject(f.ctx, f.buyer.ID, m.ReservationID, ""); market.ErrorCode(err) != market.CodeConflict {
		t.Errorf("reject: %v, want a conflict", err)
	}
	if _, err := f.wf.ListRemainingTime(f.ctx, f.buyer.ID, m.ReservationID, f.now.Add(time.Hour), 100); market.ErrorCode(err) != market.CodeConflict {
		t.Errorf("resale: %v, want a conflict", err)
	}
}
