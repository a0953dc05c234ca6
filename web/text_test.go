package web

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/gpumarket/gpumarket/agentapi"
)

// TestLoginRefusesUnstorableText: a NUL or bytes that are not UTF-8 in the
// log-in e-mail are refused on the log-in form, and a NUL escaped in a JSON
// body of the API at the boundary with the field named — the same answer
// on SQLite and PostgreSQL (before, SQLite stored the NUL in the throttle's
// keys, migrate-db then refused the whole copy, and PostgreSQL answered
// 500) — and nothing is stored.
func TestLoginRefusesUnstorableText(t *testing.T) {
	app := newTestApp(t)
	c := app.client()
	r := c.post("/login", "/login", url.Values{"email": {"ada\x00@example.com"}, "password": {"whatever-long-enough"}})
	if r.status != http.StatusUnprocessableEntity {
		t.Fatalf("NUL in the e-mail: %d\n%.800s", r.status, r.body)
	}
	mustContain(t, r.body, "Remove the invisible control character", `name="email"`)
	r = c.post("/login", "/login", url.Values{"email": {"ada\xff\xfe@example.com"}, "password": {"whatever-long-enough"}})
	if r.status != http.StatusUnprocessableEntity {
		t.Fatalf("bytes that are not UTF-8: %d\n%.800s", r.status, r.body)
	}
	mustContain(t, r.body, "not valid UTF-8")
	if n, err := app.db.CountUsers(context.Background()); err != nil || n != 0 {
		t.Fatalf("%d accounts stored, %v", n, err)
	}

	c.signUp("buyer@example.com", false)
	tok := c.createToken("t", "write")
	api := app.apiCall(http.MethodPost, "/api/v1/quotes", tok, `{"version":1,"workload":{"kind":"training","devices":8,"hours":2},"notes":"a\u0000b"}`)
	if api.status != http.StatusBadRequest {
		t.Fatalf("NUL in a JSON string: %d %s", api.status, api.body)
	}
	mustContain(t, api.body, `"code":"invalid"`, `"notes":`)
}

// TestPlainJSONTextAgreesWithDecoding: the middleware's shortcut for a body
// without a backslash (plainJSONText) lets through only what decoding the
// body and checking every string (jsonTextProblem) lets through, and a
// control character written raw in such a body (DEL, a C1 control) is
// still refused with its field named, by the API, before any handler.
func TestPlainJSONTextAgreesWithDecoding(t *testing.T) {
	for _, body := range []string{
		`{"seq":12,"sent_at":"2026-12-01T10:00:00Z","devices":[{"index":0,"name":"NVIDIA H100 80GB HBM3","healthy":true}]}`,
		"{\n\t\"notes\": \"two\\nlines\"\n}",
		`{"notes":"a\u0000b"}`,
		"{\"notes\":\"a\u007fb\"}",
		"{\"notes\":\"a\u0085b\"}",
		"{\"no\u0085te\":\"ab\"}",
		`{"notes":["fine","a\u001bb"]}`,
		`{"notes":"caf\u00e9 ☕"}`,
		`not json at all`,
	} {
		var doc any
		dec := json.NewDecoder(strings.NewReader(body))
		dec.UseNumber()
		msg := ""
		if dec.Decode(&doc) == nil {
			_, msg = jsonTextProblem("", doc)
		}
		if plainJSONText([]byte(body)) && msg != "" {
			t.Errorf("%q: taken as plain text, but decoding it finds %q", body, msg)
		}
	}
	if !plainJSONText([]byte(`{"seq":12,"probe":"nvidia-smi","devices":[{"name":"NVIDIA H100"}]}`)) {
		t.Error("a heartbeat's body is not taken as plain text")
	}

	app := newTestApp(t)
	c := app.client()
	c.signUp("buyer@example.com", false)
	tok := c.createToken("t", "write")
	api := app.apiCall(http.MethodPost, "/api/v1/quotes", tok, "{\"version\":1,\"workload\":{\"kind\":\"training\",\"devices\":8,\"hours\":2},\"notes\":\"a\u0085b\"}")
	if api.status != http.StatusBadRequest {
		t.Fatalf("a raw C1 control in a JSON string: %d %s", api.status, api.body)
	}
	mustContain(t, api.body, `"code":"invalid"`, `"notes":`, "U+0085")
}

// TestRoutineAgentRequestsLogAtDebug: an agent's heartbeat or long-poll
// answered 2xx is logged at DEBUG (a fleet sends a thousand a second), one
// that failed and every other request at INFO.
func TestRoutineAgentRequestsLogAtDebug(t *testing.T) {
	e := echo.New()
	for _, tc := range []struct {
		route  string
		status int
		logged bool
	}{
		{"/" + agentapi.PathHeartbeat, http.StatusOK, false},
		{"/" + agentapi.PathAssignments, http.StatusOK, false},
		{"/" + agentapi.PathHeartbeat, http.StatusTooManyRequests, true},
		{"/api/v1/quotes", http.StatusOK, true},
	} {
		logs := &syncBuffer{}
		h := &Handler{log: slog.New(slog.NewTextHandler(logs, nil)), routeSet: map[string]bool{}}
		c := e.NewContext(httptest.NewRequest(http.MethodPost, tc.route, nil), httptest.NewRecorder())
		c.SetPath(tc.route)
		if err := h.requestLogger(func(c echo.Context) error { return c.NoContent(tc.status) })(c); err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(logs.String(), "msg=request"); got != tc.logged {
			t.Errorf("%s answered %d: logged at INFO %v, want %v (%q)", tc.route, tc.status, got, tc.logged, logs.String())
		}
	}
}
