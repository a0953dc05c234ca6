package workflow

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/billing"
	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
)

// TestBackgroundLeaseOneReplicaAtATime: two replicas' background loops on
// one database — one holds the lease and the other waits; a clean stop
// hands it over at the next tick; a holder that dies (never renews) is
// replaced once its lease has expired, not before.
func TestBackgroundLeaseOneReplicaAtATime(t *testing.T) {
	f := newFixture(t, nil)
	var mu sync.Mutex
	now := t0
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	replica := func(name string) *Service {
		s, err := New(f.ctx, Config{Billing: f.proc, PlatformFeeBP: feeBP, Now: clock, Replica: name}, f.db, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	const tick = 10 * time.Millisecond
	start := func(s *Service) (stop func()) {
		ctx, cancel := context.WithCancel(f.ctx)
		done := make(chan struct{})
		go func() { defer close(done); s.Run(ctx, tick) }()
		return func() { cancel(); <-done }
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting until %s", what)
			}
			time.Sleep(time.Millisecond)
		}
	}
	holder := func() string {
		h, err := f.db.LeaseHolder(f.ctx, BackgroundLease, clock())
		if err != nil {
			t.Fatal(err)
		}
		return h
	}

	a, b := replica("a"), replica("b")
	stopA := start(a)
	waitFor("a holds the lease", a.HoldsLease)
	stopB := start(b)
	for range 20 { // b keeps asking every tick and is refused
		time.Sleep(tick)
		if b.HoldsLease() || !a.HoldsLease() {
			t.Fatalf("lease: a %v, b %v; want a alone", a.HoldsLease(), b.HoldsLease())
		}
	}
	if h := holder(); h != a.holder {
		t.Fatalf("holder in the database = %q, want a's %q", h, a.holder)
	}

	stopA() // a clean stop releases the lease: b takes it at its next tick
	if a.HoldsLease() {
		t.Fatal("a still says it holds the lease after stopping")
	}
	waitFor("b takes over", b.HoldsLease)
	stopB()

	// A holder that dies keeps the lease until it expires.
	if _, ok, err := f.db.TakeLease(f.ctx, BackgroundLease, "dead", clock(), LeaseTTL(tick)); err != nil || !ok {
		t.Fatalf("the dead replica's lease: %v, %v", ok, err)
	}
	c := replica("c")
	stopC := start(c)
	defer stopC()
	for range 20 {
		time.Sleep(tick)
		if c.HoldsLease() {
			t.Fatal("c took the lease of a holder that has not expired")
		}
	}
	advance(LeaseTTL(tick))
	waitFor("c takes over the expired lease", c.HoldsLease)
	if h := holder(); h != c.holder {
		t.Fatalf("holder in the database = %q, want c's %q", h, c.holder)
	}
}

// pausing fails a refund when failOnce is set, and blocks the first
// refund after armed is set until release is closed, as a holder frozen in the middle of its tick (a long GC pause,
// SIGSTOP, a stalled network) would.
type pausing struct {
	*billing.Local
	failOnce atomic.Bool // the next refund fails with a retryable error
	armed    atomic.Bool
	entered  chan struct{}
	release  chan struct{}
}

func (p *pausing) Refund(ctx context.Context, pi string, amount market.Cents, key string) (billing.Refund, error) {
	if p.failOnce.CompareAndSwap(true, false) {
		return billing.Refund{}, &billing.Error{Op: "refund", Status: 503, Retryable: true, Err: errors.New("processor unavailable")}
	}
	if p.armed.CompareAndSwap(true, false) {
		close(p.entered)
		<-p.release
	}
	return p.Local.Refund(ctx, pi, amount, key)
}

// errLog keeps the errors logged under "err", to see what a replica was
// refused.
type errLog struct {
	mu   sync.Mutex
	errs []error
}

func (h *errLog) Enabled(context.Context, slog.Level) bool { return true }
func (h *errLog) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *errLog) WithGroup(string) slog.Handler            { return h }
func (h *errLog) Handle(_ context.Context, r slog.Record) error {
	r.Attrs(func(a slog.Attr) bool {
		if err, ok := a.Value.Any().(error); ok && a.Key == "err" {
			h.mu.Lock()
			h.errs = append(h.errs, err)
			h.mu.Unlock()
		}
		return true
	})
	return nil
}

func (h *errLog) has(target error) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, err := range h.errs {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}

