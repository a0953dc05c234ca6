package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// agentArgs are the flags of a simulated agent reporting to srv, with its
// state and authorized_keys in dir.
func agentArgs(srv *fakeServer, dir string, extra ...string) []string {
	return append([]string{"-server", srv.URL, "-state", filepath.Join(dir, "state.json"),
		"-simulate", "H100 80GB SXM x8", "-host", "203.0.113.7", "-port", "2222", "-ssh-user", "gpu",
		"-authorized-keys", filepath.Join(dir, "authorized_keys")}, extra...)
}

var tokenEnvOnly = env(map[string]string{tokenEnv: testToken})

// newTestAgent builds the agent run() would, on a fake clock whose sleeps
// move it at once. stop is asked after each sleep whether to end the run.
func newTestAgent(t *testing.T, args []string, clock *fakeClock, stop func() bool) (*agent, context.Context) {
	t.Helper()
	log := testLog(t)
	cfg, err := parseConfig(args, tokenEnvOnly, io.Discard, io.Discard, log)
	if err != nil {
		t.Fatalf("flags: %v", err)
	}
	a, err := newAgent(cfg, log, clock.Now)
	if err != nil {
		t.Fatalf("agent: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	a.sleep = func(ctx context.Context, d time.Duration) bool {
		// Acceptance tests run in the background; the fake clock waits for
		// them so that what they report is not a race with the clock.
		a.tests.Wait()
		clock.advance(d)
		if stop() {
			cancel()
		}
		return ctx.Err() == nil
	}
	return a, ctx
}

// TestRentalEndToEnd runs a simulated agent through a rental: heartbeats
// with seq increasing by one, the buyer's key in authorized_keys from the
// start, "installed" with the flags' connection, the acceptance figure,
// the key gone at the end with the file as it was, "removed".
func TestRentalEndToEnd(t *testing.T) {
	dir := t.TempDir()
	keysPath := filepath.Join(dir, "authorized_keys")
	const provider = providerKey + "\n"
	if err := os.WriteFile(keysPath, []byte(provider), 0o600); err != nil {
		t.Fatal(err)
	}
	clock := &fakeClock{t: t0}
	srv := newFakeServer(t, clock.Now)
	srv.pieces = []assignment{{ReservationID: 12, PieceID: 31, Devices: 8, Start: t0.Add(30 * time.Second),
		End: t0.Add(70 * time.Second), SSHKeys: []string{buyerKey}, Acceptance: true}}

	// What authorized_keys holds after the heartbeat at each time (the
	// clock has moved on by the interval when the agent sleeps).
	snapshots := map[time.Duration]string{}
	a, ctx := newTestAgent(t, agentArgs(srv, dir), clock, func() bool {
		b, _ := os.ReadFile(keysPath)
		snapshots[clock.Now().Sub(t0)-10*time.Second] = string(b)
		return clock.Now().Sub(t0) > 100*time.Second
	})
	if err := a.run(ctx); err != nil {
		t.Fatalf("run: %v", err)
	}

	hbs := srv.accepted()
	if len(hbs) != 11 { // at 0, 10, …, 100 s
		t.Fatalf("%d heartbeats, want 11", len(hbs))
	}
	for i, hb := range hbs {
		if i > 0 && hb.Seq != hbs[i-1].Seq+1 {
			t.Errorf("heartbeat %d: seq %d after %d", i, hb.Seq, hbs[i-1].Seq)
		}
		if hb.Probe != "simulate" || hb.AgentVersion != agentVersion || len(hb.Devices) != 8 || hb.Error != "" {
			t.Errorf("heartbeat %d: %+v", i, hb)
		}
		if want := t0.Add(time.Duration(i) * 10 * time.Second); !hb.SentAt.Equal(want) {
			t.Errorf("heartbeat %d sent at %s, want %s", i, hb.SentAt, want)
		}
	}
	if hbs[0].Seq != t0.UnixMilli()+1 {
		t.Errorf("a new state's first seq is %d, want the start time in ms + 1 = %d", hbs[0].Seq, t0.UnixMilli()+1)
	}
	block := "# gpumarket piece 31 begin\n" + buyerKey + "\n# gpumarket piece 31 end\n"
	for at, want := range map[time.Duration]string{
		20 * time.Second:  provider,         // before the start
		30 * time.Second:  provider + block, // from the start
		60 * time.Second:  provider + block,
		70 * time.Second:  provider, // the end: removed
		100 * time.Second: provider,
	} {
		if got := snapshots[at]; got != want {
			t.Errorf("authorized_keys at %s:\n%q\nwant\n%q", at, got, want)
		}
	}
	inst := srv.installed[31]
	if len(inst) == 0 {
		t.Fatal("no installed report")
	}
	want := installedReport{Connection: connection{Host: "203.0.113.7", Port: 2222, User: "gpu"}, InstalledAt: t0.Add(30 * time.Second)}
	for _, r := range inst {
		if r.Connection != want.Connection || !r.InstalledAt.Equal(want.InstalledAt) {
			t.Errorf("installed %+v, want %+v", r, want)
		}
	}
	// The server asks to install while the piece runs (30, 40, 50, 60 s),
	// and the agent reports each time it is asked.
	if len(inst) != 4 {
		t.Errorf("%d installed reports, want one per heartbeat asking (4)", len(inst))
	}
	acc := srv.acceptance[31]
	if len(acc) != 1 {
		t.Fatalf("acceptance reports %+v, want 1", acc)
	}
	// The simulated figure is the catalogue's BF16 figure for the H100 SXM, 989 TFLOPS.
	if acc[0].Metric != "bf16_tflops" || !slices.Equal(acc[0].PerDevice, []float64{989, 989, 989, 989, 989, 989, 989, 989}) || acc[0].Error != "" {
		t.Errorf("acceptance %+v", acc[0])
	}
	rem := srv.removed[31]
	if len(rem) != 1 || !rem[0].RemovedAt.Equal(t0.Add(70*time.Second)) {
		t.Errorf("removed %+v, want one at the end", rem)
	}
	// Done and confirmed, the piece leaves the state; the seq stays.
	st, err := loadState(filepath.Join(dir, "state.json"), clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	if st.st.Seq != hbs[len(hbs)-1].Seq || len(st.st.Pieces) != 0 {
		t.Errorf("state after the rental: seq %d (last sent %d), pieces %+v", st.st.Seq, hbs[len(hbs)-1].Seq, st.st.Pieces)
	}
}

// TestRestartKeepsSeqAndDoesNotReinstall restarts the agent in the middle
// of a rental: the seq goes on from the state file, the install hook does
// not run again, and "installed" is reported again since the server asks.
func TestRestartKeepsSeqAndDoesNotReinstall(t *testing.T) {
	dir := t.TempDir()
	hook, calls := countingHook(t, dir)
	clock := &fakeClock{t: t0}
	srv := newFakeServer(t, clock.Now)
	srv.pieces = []assignment{{ReservationID: 12, PieceID: 31, Devices: 8, Start: t0.Add(-time.Minute),
		End: t0.Add(time.Hour), SSHKeys: []string{buyerKey}}}
	args := agentArgs(srv, dir, "-install-hook", hook+" install", "-remove-hook", hook+" remove")

	for range 2 {
		n := 0
		a, ctx := newTestAgent(t, args, clock, func() bool { n++; return n == 3 })
		if err := a.run(ctx); err != nil {
			t.Fatal(err)
		}
	}
	hbs := srv.accepted()
	if len(hbs) != 6 {
		t.Fatalf("%d heartbeats accepted over two runs, want 6 (seqs %v)", len(hbs), srv.seqs)
	}
	for i := 1; i < len(hbs); i++ {
		if hbs[i].Seq != hbs[i-1].Seq+1 {
			t.Errorf("seq %d after %d across the restart", hbs[i].Seq, hbs[i-1].Seq)
		}
	}
	if got := calls(); !slices.Equal(got, []string{"install 31"}) {
		t.Errorf("hook calls %v, want one install", got)
	}
	if len(srv.installed[31]) != 6 {
		t.Errorf("%d installed reports, want one per heartbeat asking (6)", len(srv.installed[31]))
	}
}

// countingHook is a hook script that records each call in a file, and a
// function reading the calls back.
func countingHook(t *testing.T, dir string) (string, func() []string) {
	t.Helper()
	log := filepath.Join(dir, "hook.log")
	script := filepath.Join(dir, "hook.sh")
	body := "#!/bin/sh\necho \"$1 $GPUMARKET_PIECE_ID\" >> " + log + "\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	return script, func() []string {
		b, _ := os.ReadFile(log)
		return strings.Split(strings.TrimSpace(string(b)), "\n")
	}
}

// TestHeartbeatRetriedWithBackoff: while the server answers 503 (or cannot
// be reached), heartbeats are retried after 1, 2, 4 … s, up to 60 s, each
// with a new seq; a success brings back the interval.
func TestHeartbeatRetriedWithBackoff(t *testing.T) {
	dir := t.TempDir()
	clock := &fakeClock{t: t0}
	srv := newFakeServer(t, clock.Now)
	srv.fail = slices.Repeat([]int{http.StatusServiceUnavailable}, 8)
	a, ctx := newTestAgent(t, agentArgs(srv, dir, "-interval", "10s"), clock, func() bool { return len(srv.accepted()) == 2 })
	if err := a.run(ctx); err != nil {
		t.Fatal(err)
	}
	s := time.Second
	want := []time.Duration{1 * s, 2 * s, 4 * s, 8 * s, 16 * s, 32 * s, 60 * s, 60 * s, 10 * s, 10 * s}
	if got := clock.sleeps(); !slices.Equal(got, want) {
		t.Errorf("waits %v, want %v", got, want)
	}
	if len(srv.seqs) != 10 {
		t.Fatalf("%d heartbeats sent, want 10", len(srv.seqs))
	}
	for i := 1; i < len(srv.seqs); i++ {
		if srv.seqs[i] != srv.seqs[i-1]+1 {
			t.Errorf("retry %d has seq %d after %d", i, srv.seqs[i], srv.seqs[i-1])
		}
	}
}

// TestHeartbeatRefusedWaitsRetryAfterWithJitter: a 429 with Retry-After
// (the server's writer is behind) is sent again after the wait it names
// plus a random share of it, not on the backoff, which a later failure
// starts from its beginning.
func TestHeartbeatRefusedWaitsRetryAfterWithJitter(t *testing.T) {
	dir := t.TempDir()
	clock := &fakeClock{t: t0}
	srv := newFakeServer(t, clock.Now)
	srv.fail = []int{http.StatusTooManyRequests, http.StatusTooManyRequests, http.StatusServiceUnavailable}
	srv.retryAfter = "5"
	a, ctx := newTestAgent(t, agentArgs(srv, dir, "-interval", "10s"), clock, func() bool { return len(srv.accepted()) == 2 })
	var asked []time.Duration
	a.jitter = func(d time.Duration) time.Duration { asked = append(asked, d); return d * 3 / 10 }
	if err := a.run(ctx); err != nil {
		t.Fatal(err)
	}
	s := time.Second
	if got, want := clock.sleeps(), []time.Duration{6500 * time.Millisecond, 6500 * time.Millisecond, 1 * s, 10 * s, 10 * s}; !slices.Equal(got, want) {
		t.Errorf("waits %v, want %v", got, want)
	}
	if want := []time.Duration{5 * s, 5 * s}; !slices.Equal(asked, want) {
		t.Errorf("jitter asked for %v, want %v", asked, want)
	}
}

// TestServerDownThenUp: a server that cannot be reached at all is retried
// the same way.
func TestServerDownThenUp(t *testing.T) {
	dir := t.TempDir()
	clock := &fakeClock{t: t0}
	srv := newFakeServer(t, clock.Now)
	good := srv.URL
	srv.URL = "http://127.0.0.1:1" // nothing listens there
	a, ctx := newTestAgent(t, agentArgs(srv, dir), clock, func() bool { return len(srv.accepted()) == 1 })
	n := 0
	inner := a.sleep
	a.sleep = func(ctx context.Context, d time.Duration) bool {
		if n++; n == 3 {
			u, _ := checkServerURL(good)
			a.client.base = u
		}
		return inner(ctx, d)
	}
	if err := a.run(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := clock.sleeps(), []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 10 * time.Second}; !slices.Equal(got, want) {
		t.Errorf("waits %v, want %v", got, want)
	}
}

func TestBackoffDoublesToItsMaximumAndStartsOver(t *testing.T) {
	b := backoff{min: time.Second, max: time.Minute}
	var got []time.Duration
	for range 9 {
		got = append(got, b.wait())
	}
	s := time.Second
	if want := []time.Duration{1 * s, 2 * s, 4 * s, 8 * s, 16 * s, 32 * s, 60 * s, 60 * s, 60 * s}; !slices.Equal(got, want) {
		t.Errorf("waits %v, want %v", got, want)
	}
	b.reset()
	if d := b.wait(); d != time.Second {
		t.Errorf("after a success the wait is %s, want 1s", d)
	}
}

// TestUnauthorizedStops: a refused token ends run with a clear error (main
// exits non-zero) after one heartbeat, without retrying.
func TestUnauthorizedStops(t *testing.T) {
	dir := t.TempDir()
	srv := newFakeServer(t, time.Now)
	srv.token = "gph_" + strings.Repeat("z", 43) // not the agent's
	var stdout, stderr bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- run(context.Background(), agentArgs(srv, dir), tokenEnvOnly, &stdout, &stderr) }()
	select {
	case err := <-done:
		if !errors.Is(err, errUnauthorized) {
			t.Fatalf("run: %v, want the refused token", err)
		}
		for _, want := range []string{"refused the host token", "/provider/hosts", "revoked or unknown"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not say %q", err, want)
			}
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run kept going after a 401")
	}
	if len(srv.seqs) != 0 {
		t.Errorf("the server recorded heartbeats of a refused token: %v", srv.seqs)
	}
}

