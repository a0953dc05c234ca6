package web

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
	"github.com/gpumarket/gpumarket/store/pgtest"
)

// syncBuffer is a log destination the server's goroutines and the test
// can share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// leaks are fragments of internal error text a person must never see:
// the driver's and the store's messages, Go error and panic text, stack
// traces.
var leaks = []string{
	"sql", "SQL", "database is closed", "store:", "find offer", "find session", "api token",
	"goroutine", "panic", "runtime.", ".go:", "modernc", "errors.", "*market.Error", "%!",
}

// TestInternalErrorIsA500WithoutInternals closes the database under the
// running server, so real handlers and middleware fail with the driver's
// "sql: database is closed", and checks what a person and an API client
// get: a 500 error page or JSON error with the safe message and the
// request's reference, none of the internal text — which goes to the log
// under the same request id.
func TestInternalErrorIsA500WithoutInternals(t *testing.T) {
	ctx := context.Background()
	db, err := store.Open(ctx, pgtest.DSN(t, filepath.Join(t.TempDir(), "web.db")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	h, e, err := New(ctx, Config{BaseURL: "http://127.0.0.1", SessionKey: []byte(strings.Repeat("k", 32)), PasswordCost: bcrypt.MinCost, Now: func() time.Time { return testNow }}, db, log)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	app := &testApp{t: t, srv: srv, db: db, handler: h}

	prov := app.client()
	prov.signUp("prov@example.com", true)
	form := validOfferForm()
	form.Set("title", "Closed-database offer")
	id := prov.createOffer(form)
	token := prov.createToken("ci", "read")
	// While the database is open the same requests succeed, so the 500s
	// below come from the database failing and from nothing else.
	if r := prov.get("/offers/" + itoa(id)); r.status != http.StatusOK || !strings.Contains(r.body, "Closed-database offer") {
		t.Fatalf("offer page before closing: %d", r.status)
	}
	if r := app.apiCall("GET", "/api/v1/provider/offers", token, ""); r.status != http.StatusOK {
		t.Fatalf("API before closing: %d %s", r.status, r.body)
	}

	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	// The one message every internal error shows (market.ErrorMessage).
	const wantMsg = "Something went wrong on our side. Please try again; if it keeps happening, contact support."

	pages := []struct {
		name string
		c    *client
		path string
	}{
		{"handler (anonymous offer page)", app.client(), "/offers/" + itoa(id)},
		{"middleware (signed-in session lookup)", prov, "/account"},
	}
	for _, p := range pages {
		resp, err := p.c.http.Get(srv.URL + p.path)
		if err != nil {
			t.Fatal(err)
		}
		reqID := resp.Header.Get("X-Request-Id")
		r := read(t, resp)
		if r.status != http.StatusInternalServerError {
			t.Errorf("%s: status %d, want 500\n%s", p.name, r.status, r.body)
			continue
		}
		mustContain(t, r.body, `data-testid="error-page"`, "Something went wrong", wantMsg)
		if reqID == "" || !strings.Contains(r.body, reqID) {
			t.Errorf("%s: the page does not show the request's reference %q", p.name, reqID)
		}
		for _, l := range leaks {
			if strings.Contains(r.body, l) {
				t.Errorf("%s: the error page leaks %q", p.name, l)
			}
		}
		checkLogged(t, logs.String(), reqID, p.path)
	}

	resp, err := func() (*http.Response, error) {
		req, err := http.NewRequest("GET", srv.URL+"/api/v1/provider/offers", nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", "Bearer "+token)
		return http.DefaultClient.Do(req)
	}()
	if err != nil {
		t.Fatal(err)
	}
	reqID := resp.Header.Get("X-Request-Id")
	r := read(t, resp)
	if r.status != http.StatusInternalServerError {
		t.Fatalf("API: status %d, want 500\n%s", r.status, r.body)
	}
	var body apiErrorBody
	if err := json.Unmarshal([]byte(r.body), &body); err != nil {
		t.Fatalf("API error is not JSON: %v\n%s", err, r.body)
	}
	if body.Error.Code != market.CodeInternal || body.Error.Message != wantMsg || body.Error.RequestID != reqID || reqID == "" || body.Error.Fields != nil {
		t.Errorf("API error %+v (request id %q)", body.Error, reqID)
	}
	for _, l := range leaks {
		if strings.Contains(r.body, l) {
			t.Errorf("API error leaks %q: %s", l, r.body)
		}
	}
	checkLogged(t, logs.String(), reqID, "/api/v1/provider/offers")
}

// checkLogged requires the log to hold the internal error, with the
// driver's text, under the request's id: what support looks up from the
// reference a person quotes.
func checkLogged(t *testing.T, logs, reqID, path string) {
	t.Helper()
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, "internal error") && strings.Contains(line, "request_id="+reqID) &&
			strings.Contains(line, "database is closed") && strings.Contains(line, "path="+path) {
			return
		}
	}
	t.Errorf("no internal error logged for request %s (%s):\n%s", reqID, path, logs)
}
