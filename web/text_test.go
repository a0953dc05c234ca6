package web

import (
	"context"
	"net/http"
	"net/url"
	"testing"
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