// TestStopsCleanlyWithStateSaved: cancelling run's context (what SIGTERM
// and SIGINT do) while a heartbeat is under way lets that call finish, then
// run returns nil with the state saved.
func TestStopsCleanlyWithStateSaved(t *testing.T) {
	dir := t.TempDir()
	srv := newFakeServer(t, time.Now)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	calls := 0
	finished := make(chan error, 1)
	srv.hold = func(r *http.Request) {
		mu.Lock()
		calls++
		n := calls
		mu.Unlock()
		if n == 3 {
			cancel() // the signal arrives while the third heartbeat is under way
			time.Sleep(50 * time.Millisecond)
			finished <- r.Context().Err() // still connected: the agent waited for the answer
		}
	}
	var stdout, stderr bytes.Buffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, agentArgs(srv, dir, "-interval", "20ms"), tokenEnvOnly, &stdout, &stderr)
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v\n%s", err, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not stop after its context ended")
	}
	if err := <-finished; err != nil {
		t.Errorf("the heartbeat under way was abandoned: %v", err)
	}
	hbs := srv.accepted()
	if len(hbs) != 3 {
		t.Fatalf("%d heartbeats, want 3", len(hbs))
	}
	st, err := loadState(filepath.Join(dir, "state.json"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if st.st.Seq != hbs[2].Seq {
		t.Errorf("state seq %d, want the last heartbeat's %d", st.st.Seq, hbs[2].Seq)
	}
	if !strings.Contains(stdout.String(), "stopped") {
		t.Errorf("stdout %q does not say it stopped", stdout.String())
	}
}

// TestFlags checks what run refuses before it sends anything.
func TestFlags(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(testToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := []string{"-state", filepath.Join(dir, "s.json"), "-host", "h.example", "-ssh-user", "gpu",
		"-authorized-keys", filepath.Join(dir, "ak")}
	readableToken := filepath.Join(dir, "token-644")
	if err := os.WriteFile(readableToken, []byte(testToken+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// -rental-users needs root before anything else it checks.
	rentalUsersRefusal, rentalUsersTokenRefusal, rentalUsersDirRefusal := "neither -install-hook", "needs root", "needs root"
	if os.Geteuid() == 0 {
		rentalUsersTokenRefusal, rentalUsersDirRefusal = "chmod 600", "absolute"
	}
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want string // in the error; "" for no error
	}{
		{"no server", base, map[string]string{tokenEnv: testToken}, "-server is required"},
		{"plain http elsewhere", append([]string{"-server", "http://gpumarket.example"}, base...), map[string]string{tokenEnv: testToken}, "use https://"},
		{"no token", append([]string{"-server", "https://m.example"}, base...), nil, "no host token"},
		{"bad token", append([]string{"-server", "https://m.example"}, base...), map[string]string{tokenEnv: "gpm_notahosttoken"}, "not one the hosts page gives"},
		{"token file", append([]string{"-server", "https://m.example", "-token-file", tokenFile, "-simulate", "H100 80GB SXM x8"}, base...), nil, ""},
		{"missing token file", append([]string{"-server", "https://m.example", "-token-file", filepath.Join(dir, "nope")}, base...), nil, "-token-file"},
		{"no host", []string{"-server", "https://m.example", "-ssh-user", "gpu"}, map[string]string{tokenEnv: testToken}, "-host is required"},
		{"no user", []string{"-server", "https://m.example", "-host", "h.example"}, map[string]string{tokenEnv: testToken}, "-ssh-user is required"},
		{"bad user", []string{"-server", "https://m.example", "-host", "h.example", "-ssh-user", "Root;rm"}, map[string]string{tokenEnv: testToken}, "not a user name"},
		{"bad port", append([]string{"-server", "https://m.example", "-port", "0"}, base...), map[string]string{tokenEnv: testToken}, "-port"},
		{"unknown model", append([]string{"-server", "https://m.example", "-simulate", "H900 x8"}, base...), map[string]string{tokenEnv: testToken}, "not a catalogue model"},
		{"simulate needs spec", append([]string{"-server", "https://m.example", "-probe", "simulate"}, base...), map[string]string{tokenEnv: testToken}, "needs -simulate"},
		{"fault without simulation", append([]string{"-server", "https://m.example", "-fault", "slow=0.5"}, base...), map[string]string{tokenEnv: testToken}, "for -probe simulate"},
		{"bad fault", append([]string{"-server", "https://m.example", "-simulate", "H100 80GB SXM x8", "-fault", "explode@3s"}, base...), map[string]string{tokenEnv: testToken}, "unknown fault"},
		{"unknown probe", append([]string{"-server", "https://m.example", "-probe", "lspci"}, base...), map[string]string{tokenEnv: testToken}, "want nvidia-smi, rocm-smi or simulate"},
		{"one hook only", append([]string{"-server", "https://m.example", "-install-hook", "/bin/true"}, base...), map[string]string{tokenEnv: testToken}, "go together"},
		{"hook not found", append([]string{"-server", "https://m.example", "-install-hook", "/nonexistent/hook", "-remove-hook", "/bin/true"}, base...), map[string]string{tokenEnv: testToken}, "-install-hook"},
		{"bad interval", append([]string{"-server", "https://m.example", "-interval", "0s"}, base...), map[string]string{tokenEnv: testToken}, "-interval must be positive"},
		{"rental users with ssh user", append([]string{"-server", "https://m.example", "-rental-users"}, base...), map[string]string{tokenEnv: testToken}, "do not go together"},
		{"rental users with a hook", []string{"-server", "https://m.example", "-host", "h.example", "-rental-users", "-install-hook", "/bin/true", "-remove-hook", "/bin/true"}, map[string]string{tokenEnv: testToken}, rentalUsersRefusal},
		{"rental users, readable token", []string{"-server", "https://m.example", "-host", "h.example", "-rental-users", "-token-file", readableToken}, nil, rentalUsersTokenRefusal},
		{"rental users, relative keys dir", []string{"-server", "https://m.example", "-host", "h.example", "-rental-users", "-keys-dir", "keys"}, map[string]string{tokenEnv: testToken}, rentalUsersDirRefusal},
		{"stray argument", append(append([]string{"-server", "https://m.example"}, base...), "serve"), map[string]string{tokenEnv: testToken}, "unexpected argument"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseConfig(tc.args, env(tc.env), io.Discard, io.Discard, testLog(t))
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			}
		})
	}
}

func TestVersion(t *testing.T) {
	var stdout bytes.Buffer
	if err := run(context.Background(), []string{"-version"}, env(nil), &stdout, io.Discard); err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(stdout.String()) != agentVersion {
		t.Errorf("-version printed %q", stdout.String())
	}
}

// TestKeysRemovedAtTheEndWhileTheServerIsDown: the server's clock is 75 h
// ahead of the host's (a test server's -clock-offset, or a host with a
// wrong clock); the agent follows the server's clock. The server goes down
// during the rental: at its end by that clock the keys go anyway, and
// "removed" with that time is reported once the server is back and asks.
func TestKeysRemovedAtTheEndWhileTheServerIsDown(t *testing.T) {
	dir := t.TempDir()
	keysPath := filepath.Join(dir, "authorized_keys")
	clock := &fakeClock{t: t0}
	ahead := 75 * time.Hour
	srv := newFakeServer(t, func() time.Time { return clock.Now().Add(ahead) })
	start := t0.Add(ahead)
	srv.pieces = []assignment{{ReservationID: 12, PieceID: 31, Devices: 8, Start: start, End: start.Add(time.Minute),
		SSHKeys: []string{buyerKey}}}
	var removedWhileDown string
	a, ctx := newTestAgent(t, agentArgs(srv, dir), clock, func() bool {
		now := clock.Now().Sub(t0)
		srv.mu.Lock()
		defer srv.mu.Unlock()
		switch {
		case now == 20*time.Second: // down from the third heartbeat
			srv.fail = slices.Repeat([]int{http.StatusBadGateway}, 1000)
		case now >= 2*time.Minute && len(srv.fail) > 0: // back
			b, _ := os.ReadFile(keysPath)
			removedWhileDown = string(b)
			srv.fail = nil
		}
		return now >= 3*time.Minute
	})
	if err := a.run(ctx); err != nil {
		t.Fatal(err)
	}
	inst := srv.installed[31]
	if len(inst) != 2 || !inst[0].InstalledAt.Equal(start) {
		t.Errorf("installed %+v, want two reports at the start by the server's clock", inst)
	}
	if removedWhileDown != "" {
		t.Errorf("authorized_keys while the server was down, after the end: %q", removedWhileDown)
	}
	// Retries at 21, 23, 27, 35 and 51 s; the next would be at 83 s, past
	// the end at 60 s: the agent wakes at the end to remove the keys.
	s := time.Second
	if got, want := clock.sleeps()[:8], []time.Duration{10 * s, 10 * s, 1 * s, 2 * s, 4 * s, 8 * s, 16 * s, 9 * s}; !slices.Equal(got, want) {
		t.Errorf("waits %v, want %v", got, want)
	}
	rem := srv.removed[31]
	if len(rem) != 1 || !rem[0].RemovedAt.Equal(start.Add(time.Minute)) {
		t.Errorf("removed %+v, want one at the end", rem)
	}
}

// TestCancelledRentalRemovesKeys: the server asks for removal before the
// end (the rental was cancelled); the keys go and are not put back.
func TestCancelledRentalRemovesKeys(t *testing.T) {
	dir := t.TempDir()
	keysPath := filepath.Join(dir, "authorized_keys")
	clock := &fakeClock{t: t0}
	srv := newFakeServer(t, clock.Now)
	srv.pieces = []assignment{{ReservationID: 12, PieceID: 31, Devices: 8, Start: t0, End: t0.Add(time.Hour),
		SSHKeys: []string{buyerKey}}}
	a, ctx := newTestAgent(t, agentArgs(srv, dir), clock, func() bool {
		if clock.Now().Sub(t0) == 20*time.Second {
			srv.mu.Lock()
			srv.pieces[0].End = t0.Add(20 * time.Second) // cancelled: the piece stops now
			srv.mu.Unlock()
		}
		return clock.Now().Sub(t0) >= time.Minute
	})
	if err := a.run(ctx); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(keysPath); err != nil || string(b) != "" {
		t.Errorf("authorized_keys after the cancellation: %q, %v", b, err)
	}
	if len(srv.installed[31]) != 2 || len(srv.removed[31]) != 1 || !srv.removed[31][0].RemovedAt.Equal(t0.Add(20*time.Second)) {
		t.Errorf("installed %+v, removed %+v", srv.installed[31], srv.removed[31])
	}
}

// TestSimulatedFaultsThroughHeartbeats runs the agent with faults: the
// device drop shows in the heartbeats from its time, heartbeats stop at
// theirs while the agent keeps running, and slow scales the acceptance
// figure.
func TestSimulatedFaultsThroughHeartbeats(t *testing.T) {
	dir := t.TempDir()
	clock := &fakeClock{t: t0}
	srv := newFakeServer(t, clock.Now)
	srv.pieces = []assignment{{ReservationID: 12, PieceID: 31, Devices: 8, Start: t0, End: t0.Add(time.Hour),
		SSHKeys: []string{buyerKey}, Acceptance: true}}
	a, ctx := newTestAgent(t, agentArgs(srv, dir, "-fault", "slow=0.5,drop-device=3@30s,stop-heartbeats@60s"), clock,
		func() bool { return clock.Now().Sub(t0) >= 2*time.Minute })
	if err := a.run(ctx); err != nil {
		t.Fatal(err)
	}
	var counts []int
	for _, hb := range srv.accepted() {
		counts = append(counts, len(hb.Devices))
	}
	if want := []int{8, 8, 8, 7, 7, 7}; !slices.Equal(counts, want) { // at 0, 10, … 50 s, then nothing
		t.Errorf("devices per heartbeat %v, want %v", counts, want)
	}
	if got := len(clock.sleeps()); got != 12 {
		t.Errorf("%d waits over two minutes, want 12: the agent keeps running without heartbeats", got)
	}
	acc := srv.acceptance[31]
	if len(acc) != 1 || !slices.Equal(acc[0].PerDevice, []float64{494.5, 494.5, 494.5, 494.5, 494.5, 494.5, 494.5, 494.5}) {
		t.Errorf("acceptance %+v, want 989 × 0.5 per device", acc)
	}
}

// TestAcceptanceRunsOncePerPiece: once a result is in the state file, a
// server that asks again gets the same result; the benchmark does not run
// again, even after a restart.
func TestAcceptanceRunsOncePerPiece(t *testing.T) {
	dir := t.TempDir()
	bench := filepath.Join(dir, "bench.sh")
	runs := filepath.Join(dir, "runs")
	if err := os.WriteFile(bench, []byte("#!/bin/sh\necho run >> "+runs+"\necho '{\"per_device\": [900, 901]}'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	clock := &fakeClock{t: t0}
	srv := newFakeServer(t, clock.Now)
	srv.pieces = []assignment{{ReservationID: 12, PieceID: 31, Devices: 2, Start: t0, End: t0.Add(time.Hour),
		SSHKeys: []string{buyerKey}, Acceptance: true}}
	args := agentArgs(srv, dir, "-acceptance-cmd", bench)
	for range 2 {
		n := 0
		a, ctx := newTestAgent(t, args, clock, func() bool { n++; return n == 2 })
		if err := a.run(ctx); err != nil {
			t.Fatal(err)
		}
		srv.mu.Lock()
		srv.acceptance = map[int64][]acceptanceReport{} // the server forgets: it asks again
		srv.mu.Unlock()
	}
	if b, _ := os.ReadFile(runs); string(b) != "run\n" {
		t.Errorf("the benchmark ran %d times, want once", strings.Count(string(b), "run"))
	}
}
