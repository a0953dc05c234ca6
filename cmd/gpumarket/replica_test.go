package main

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseTrustedProxies(t *testing.T) {
	nets, err := parseTrustedProxies(" 10.0.0.0/8, 192.0.2.7 ,2001:db8::1,fd00::/8,")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, n := range nets {
		got = append(got, n.String())
	}
	if want := "10.0.0.0/8 192.0.2.7/32 2001:db8::1/128 fd00::/8"; strings.Join(got, " ") != want {
		t.Fatalf("parsed %v, want %s", got, want)
	}
	if nets, err := parseTrustedProxies(""); err != nil || len(nets) != 0 {
		t.Fatalf("empty list: %v %v", nets, err)
	}
	for _, bad := range []string{"10.0.0.0/33", "10.0.0.300", "lb.internal", "10.0.0.0/8;10.1.0.0/16"} {
		if _, err := parseTrustedProxies(bad); err == nil || !strings.Contains(err.Error(), "-trusted-proxies") {
			t.Errorf("%q: %v, want an error naming the flag", bad, err)
		}
	}
}

func TestServeRefusesABadTrustedProxy(t *testing.T) {
	var out lockedBuffer
	err := run(context.Background(), []string{"serve", "-addr", "127.0.0.1:0", "-db", filepath.Join(t.TempDir(), "m.db"), "-trusted-proxies", "10.0.0.0/8,not-an-ip"},
		env(nil), strings.NewReader(""), &out, &out)
	if err == nil || !strings.Contains(err.Error(), `"not-an-ip"`) {
		t.Fatalf("serve with a bad trusted proxy: %v", err)
	}
}

// TestServeMetricsAndReplicaName: serve answers Prometheus and the
// runtime's profiles on the metrics address (and not on the public one),
// and every log line names the
// replica from GPUMARKET_REPLICA.
func TestServeMetricsAndReplicaName(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut lockedBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"serve", "-addr", "127.0.0.1:0", "-metrics-addr", "127.0.0.1:0", "-db", filepath.Join(t.TempDir(), "m.db")},
			env(map[string]string{"GPUMARKET_REPLICA": "replica-b"}), strings.NewReader(""), &out, &errOut)
	}()
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(out.String(), "listening"); {
		if time.Now().After(deadline) {
			t.Fatalf("serve never listened:\n%s", errOut.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	addrOf := func(prefix string) string {
		for _, line := range strings.Split(out.String(), "\n") {
			if rest, ok := strings.CutPrefix(line, prefix); ok {
				return strings.Fields(rest)[0]
			}
		}
		t.Fatalf("no %q line:\n%s", prefix, out.String())
		return ""
	}
	get := func(url string) (int, string) {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	public, private := "http://"+addrOf("gpumarket listening on "), "http://"+addrOf("gpumarket metrics on ")
	if status, _ := get(public + "/healthz"); status != http.StatusOK {
		t.Fatalf("healthz: %d", status)
	}
	if status, _ := get(public + "/metrics"); status != http.StatusNotFound {
		t.Errorf("metrics on the public address: %d, want 404", status)
	}
	// The runtime's profiles too, on the private address only.
	if status, _ := get(public + "/debug/pprof/"); status != http.StatusNotFound {
		t.Errorf("profiles on the public address: %d, want 404", status)
	}
	if status, body := get(private + "/debug/pprof/"); status != http.StatusOK || !strings.Contains(body, "goroutine") {
		t.Errorf("profiles on the metrics address: %d\n%.300s", status, body)
	}
	status, body := get(private + "/metrics")
	if status != http.StatusOK {
		t.Fatalf("metrics: %d\n%s", status, body)
	}
	for _, want := range []string{
		`gpumarket_http_request_duration_seconds_count{method="GET",route="/healthz",status="2xx"} 1`,
		"gpumarket_background_lease_held 1", "gpumarket_matcher_index_offers 0",
		`gpumarket_settlement_backlog{state="retrying"} 0`, "go_goroutines",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve: %v\n%s", err, errOut.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not stop after its context ended")
	}
	lines := strings.Split(strings.TrimSpace(errOut.String()), "\n")
	if len(lines) < 3 {
		t.Fatalf("too few log lines:\n%s", errOut.String())
	}
	for _, line := range lines {
		if !strings.Contains(line, " replica=replica-b") {
			t.Errorf("log line without the replica: %s", line)
		}
	}
}
