package web

import (
	"context"
	"database/sql"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/gpumarket/gpumarket/store"
	"github.com/gpumarket/gpumarket/store/pgtest"
)

// newOutageApp is newTestAppWith keeping what Open was given, so the test
// can reach the database from outside the server and freeze it.
func newOutageApp(t *testing.T, edit func(*Config)) (*testApp, string) {
	t.Helper()
	ctx := context.Background()
	dsn := pgtest.DSN(t, filepath.Join(t.TempDir(), "web.db"))
	db, err := store.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	cfg := Config{BaseURL: "http://127.0.0.1", SessionKey: []byte(strings.Repeat("k", 32)), PasswordCost: bcrypt.MinCost, Now: func() time.Time { return testNow }}
	if edit != nil {
		edit(&cfg)
	}
	h, e, err := New(ctx, cfg, db, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	joinFeed(t, db, h)
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return &testApp{t: t, srv: srv, db: db, handler: h}, dsn
}

// freezeBookings stops every booking in the database until the returned
// function is called, as a frozen or overloaded database would: on SQLite
// another connection holds the write lock (BEGIN IMMEDIATE); on
// PostgreSQL another session holds an exclusive lock on the reservations
// table, which a booking reads to re-check capacity.
func freezeBookings(t *testing.T, dsn string) (thaw func()) {
	t.Helper()
	ctx := context.Background()
	driver, begin := "sqlite", "BEGIN IMMEDIATE"
	lock := ""
	if store.IsPostgresURL(dsn) {
		driver, begin, lock = "pgx", "BEGIN", "LOCK TABLE reservations IN ACCESS EXCLUSIVE MODE"
	}
	other, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := other.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, begin); err != nil {
		t.Fatal(err)
	}
	if lock != "" {
		if _, err := conn.ExecContext(ctx, lock); err != nil {
			t.Fatal(err)
		}
	}
	thawed := false
	thaw = func() {
		if thawed {
			return
		}
		thawed = true
		if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
			t.Error(err)
		}
		conn.Close()
		other.Close()
	}
	t.Cleanup(thaw)
	return thaw
}

// quoteToBook quotes the training request through the API and returns a
// booking body for its one quote.
func quoteToBook(t *testing.T, app *testApp, token string) string {
	t.Helper()
	r := app.apiCall("POST", "/api/v1/quotes", token, apiTrainingRequest)
	if r.status != http.StatusOK {
		t.Fatalf("quotes: %d %s", r.status, r.body)
	}
	var quotes apiQuotes
	if err := json.Unmarshal([]byte(r.body), &quotes); err != nil || len(quotes.Quotes) != 1 {
		t.Fatalf("quotes: %+v, %v", quotes, err)
	}
	return `{"request":` + apiTrainingRequest + `,"quote_id":"` + quotes.Quotes[0].QuoteID + `"}`
}

// TestFrozenDatabaseAnswers503AndCommitsNothing: while bookings cannot
// reach the database a booking is answered at its deadline with 503,
// Retry-After and the JSON error "unavailable" (a page says it in words),
// and when the database thaws nothing of it was stored: the same booking
// then succeeds.
func TestFrozenDatabaseAnswers503AndCommitsNothing(t *testing.T) {
	const timeout = 700 * time.Millisecond
	app, dsn := newOutageApp(t, func(c *Config) { c.RequestTimeout = timeout })
	app.listedOffer("nvidia-h100-80gb-sxm", 8, 1, "us-east-va", 219)
	c := app.client()
	c.signUp("bot@example.com", false)
	token := c.createToken("ci", "write")
	booking := quoteToBook(t, app, token)

	thaw := freezeBookings(t, dsn)
	began := time.Now()
	req, _ := http.NewRequest("POST", app.srv.URL+"/api/v1/reservations", strings.NewReader(booking))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(began)
	retry := resp.Header.Get("Retry-After")
	r := read(t, resp)
	if r.status != http.StatusServiceUnavailable || !strings.Contains(r.body, `"code":"unavailable"`) || retry != "5" {
		t.Fatalf("booking on a frozen database: %d, Retry-After %q, %s", r.status, retry, r.body)
	}
	for _, l := range leaks {
		if strings.Contains(r.body, l) {
			t.Errorf("the 503 leaks %q: %s", l, r.body)
		}
	}
	if took > timeout+2*time.Second {
		t.Errorf("the booking was answered after %s; its deadline was %s", took, timeout)
	}
	// A page says it in words, through the same handler.
	page := c.get("/reservations")
	if page.status != http.StatusOK { // reading is not frozen on SQLite; on PostgreSQL the table is locked
		if page.status != http.StatusServiceUnavailable || !strings.Contains(page.body, "Temporarily unavailable") || !strings.Contains(page.body, msgUnavailable) {
			t.Errorf("page on a frozen database: %d\n%s", page.status, page.body)
		}
	}

	thaw()
	if r := app.apiCall("GET", "/api/v1/reservations", token, ""); r.status != http.StatusOK || strings.Contains(r.body, `"state"`) {
		t.Fatalf("after the thaw the timed-out booking is stored: %d %s", r.status, r.body)
	}
	if r := app.apiCall("POST", "/api/v1/reservations", token, booking); r.status != http.StatusCreated {
		t.Fatalf("the same booking after the thaw: %d %s", r.status, r.body)
	}
}

