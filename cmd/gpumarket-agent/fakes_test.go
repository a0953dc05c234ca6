package main

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// testToken is a well-formed host token.
const testToken = "gph_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQ"

// t0 is when the tests' clocks start.
var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

// fakeServer implements the server side of docs/agent.md for the agent's
// tests: it checks the token, keeps the highest seq, answers assignments
// from the pieces placed on the node (install while the piece runs by its
// clock, remove once over if installed and not yet removed, acceptance until
// a result came), and records every report.
type fakeServer struct {
	*httptest.Server
	mu         sync.Mutex
	now        func() time.Time
	token      string
	pieces     []assignment // placed on this node; State is computed
	fail       []int        // statuses to answer the next heartbeats with
	maxSeq     int64
	heartbeats []heartbeatRequest // accepted ones
	seqs       []int64            // every seq received, accepted or not
	installed  map[int64][]installedReport
	removed    map[int64][]removedReport
	acceptance map[int64][]acceptanceReport
	// hold, when set, is called inside the heartbeat handler before it answers.
	hold func(r *http.Request)
}

func newFakeServer(t *testing.T, now func() time.Time) *fakeServer {
	s := &fakeServer{now: now, token: testToken, installed: map[int64][]installedReport{},
		removed: map[int64][]removedReport{}, acceptance: map[int64][]acceptanceReport{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /agent/v1/heartbeat", s.auth(s.handleHeartbeat))
	mux.HandleFunc("POST /agent/v1/assignments/{piece}/{report}", s.auth(s.handleReport))
	s.Server = httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

func (s *fakeServer) auth(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+s.token {
			writeJSON(w, http.StatusUnauthorized, map[string]any{"error": map[string]string{"code": "unauthorized", "message": "This host token is revoked or unknown."}})
			return
		}
		if r.Header.Get("Content-Type") != "application/json" {
			http.Error(w, "want JSON", http.StatusUnsupportedMediaType)
			return
		}
		next(w, r)
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (s *fakeServer) handleHeartbeat(w http.ResponseWriter, r *http.Request) {
	var hb heartbeatRequest
	if err := json.NewDecoder(r.Body).Decode(&hb); err != nil || hb.Seq < 1 {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": map[string]string{"message": "bad heartbeat"}})
		return
	}
	if s.hold != nil {
		s.hold(r)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seqs = append(s.seqs, hb.Seq)
	if len(s.fail) > 0 {
		status := s.fail[0]
		s.fail = s.fail[1:]
		writeJSON(w, status, map[string]any{"error": map[string]string{"message": "try later"}})
		return
	}
	now := s.now()
	if hb.Seq <= s.maxSeq {
		writeJSON(w, http.StatusOK, heartbeatResponse{Accepted: false, ServerTime: now, IntervalSeconds: 10, Assignments: []assignment{}})
		return
	}
	s.maxSeq = hb.Seq
	s.heartbeats = append(s.heartbeats, hb)
	out := []assignment{}
	for _, p := range s.pieces {
		installed := len(s.installed[p.PieceID]) > 0
		removed := len(s.removed[p.PieceID]) > 0
		switch {
		case !now.Before(p.Start) && now.Before(p.End):
			p.State = stateInstall
			p.Acceptance = p.Acceptance && len(s.acceptance[p.PieceID]) == 0
		case installed && !removed:
			p.State, p.Acceptance = stateRemove, false
		default:
			continue
		}
		out = append(out, p)
	}
	writeJSON(w, http.StatusOK, heartbeatResponse{Accepted: true, ServerTime: now, IntervalSeconds: 10, Assignments: out})
}

func (s *fakeServer) handleReport(w http.ResponseWriter, r *http.Request) {
	piece, err := strconv.ParseInt(r.PathValue("piece"), 10, 64)
	if err != nil {
		http.NotFound(w, r)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var decodeErr error
	switch r.PathValue("report") {
	case "installed":
		var v installedReport
		decodeErr = json.NewDecoder(r.Body).Decode(&v)
		s.installed[piece] = append(s.installed[piece], v)
	case "removed":
		var v removedReport
		decodeErr = json.NewDecoder(r.Body).Decode(&v)
		s.removed[piece] = append(s.removed[piece], v)
	case "acceptance":
		var v acceptanceReport
		decodeErr = json.NewDecoder(r.Body).Decode(&v)
		s.acceptance[piece] = append(s.acceptance[piece], v)
	default:
		http.NotFound(w, r)
		return
	}
	if decodeErr != nil {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": map[string]string{"message": decodeErr.Error()}})
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// accepted returns the heartbeats the server accepted so far.
func (s *fakeServer) accepted() []heartbeatRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.heartbeats)
}

// fakeClock is a clock that moves only when the agent sleeps.
type fakeClock struct {
	mu    sync.Mutex
	t     time.Time
	slept []time.Duration
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.slept = append(c.slept, d)
	if d > 0 {
		c.t = c.t.Add(d)
	}
}

func (c *fakeClock) sleeps() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.slept)
}

// testLog is a logger the test prints when it fails.
func testLog(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// Public keys made with ssh-keygen for the tests.
const (
	buyerKey    = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIG01hsMAM7RpPI0A/8qBgEd+reLeY9Y/YXcvCKwu2ocf buyer@example"
	providerKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDOfrdR60Y76yJbdj1RiDMDzI5T4f4/WZxZfqMuKp+oE provider@host"
	secondKey   = "ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBLwpP0FfT2pESen5oHsXy3O0csG79DpA+S6T7kkdOY+LjP0l2zlvz7n/PXHhKfSMzTY3IRSH6VKrAfmWM8pkjKM= second@example"
)

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}
