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
	retryAfter string       // Retry-After on a failing 429, when not ""
	maxSeq     int64
	heartbeats []heartbeatRequest // accepted ones
	seqs       []int64            // every seq received, accepted or not
	installed  map[int64][]installedReport
	removed    map[int64][]removedReport
	acceptance map[int64][]acceptanceReport
	// removeFailed holds the messages of remove_failed reports, by piece.
	removeFailed map[int64][]string
	// hold, when set, is called inside the heartbeat handler before it answers.
	hold func(r *http.Request)
	// push: the heartbeat's answer offers the long-poll (version and push);
	// longPoll: the server holds it (newFakeServer's route); polls counts
	// the long-polls received, and changed is closed at each change (change).
	push, longPoll bool
	polls          int
	changed        chan struct{}
}

func newFakeServer(t *testing.T, now func() time.Time) *fakeServer {
	s := &fakeServer{now: now, token: testToken, installed: map[int64][]installedReport{},
		removed: map[int64][]removedReport{}, acceptance: map[int64][]acceptanceReport{}, removeFailed: map[int64][]string{}}
	mux := http.NewServeMux()
	s.changed = make(chan struct{})
	mux.HandleFunc("POST /agent/v1/heartbeat", s.auth(s.handleHeartbeat))
	mux.HandleFunc("GET /agent/v1/assignments", func(w http.ResponseWriter, r *http.Request) {
		if !s.longPoll {
			http.NotFound(w, r) // an older server, or a proxy that does not pass it
			return
		}
		s.handleAssignments(w, r)
	})
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
		if r.Method == http.MethodPost && r.Header.Get("Content-Type") != "application/json" {
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
		if status == http.StatusTooManyRequests && s.retryAfter != "" {
			w.Header().Set("Retry-After", s.retryAfter)
		}
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
	out := s.assignmentsLocked(now)
	resp := heartbeatResponse{Accepted: true, ServerTime: now, IntervalSeconds: 10, Assignments: out}
	if s.push {
		resp.Push, resp.Version = true, versionOf(out)
	}
	writeJSON(w, http.StatusOK, resp)
}

// versionOf names a list of assignments.
func versionOf(as []assignment) string {
	b, _ := json.Marshal(as)
	return strconv.Itoa(len(b)) + ":" + strconv.FormatUint(fnv(b), 36)
}

func fnv(b []byte) uint64 {
	h := uint64(14695981039346656037)
	for _, c := range b {
		h = (h ^ uint64(c)) * 1099511628211
	}
	return h
}

// change edits the pieces and wakes the long-polls.
func (s *fakeServer) change(edit func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	edit()
	close(s.changed)
	s.changed = make(chan struct{})
}

// handleAssignments holds the long-poll until the assignments differ from
// the known version or the wait ends (on the wall clock).
func (s *fakeServer) handleAssignments(w http.ResponseWriter, r *http.Request) {
	wait, err := strconv.Atoi(r.URL.Query().Get("wait"))
	if err != nil || wait < 0 {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": map[string]string{"message": "bad wait"}})
		return
	}
	known := r.URL.Query().Get("known")
	timer := time.NewTimer(time.Duration(wait) * time.Second)
	defer timer.Stop()
	s.mu.Lock()
	s.polls++
	s.mu.Unlock()
	for {
		s.mu.Lock()
		now := s.now()
		out := s.assignmentsLocked(now)
		v, changed := versionOf(out), s.changed
		s.mu.Unlock()
		if v != known {
			writeJSON(w, http.StatusOK, assignmentsResponse{ServerTime: now, Version: v, Changed: true, Assignments: out})
			return
		}
		select {
		case <-changed:
		case <-timer.C:
			writeJSON(w, http.StatusOK, assignmentsResponse{ServerTime: now, Version: v, Assignments: out})
			return
		case <-r.Context().Done():
			return
		}
	}
}

// assignmentsLocked computes the node's assignments at now; s.mu is held.
func (s *fakeServer) assignmentsLocked(now time.Time) []assignment {
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
		if p.State == stateInstall && s.push {
			p.Reported = installed && !removed
		}
		out = append(out, p)
	}
	return out
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
	case "remove_failed":
		var v struct{ Message string }
		decodeErr = json.NewDecoder(r.Body).Decode(&v)
		s.removeFailed[piece] = append(s.removeFailed[piece], v.Message)
	default:
		http.NotFound(w, r)
		return
	}
	if decodeErr != nil {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": map[string]string{"message": decodeErr.Error()}})
		return
	}
	close(s.changed)
	s.changed = make(chan struct{})
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