// TestHealthzAnswersWithinItsDeadline: a booking stuck on a frozen
// database holds the writer's connection; /healthz does not wait for it
// but answers 503 "unreachable" once its ping's deadline has passed.
func TestHealthzAnswersWithinItsDeadline(t *testing.T) {
	app, dsn := newOutageApp(t, nil)                   // the default request deadline: the booking stays stuck
	if err := app.db.LimitConnections(2); err != nil { // on PostgreSQL one writer connection, as SQLite has
		t.Fatal(err)
	}
	app.listedOffer("nvidia-h100-80gb-sxm", 8, 1, "us-east-va", 219)
	c := app.client()
	c.signUp("bot@example.com", false)
	token := c.createToken("ci", "write")
	booking := quoteToBook(t, app, token)
	if r := app.client().get("/healthz"); r.status != http.StatusOK {
		t.Fatalf("healthz before the freeze: %d %s", r.status, r.body)
	}

	thaw := freezeBookings(t, dsn)
	stuck := make(chan response, 1)
	go func() {
		req, _ := http.NewRequest("POST", app.srv.URL+"/api/v1/reservations", strings.NewReader(booking))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			stuck <- response{status: -1, body: err.Error()}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		stuck <- response{status: resp.StatusCode, body: string(b)}
	}()
	time.Sleep(300 * time.Millisecond) // the booking has taken the writer and waits on the lock
	began := time.Now()
	r := app.client().get("/healthz")
	took := time.Since(began)
	if r.status != http.StatusServiceUnavailable || !strings.Contains(r.body, `"database":"unreachable"`) {
		t.Fatalf("healthz on a frozen database: %d %s", r.status, r.body)
	}
	if took < healthPingTimeout/2 || took > healthPingTimeout+2*time.Second {
		t.Errorf("healthz answered after %s; its ping's deadline is %s", took, healthPingTimeout)
	}
	thaw()
	if b := <-stuck; b.status != http.StatusCreated {
		t.Fatalf("the booking that waited for the thaw: %d %s", b.status, b.body)
	}
	if r := app.client().get("/healthz"); r.status != http.StatusOK {
		t.Fatalf("healthz after the thaw: %d %s", r.status, r.body)
	}
}

// TestTooManyClientsAnswers503: on PostgreSQL, a server that refuses new
// connections with "too many connections" (SQLSTATE 53300, as "sorry, too
// many clients already" is) makes a page and the API answer 503 with
// Retry-After, not 500. The server's limit is the role's connection limit
// here, set to 0 once the market is up, with its open connections ended.
func TestTooManyClientsAnswers503(t *testing.T) {
	if !pgtest.Enabled() {
		t.Skip("PostgreSQL only: connection limits are the server's")
	}
	ctx := context.Background()
	admin := pgtest.Database(t)
	super, err := sql.Open("pgx", admin)
	if err != nil {
		t.Fatal(err)
	}
	defer super.Close()
	role := "limited_" + strings.ReplaceAll(strings.ToLower(t.Name()), "/", "_")
	for _, q := range []string{`DROP ROLE IF EXISTS ` + role, `CREATE ROLE ` + role + ` LOGIN`, `GRANT ALL ON SCHEMA public TO ` + role} {
		if _, err := super.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	db, err := store.Open(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		db.Close()
		super.ExecContext(ctx, `DROP OWNED BY `+role)
		super.ExecContext(ctx, `DROP ROLE `+role)
	})
	cfg := Config{BaseURL: "http://127.0.0.1", SessionKey: []byte(strings.Repeat("k", 32)), PasswordCost: bcrypt.MinCost, Now: func() time.Time { return testNow }}
	_, e, err := New(ctx, cfg, db, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	app := &testApp{t: t, srv: srv, db: db}
	if r := app.client().get("/"); r.status != http.StatusOK {
		t.Fatalf("catalogue before the limit: %d", r.status)
	}

	for _, q := range []string{`ALTER ROLE ` + role + ` CONNECTION LIMIT 0`,
		`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '` + role + `'`} {
		if _, err := super.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	for _, p := range []string{"/", "/api/v1/ping"} { // the catalogue; a token looked up
		req, _ := http.NewRequest("GET", srv.URL+p, nil)
		req.Header.Set("Authorization", "Bearer gpm_0000000000000000000000000000000000000000")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		retry := resp.Header.Get("Retry-After")
		r := read(t, resp)
		if r.status != http.StatusServiceUnavailable || retry != "5" || !strings.Contains(r.body, "cannot reach its database") {
			t.Errorf("%s with no connections left: %d, Retry-After %q\n%s", p, r.status, retry, r.body)
		}
	}
	if _, err := super.ExecContext(ctx, `ALTER ROLE `+role+` CONNECTION LIMIT -1`); err != nil {
		t.Fatal(err)
	}
	if r := app.client().get("/"); r.status != http.StatusOK {
		t.Fatalf("catalogue once connections are allowed again: %d", r.status)
	}
}