// TestPausedHolderIsFenced: replica a holds the lease and is paused in the
// middle of a settlement (its clock stands still, as a frozen process's
// does, so its renewals stop counting); replica b takes the lease over and
// makes the settlement's refund; a resumes, and its record of the same
// refund is refused by the database (store.ErrLeaseLost) — a no longer
// holds the lease and writes nothing more. The refund is made once and the
// ledger reconciles.
func TestPausedHolderIsFenced(t *testing.T) {
	p := &pausing{entered: make(chan struct{}), release: make(chan struct{})}
	f := newFixture(t, func(l *billing.Local) billing.Processor { p.Local = l; return p })
	start := t0.Add(48 * time.Hour)
	r := f.book(start)
	f.pay(r)
	p.failOnce.Store(true) // the cancellation's refund fails: the retrier owes it
	f.now = start.Add(-30 * time.Hour)
	if _, err := f.wf.Cancel(f.ctx, f.buyer.ID, r.ID); err != nil {
		t.Fatal(err)
	}
	if s := f.settlement(r.ID); s.RefundDone {
		t.Fatalf("the refund should be owed: %+v", s)
	}
	const tick = 10 * time.Millisecond
	aNow := f.now.Add(time.Hour)                   // a's clock, standing still while it is paused
	bNow := aNow.Add(LeaseTTL(tick) + time.Second) // b's clock: a's lease has expired
	replica := func(name string, at time.Time, log slog.Handler) *Service {
		s, err := New(f.ctx, Config{Billing: f.proc, PlatformFeeBP: feeBP, Now: func() time.Time { return at }, Replica: name}, f.db, slog.New(log))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	start2 := func(s *Service) (stop func()) {
		ctx, cancel := context.WithCancel(f.ctx)
		done := make(chan struct{})
		go func() { defer close(done); s.Run(ctx, tick) }()
		return func() { cancel(); <-done }
	}
	aLog := &errLog{}
	a := replica("a", aNow, aLog)
	p.armed.Store(true)
	stopA := start2(a)
	defer stopA()
	select {
	case <-p.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("a's tick never reached the refund")
	}
	if !a.HoldsLease() {
		t.Fatal("a should hold the lease while its tick runs")
	}

	b := replica("b", bNow, slog.NewTextHandler(io.Discard, nil))
	stopB := start2(b)
	defer stopB()
	waitUntil(t, "b takes over and records the refund", func() bool { return b.HoldsLease() && f.settlement(r.ID).RefundDone })
	waitUntil(t, "a learns it lost the lease", func() bool { return !a.HoldsLease() })

	close(p.release) // a resumes: its refund call returns (the same refund, by its idempotency key)
	waitUntil(t, "a's record of the refund is refused", func() bool { return aLog.has(store.ErrLeaseLost) })
	stopA()
	stopB()
	if s := f.settlement(r.ID); !s.RefundDone || s.RefundCents != 19920 || s.State != store.SettlementDone {
		t.Fatalf("settlement after the takeover: %+v", s)
	}
	f.requireReconciled()
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestLongTickKeepsTheLease: the holder's tick is stuck in a processor
// call for three lease lengths while its clock runs on; its renewals go
// on beside the tick, so the other replica never takes the lease, and the
// tick's record of the refund, when the call returns, is stored.
func TestLongTickKeepsTheLease(t *testing.T) {
	p := &pausing{entered: make(chan struct{}), release: make(chan struct{})}
	f := newFixture(t, func(l *billing.Local) billing.Processor { p.Local = l; return p })
	start := t0.Add(48 * time.Hour)
	r := f.book(start)
	f.pay(r)
	p.failOnce.Store(true)
	f.now = start.Add(-30 * time.Hour)
	if _, err := f.wf.Cancel(f.ctx, f.buyer.ID, r.ID); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	now := f.now.Add(time.Hour)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	const tick = 10 * time.Millisecond
	logs := map[string]*errLog{"a": {}, "b": {}}
	replica := func(name string) *Service {
		s, err := New(f.ctx, Config{Billing: f.proc, PlatformFeeBP: feeBP, Now: clock, Replica: name}, f.db, slog.New(logs[name]))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	run := func(s *Service) (stop func()) {
		ctx, cancel := context.WithCancel(f.ctx)
		done := make(chan struct{})
		go func() { defer close(done); s.Run(ctx, tick) }()
		return func() { cancel(); <-done }
	}
	a, b := replica("a"), replica("b")
	p.armed.Store(true)
	stopA := run(a)
	defer stopA()
	<-p.entered
	stopB := run(b)
	defer stopB()
	for range 3 * 10 { // 3 × LeaseTTL (5 s) of a's clock, half a second at a time
		mu.Lock()
		now = now.Add(LeaseTTL(tick) / 10)
		renewedTo := now.Add(LeaseTTL(tick)).Truncate(time.Second)
		mu.Unlock()
		// a's renewer runs while its tick is stuck: the lease is renewed
		// from the new time on.
		waitUntil(t, "a renews its lease during its long tick", func() bool {
			l := a.lease.Load()
			return l != nil && !l.Expires.Before(renewedTo)
		})
		if b.HoldsLease() || !a.HoldsLease() {
			t.Fatalf("during a's long tick: a holds %v, b holds %v; want a alone", a.HoldsLease(), b.HoldsLease())
		}
	}
	close(p.release)
	waitUntil(t, "a records the refund", func() bool { return f.settlement(r.ID).RefundDone })
	stopA()
	stopB()
	if logs["a"].has(store.ErrLeaseLost) || logs["b"].has(store.ErrLeaseLost) {
		t.Fatal("a write was refused though the lease never changed hands")
	}
	f.requireReconciled()
}
