package workflow

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"
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
	if ok, err := f.db.TakeLease(f.ctx, BackgroundLease, "dead", clock(), LeaseTTL(tick)); err != nil || !ok {
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
