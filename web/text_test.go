package web

import (
	"context"
	"encoding/json"
	"fmt"
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

// TestPlainJSONTextSkipsOnlyCleanBodies: a body plainJSONText lets through
// without decoding holds no string the full check (decoding, then
// jsonTextProblem) refuses; and each character that check refuses, raw or
// escaped, in a value or a key, sends the body to it. Through the API, a
// raw C1 control and an escaped escape character are refused as before.
func TestPlainJSONTextSkipsOnlyCleanBodies(t *testing.T) {
	refused := func(body string) bool {
		dec := json.NewDecoder(strings.NewReader(body))
		dec.UseNumber()
		var doc any
		if dec.Decode(&doc) != nil {
			return false
		}
		_, msg := jsonTextProblem("", doc)
		return msg != ""
	}
	for _, tc := range []struct {
		body  string
		plain bool
	}{
		{"{\n  \"notes\": \"8× H100, Zürich\",\r\n\t\"n\": [1, 2.5, true, null]\n}", true},
		{`{"notes":"a\u0000b"}`, false},
		{`{"notes":"a\u001bb"}`, false},
		{`{"notes":"a\nb"}`, false}, // escaped: allowed in a value, but only the full check knows
		{`{"a\tb":"x"}`, false},
		{"{\"notes\":\"a\u0085b\"}", false}, // C1 control, raw
		{"{\"notes\":\"a\u009fb\"}", false},
		{"{\"notes\":\"a\x7fb\"}", false},
		{"{\"notes\":\"a\x01b\"}", false},             // not JSON: the handler says so
		{"{\"notes\":\"\u00a0\u00c2\u0080\"}", false}, // U+00C2 then U+0080
		{"{\"notes\":\"\u00a0é\u00c2\"}", true},
	} {
		if got := plainJSONText([]byte(tc.body)); got != tc.plain {
			t.Errorf("plainJSONText(%q) = %v, want %v", tc.body, got, tc.plain)
		}
		if tc.plain && refused(tc.body) {
			t.Errorf("%q: plain, yet the full check refuses it", tc.body)
		}
	}
	// Every character TextProblem refuses, raw and escaped, in a value and
	// in a key: plain only if the full check lets it through.
	for r := rune(0); r < 0x3000; r++ {
		for _, body := range []string{
			`{"notes":"x` + string(r) + `y"}`, `{"x` + string(r) + `y":1}`,
			fmt.Sprintf(`{"notes":"x\u%04xy"}`, r), fmt.Sprintf(`{"x\u%04xy":1}`, r),
		} {
			if plainJSONText([]byte(body)) && refused(body) {
				t.Errorf("%q (U+%04X): plain, yet the full check refuses it", body, r)
			}
		}
	}

	app := newTestApp(t)
	c := app.client()
	c.signUp("buyer@example.com", false)
	tok := c.createToken("t", "write")
	for _, notes := range []string{"a\u0085b", `a\u001bb`} {
		api := app.apiCall(http.MethodPost, "/api/v1/quotes", tok, `{"version":1,"workload":{"kind":"training","devices":8,"hours":2},"notes":"`+notes+`"}`)
		if api.status != http.StatusBadRequest {
			t.Fatalf("notes %q: %d %s", notes, api.status, api.body)
		}
		mustContain(t, api.body, `"code":"invalid"`, `"notes":`, "control character")
	}
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
