package main

import (
	"context"
	"database/sql"
	"encoding/hex"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/store"
	"github.com/gpumarket/gpumarket/store/pgtest"
)

// TestHealthzWaitsForTheChangeFeed runs `serve` on PostgreSQL: /healthz is
// 200 once the change feed has joined; when the feed's connection is cut
// (as a PostgreSQL restart cuts it) /healthz answers 503 naming the feed,
// and the metrics say it is down, until the feed has reconnected and the
// index has been reloaded — then 200 again, with the lag gauge at 0. A
// feed whose server process goes silent, its connection open, is found
// out by its ping and reported down too.
func TestHealthzWaitsForTheChangeFeed(t *testing.T) {
	dsn := pgtest.Database(t)
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut lockedBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"serve", "-addr", "127.0.0.1:0", "-metrics-addr", "127.0.0.1:0", "-db", dsn,
			"-session-key", hex.EncodeToString([]byte(strings.Repeat("k", 32)))}, env(nil), strings.NewReader(""), &out, &errOut)
	}()
	defer func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve: %v\n%s", err, errOut.String())
			}
		case <-time.After(20 * time.Second):
			t.Error("serve did not stop")
		}
	}()
	addrOf := func(prefix string) string {
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			for _, line := range strings.Split(out.String(), "\n") {
				if rest, ok := strings.CutPrefix(line, prefix); ok {
					return "http://" + strings.Fields(rest)[0]
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("no %q line:\n%s\n%s", prefix, out.String(), errOut.String())
			}
		}
	}
	private, public := addrOf("gpumarket metrics on "), addrOf("gpumarket listening on ")
	get := func(url string) (int, string) {
		t.Helper()
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	waitHealth := func(what string, want int, marker string, within time.Duration) time.Duration {
		t.Helper()
		began := time.Now()
		for {
			status, body := get(public + "/healthz")
			if status == want && strings.Contains(body, marker) {
				return time.Since(began)
			}
			if time.Since(began) > within {
				t.Fatalf("%s: /healthz %d %s, want %d with %s", what, status, body, want, marker)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitHealth("feed joined", http.StatusOK, `"feed":"ok"`, 10*time.Second)
	if _, body := get(private + "/metrics"); !strings.Contains(body, "gpumarket_change_feed_joined 1") || !strings.Contains(body, "gpumarket_change_feed_lag_seconds 0") {
		t.Fatalf("metrics of a joined feed lack the feed gauges:\n%s", body)
	}

	// Cut the feed's connection, as a PostgreSQL restart does.
	admin, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	feedBackend := func() int {
		t.Helper()
		var pid int
		if err := admin.QueryRow(`SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1`,
			store.FeedApplicationName).Scan(&pid); err != nil {
			t.Fatalf("the feed's connection: %v", err)
		}
		return pid
	}
	var cut bool
	if err := admin.QueryRow(`SELECT pg_terminate_backend($1)`, feedBackend()).Scan(&cut); err != nil || !cut {
		t.Fatalf("cut the feed: %v %v", cut, err)
	}
	waitHealth("feed cut", http.StatusServiceUnavailable, `"feed":"down"`, 2*time.Second)
	if _, body := get(private + "/metrics"); !strings.Contains(body, "gpumarket_change_feed_joined 0") {
		t.Errorf("metrics of a feed down do not say so")
	}
	took := waitHealth("feed back", http.StatusOK, `"feed":"ok"`, 15*time.Second)
	t.Logf("healthy again %v after the feed was seen down", took.Round(time.Millisecond))
	if !strings.Contains(errOut.String(), "change feed lost") {
		t.Errorf("the feed's loss was not logged:\n%s", errOut.String())
	}

	// Silence it with no word: the feed's server process stops (as a
	// frozen server or a network that drops everything would leave it),
	// its connection stays open. The feed finds it out by its ping, and
	// /healthz says so within seconds instead of "ok" for ever.
	waitHealth("feed back", http.StatusOK, `"feed":"ok"`, 15*time.Second)
	silent := feedBackend()
	if err := syscall.Kill(silent, syscall.SIGSTOP); err != nil {
		// A server of GPUMARKET_TEST_POSTGRES_URL's may be another user's or another machine's.
		t.Skipf("the feed's server process %d cannot be stopped from here (%v): the silent feed is not tested", silent, err)
	}
	defer syscall.Kill(silent, syscall.SIGCONT)
	took = waitHealth("feed silent", http.StatusServiceUnavailable, `"feed":"down"`, 10*time.Second)
	t.Logf("a silent feed seen down after %v", took.Round(time.Millisecond))
	syscall.Kill(silent, syscall.SIGCONT)
	took = waitHealth("feed back after the silence", http.StatusOK, `"feed":"ok"`, 15*time.Second)
	t.Logf("healthy again %v after the silent feed was seen down", took.Round(time.Millisecond))
}
