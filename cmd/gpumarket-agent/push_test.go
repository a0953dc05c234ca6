package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestPushInstallsAndRemovesAtOnce: against a server holding the
// long-poll, with the default 10 s interval on the wall clock, a rental
// paid after the agent's heartbeat has the buyer's key installed and
// reported well before the next heartbeat, reported once (the server then
// says it has the report), and its cancellation removes the key as fast.
func TestPushInstallsAndRemovesAtOnce(t *testing.T) {
	dir := t.TempDir()
	keysPath := filepath.Join(dir, "authorized_keys")
	srv := newFakeServer(t, func() time.Time { return time.Now().UTC() })
	srv.push, srv.longPoll = true, true
	log := testLog(t)
	cfg, err := parseConfig(agentArgs(srv, dir), tokenEnvOnly, io.Discard, io.Discard, log)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.interval != 10*time.Second {
		t.Fatalf("default interval %s, want 10s", cfg.interval)
	}
	a, err := newAgent(cfg, log, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	waitFor(t, 5*time.Second, "the first heartbeat", func() bool { return len(srv.accepted()) == 1 })
	waitFor(t, 5*time.Second, "the long-poll", func() bool { srv.mu.Lock(); defer srv.mu.Unlock(); return srv.polls > 0 })

	paid := time.Now()
	srv.change(func() {
		srv.pieces = []assignment{{ReservationID: 12, PieceID: 31, Devices: 8, Start: paid.UTC().Add(-time.Second),
			End: paid.UTC().Add(time.Hour), SSHKeys: []string{buyerKey}}}
	})
	waitFor(t, 5*time.Second, "the installed report", func() bool { srv.mu.Lock(); defer srv.mu.Unlock(); return len(srv.installed[31]) > 0 })
	if took := time.Since(paid); took > 2*time.Second {
		t.Errorf("keys installed %s after the payment, want well under the 10 s interval", took)
	}
	if b, _ := os.ReadFile(keysPath); !strings.Contains(string(b), buyerKey) {
		t.Errorf("authorized_keys: %q", b)
	}
	if n := len(srv.accepted()); n != 1 {
		t.Errorf("%d heartbeats by the installation, want only the first", n)
	}

	stopped := time.Now()
	srv.change(func() { srv.pieces[0].End = stopped.UTC() })
	waitFor(t, 5*time.Second, "the removed report", func() bool { srv.mu.Lock(); defer srv.mu.Unlock(); return len(srv.removed[31]) > 0 })
	if took := time.Since(stopped); took > 2*time.Second {
		t.Errorf("keys removed %s after the cancellation", took)
	}
	if b, _ := os.ReadFile(keysPath); strings.Contains(string(b), buyerKey) {
		t.Errorf("authorized_keys after the cancellation: %q", b)
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if len(srv.installed[31]) != 1 {
		t.Errorf("installed reported %d times, want once: the server says it has it", len(srv.installed[31]))
	}
}

// TestPushRefusedFallsBackToHeartbeats: a server that advertises the
// long-poll but answers it 404 (a proxy in front of it, or a replica not
// yet upgraded) still gets its keys installed, at the first heartbeat after
// the start, and the agent does not ask again on every heartbeat.
func TestPushRefusedFallsBackToHeartbeats(t *testing.T) {
	dir := t.TempDir()
	clock := &fakeClock{t: t0}
	srv := newFakeServer(t, clock.Now)
	srv.push = true // advertised, but no route
	srv.pieces = []assignment{{ReservationID: 12, PieceID: 31, Devices: 8, Start: t0.Add(25 * time.Second), End: t0.Add(time.Hour),
		SSHKeys: []string{buyerKey}}}
	a, ctx := newTestAgent(t, agentArgs(srv, dir), clock, func() bool { return clock.Now().Sub(t0) >= time.Minute })
	if err := a.run(ctx); err != nil {
		t.Fatal(err)
	}
	if got := srv.installed[31]; len(got) == 0 || !got[0].InstalledAt.Equal(t0.Add(30*time.Second)) {
		t.Fatalf("installed %+v, want at the heartbeat at 30 s", got)
	}
	if n := len(srv.accepted()); n != 6 {
		t.Errorf("%d heartbeats in a minute, want 6 (every 10 s, from 0 to 50 s)", n)
	}
	if !a.pushOffUntil.Equal(t0.Add(pushRetry)) {
		t.Errorf("long-poll retried from %s, want %s", a.pushOffUntil, t0.Add(pushRetry))
	}
}

func waitFor(t *testing.T, limit time.Duration, what string, ok func() bool) {
	t.Helper()
	for end := time.Now().Add(limit); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if ok() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}
