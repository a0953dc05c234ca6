package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestCheckServerURL(t *testing.T) {
	for _, tc := range []struct {
		url string
		ok  bool
	}{
		{"https://gpumarket.example", true},
		{"https://gpumarket.example/market/", true},
		{"http://127.0.0.1:8080", true},
		{"http://localhost:8080", true},
		{"http://[::1]:8080", true},
		{"http://gpumarket.example", false},
		{"http://10.0.0.5:8080", false},
		{"ftp://gpumarket.example", false},
		{"gpumarket.example", false},
		{"https://user:pass@gpumarket.example", false},
		{"https://gpumarket.example/?next=x", false},
		{"", false},
	} {
		_, err := checkServerURL(tc.url)
		if (err == nil) != tc.ok {
			t.Errorf("%q: %v, want ok=%v", tc.url, err, tc.ok)
		}
	}
}

// TestClientRequests: what the client sends (path under the server's base,
// token, JSON) and how it reads the answers.
func TestClientRequests(t *testing.T) {
	var got *http.Request
	var body map[string]any
	status, answer := http.StatusOK, `{"accepted": true, "interval_seconds": 10, "assignments": []}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r
		body = nil
		_ = json.NewDecoder(r.Body).Decode(&body)
		w.WriteHeader(status)
		_, _ = w.Write([]byte(answer))
	}))
	defer srv.Close()
	base, err := checkServerURL(srv.URL + "/market/")
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(base, testToken)
	ctx := context.Background()

	resp, err := c.heartbeat(ctx, heartbeatRequest{Seq: 42, Probe: "nvidia-smi"})
	if err != nil || !resp.Accepted || resp.IntervalSeconds != 10 {
		t.Fatalf("heartbeat: %+v, %v", resp, err)
	}
	if got.Method != http.MethodPost || got.URL.Path != "/market/agent/v1/heartbeat" ||
		got.Header.Get("Authorization") != "Bearer "+testToken || got.Header.Get("Content-Type") != "application/json" ||
		got.Header.Get("User-Agent") != "gpumarket-agent/"+agentVersion {
		t.Errorf("request %s %s %v", got.Method, got.URL.Path, got.Header)
	}
	if devices, ok := body["devices"].([]any); !ok || len(devices) != 0 || body["seq"] != 42.0 {
		t.Errorf("body %v: devices must be [] (not null) and seq 42", body)
	}
	for path, call := range map[string]func() error{
		"/market/agent/v1/assignments/31/installed": func() error {
			return c.installed(ctx, 31, installedReport{Connection: connection{Host: "h", Port: 22, User: "gpu"}})
		},
		"/market/agent/v1/assignments/31/removed":    func() error { return c.removed(ctx, 31, removedReport{}) },
		"/market/agent/v1/assignments/31/acceptance": func() error { return c.acceptance(ctx, 31, acceptanceReport{Metric: "bf16_tflops"}) },
	} {
		if err := call(); err != nil || got.URL.Path != path {
			t.Errorf("%s: %v (sent to %s)", path, err, got.URL.Path)
		}
	}
	if err := c.installed(ctx, 31, installedReport{Connection: connection{Host: "h", Port: 22, User: "gpu"}}); err != nil ||
		body["host"] != "h" || body["port"] != 22.0 || body["user"] != "gpu" || body["installed_at"] == nil {
		t.Errorf("installed body %v, %v", body, err)
	}
	if err := c.acceptance(ctx, 31, acceptanceReport{Metric: "bf16_tflops"}); err != nil || body["per_device"] == nil {
		t.Errorf("acceptance body %v: per_device must be [] (not null)", body)
	}

	for _, tc := range []struct {
		status       int
		answer       string
		unauthorized bool
		msg          string
	}{
		{401, `{"error": {"code": "unauthorized", "message": "This host token was revoked."}}`, true, "This host token was revoked."},
		{403, `{"error": {"code": "forbidden", "message": "Your account is suspended."}}`, true, "suspended"},
		{503, "upstream down\n", false, "503 Service Unavailable: upstream down"},
		{429, `{"error": {"code": "invalid", "message": "Too many requests."}}`, false, "429 Too Many Requests: Too many requests."},
		{502, "<html>Bad gateway</html>", false, "502 Bad Gateway"},
		{200, "not json", false, "not the expected JSON"},
	} {
		status, answer = tc.status, tc.answer
		_, err := c.heartbeat(ctx, heartbeatRequest{Seq: 1})
		if err == nil || errors.Is(err, errUnauthorized) != tc.unauthorized || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%d %q: %v", tc.status, tc.answer, err)
		}
	}
}
