package main

import (
	"crypto/rand"
	"encoding/hex"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/store/pgtest"
)

// TestReplicasAnswer503WhenPostgresStops: two real replicas on a
// PostgreSQL server of their own, which is then stopped. Each replica's
// /healthz turns 503 "database":"unreachable" within seconds (a load
// balancer takes it out), and its pages and API answer 503 with
// Retry-After and the plain "cannot reach its database" message — not 500,
// and not a hang — and every replica still stops cleanly.
func TestReplicasAnswer503WhenPostgresStops(t *testing.T) {
	bin := buildServerBinary(t)
	dsn, stopPG, err := pgtest.Start()
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			stopPG()
		}
	})
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	fleet := &replicaFleet{bin: bin, dsn: dsn, sessionKey: hex.EncodeToString(key), names: []string{"replica-a", "replica-b"}}
	fleet.start(t, 0)
	get := func(r *replicaProc, path string) (int, string, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", r.url+path, nil)
		req.Header.Set("Authorization", "Bearer gpm_0000000000000000000000000000000000000000")
		resp, err := r.http.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", r.name, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Retry-After"), string(b)
	}
	for _, r := range fleet.reps {
		if status, _, body := get(r, "/"); status != http.StatusOK {
			t.Fatalf("%s catalogue before the stop: %d\n%s", r.name, status, body)
		}
	}

	if err := stopPG(); err != nil {
		t.Fatal(err)
	}
	stopped = true
	for _, r := range fleet.reps {
		began := time.Now()
		waitFor(t, 10*time.Second, r.name+" /healthz answers 503", func() bool {
			status, _, body := get(r, "/healthz")
			return status == http.StatusServiceUnavailable && strings.Contains(body, `"database":"unreachable"`)
		})
		t.Logf("%s: /healthz 503 %s after the stop", r.name, time.Since(began).Round(time.Millisecond))
		for _, path := range []string{"/", "/api/v1/ping"} {
			began := time.Now()
			status, retry, body := get(r, path)
			if status != http.StatusServiceUnavailable || retry != "5" || !strings.Contains(body, "cannot reach its database") {
				t.Errorf("%s %s with PostgreSQL stopped: %d, Retry-After %q\n%s", r.name, path, status, retry, body)
			}
			if took := time.Since(began); took > 10*time.Second {
				t.Errorf("%s %s answered after %s", r.name, path, took)
			}
		}
	}
	fleet.stop(t)
}
