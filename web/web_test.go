package web

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"golang.org/x/crypto/bcrypt"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
	"github.com/gpumarket/gpumarket/store/pgtest"
)

// testNow is the fixed clock of the web tests.
var testNow = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

type testApp struct {
	t       *testing.T
	srv     *httptest.Server
	db      *store.DB
	handler *Handler
	echo    *echo.Echo
	sqlite  string // the SQLite file's path, "" on PostgreSQL
}

// newTestApp serves the real Echo instance over a real SQLite file.
func newTestApp(t *testing.T) *testApp {
	t.Helper()
	return newTestAppWith(t, nil)
}

// newTestAppWith is newTestApp with the configuration changed by edit.
func newTestAppWith(t *testing.T, edit func(*Config)) *testApp {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "web.db")
	db, err := store.Open(ctx, pgtest.DSN(t, path))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := Config{BaseURL: "http://127.0.0.1", SessionKey: []byte(strings.Repeat("k", 32)), PasswordCost: bcrypt.MinCost, Now: func() time.Time { return testNow }}
	if edit != nil {
		edit(&cfg)
	}
	h, e, err := New(ctx, cfg, db, log)
	if err != nil {
		t.Fatal(err)
	}
	joinFeed(t, db, h)
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	if db.Postgres() {
		path = ""
	}
	return &testApp{t: t, srv: srv, db: db, handler: h, echo: e, sqlite: path}
}

// joinFeed runs the workflow's change feed on PostgreSQL, as serve does,
// until the test ends, and waits until it has joined, so /healthz can say
// ok. On SQLite there is no feed.
func joinFeed(t *testing.T, db *store.DB, h *Handler) {
	t.Helper()
	if !db.Postgres() {
		return
	}
	fctx, stop := context.WithCancel(context.Background())
	followed := make(chan struct{})
	go func() { defer close(followed); h.wf.Follow(fctx) }()
	t.Cleanup(func() { stop(); <-followed })
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, joined := h.wf.FeedLag(); joined {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the change feed did not join")
		}
	}
}

// client is one browser: its own cookie jar, no automatic redirects.
type client struct {
	app  *testApp
	http *http.Client
}

func (a *testApp) client() *client {
	jar, _ := cookiejar.New(nil)
	return &client{app: a, http: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

type response struct {
	status   int
	body     string
	location string
}

func (c *client) get(path string) response {
	c.app.t.Helper()
	resp, err := c.http.Get(c.app.srv.URL + path)
	if err != nil {
		c.app.t.Fatal(err)
	}
	return read(c.app.t, resp)
}

var csrfRe = regexp.MustCompile(`name="_csrf" value="([^"]+)"`)

// csrf fetches a page and returns the token its forms carry.
func (c *client) csrf(path string) string {
	c.app.t.Helper()
	r := c.get(path)
	m := csrfRe.FindStringSubmatch(r.body)
	if m == nil {
		c.app.t.Fatalf("no CSRF token on %s (status %d)", path, r.status)
	}
	return m[1]
}

// post submits a form with the CSRF token of the page it comes from.
func (c *client) post(from, path string, form url.Values) response {
	c.app.t.Helper()
	form.Set("_csrf", c.csrf(from))
	return c.postRaw(path, form)
}

func (c *client) postRaw(path string, form url.Values) response {
	c.app.t.Helper()
	resp, err := c.http.PostForm(c.app.srv.URL+path, form)
	if err != nil {
		c.app.t.Fatal(err)
	}
	return read(c.app.t, resp)
}

func read(t *testing.T, resp *http.Response) response {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{status: resp.StatusCode, body: string(b), location: resp.Header.Get("Location")}
}

const testPassword = "correct horse battery"

// signUp creates an account through the sign-up form, confirms its
// address from the link mailed to it and leaves c logged in.
func (c *client) signUp(email string, provider bool) {
	c.app.t.Helper()
	c.signUpUnverified(email, provider)
	if r := c.get(c.app.mailLink(email, store.MailVerifyAddress)); r.status != http.StatusSeeOther {
		c.app.t.Fatalf("verify %s: status %d\n%s", email, r.status, r.body)
	}
}

// signUpUnverified creates an account through the sign-up form and logs c
// in, its address not confirmed.
func (c *client) signUpUnverified(email string, provider bool) {
	c.app.t.Helper()
	form := url.Values{"email": {email}, "password": {testPassword}, "display_name": {"Tester " + email}, "is_buyer": {"1"}}
	if provider {
		form.Set("is_provider", "1")
	}
	r := c.post("/signup", "/signup", form)
	if r.status != http.StatusSeeOther || r.location != "/signup/sent" {
		c.app.t.Fatalf("sign up %s: status %d → %q\n%s", email, r.status, r.location, r.body)
	}
	if r := c.login(email, testPassword, "/"); r.status != http.StatusSeeOther {
		c.app.t.Fatalf("log in after signing up %s: status %d\n%s", email, r.status, r.body)
	}
}

// mailLink returns the link (a path) of the newest message of kind to the
// address in the outbox.
func (a *testApp) mailLink(to, kind string) string {
	a.t.Helper()
	all, err := a.db.ListMail(context.Background(), 0, 1000)
	if err != nil {
		a.t.Fatal(err)
	}
	for _, m := range all {
		if m.To == market.NormaliseEmail(to) && m.Kind == kind {
			return m.URLPath
		}
	}
	a.t.Fatalf("no %s mail to %s", kind, to)
	return ""
}

func (c *client) login(email, password, next string) response {
	c.app.t.Helper()
	return c.post("/login", "/login", url.Values{"email": {email}, "password": {password}, "next": {next}})
}

// validOfferForm is a correct offer as the form posts it.
func validOfferForm() url.Values {
	return url.Values{
		"title": {"8× H100 SXM, Oregon"}, "accelerator": {"nvidia-h100-80gb-sxm"}, "memory_gb": {"80"},
		"devices_per_node": {"8"}, "nodes": {"1"}, "interconnect": {"nvlink"}, "network": {"none"},
		"cpu_cores": {"96"}, "ram_gb": {"1024"}, "storage_gb": {"8000"},
		"driver_version": {"550.90"}, "cuda_version": {"12.4"}, "os_image": {"Ubuntu 22.04"}, "container_runtime": {"Docker 26"},
		"region": {"us-west-or"}, "carbon": {""},
		"available_from": {"2026-12-02T00:00"}, "available_until": {"2027-03-01T00:00"},
		"min_rental_hours": {"1"}, "max_rental_hours": {"720"}, "provisioning_mins": {"10"},
		"price": {"2.39"}, "storage_price": {"0.08"}, "egress_price": {"0.05"},
		"billing_basis": {"wall_clock"}, "uptime": {"99.5"}, "credit_schedule": {"99.5:10, 99:25, 95:100"},
		"credit_cap": {"100"}, "free_cancel_hours": {"24"}, "cancel_fee": {"25"},
		"figure_allreduce_busbw_value": {"370"}, "figure_allreduce_busbw_basis": {"estimated"},
		"figure_allreduce_busbw_method": {"nccl-tests all_reduce_perf"},
	}
}

func (c *client) createOffer(form url.Values) int64 {
	c.app.t.Helper()
	r := c.post("/provider/offers/new", "/provider/offers", form)
	if r.status != http.StatusSeeOther {
		c.app.t.Fatalf("create offer: status %d\n%s", r.status, r.body)
	}
	u := c.userID()
	offers, err := c.app.db.ListProviderOffers(context.Background(), u)
	if err != nil || len(offers) == 0 {
		c.app.t.Fatalf("offer not stored: %v", err)
	}
	return offers[0].ID
}

// userID returns the id of the account c is logged in as, read from its
// account page email.
func (c *client) userID() int64 {
	c.app.t.Helper()
	r := c.get("/account")
	m := regexp.MustCompile(`data-testid="account-email">([^<]+)<`).FindStringSubmatch(r.body)
	if m == nil {
		c.app.t.Fatalf("not logged in (status %d)", r.status)
	}
	u, _, err := c.app.db.FindUserByEmail(context.Background(), m[1])
	if err != nil {
		c.app.t.Fatal(err)
	}
	return u.ID
}

func mustContain(t *testing.T, body string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(body, w) {
			t.Errorf("page does not contain %q", w)
		}
	}
}

func mustNotContain(t *testing.T, body string, unwanted ...string) {
	t.Helper()
	for _, w := range unwanted {
		if strings.Contains(body, w) {
			t.Errorf("page contains %q", w)
		}
	}
}

func TestHealthz(t *testing.T) {
	app := newTestApp(t)
	r := app.client().get("/healthz")
	if r.status != http.StatusOK || !strings.Contains(r.body, `"database":"ok"`) {
		t.Fatalf("healthz: %d %s", r.status, r.body)
	}
}

func TestSecurityHeaders(t *testing.T) {
	app := newTestApp(t)
	resp, err := http.Get(app.srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	for _, h := range []string{"Content-Security-Policy", "X-Frame-Options", "Referrer-Policy", "X-Request-Id"} {
		if resp.Header.Get(h) == "" {
			t.Errorf("missing header %s", h)
		}
	}
	if got := resp.Header.Get("Content-Security-Policy"); !strings.Contains(got, "frame-ancestors 'none'") {
		t.Errorf("CSP %q does not forbid framing", got)
	}
}

func TestSignUpLogoutLogin(t *testing.T) {
	app := newTestApp(t)
	c := app.client()
	c.signUp("ada@example.com", false)
	mustContain(t, c.get("/account").body, "ada@example.com")

	r := c.post("/account", "/logout", url.Values{})
	if r.status != http.StatusSeeOther {
		t.Fatalf("logout: %d", r.status)
	}
	r = c.get("/account")
	if r.status != http.StatusSeeOther || r.location != "/login?next=%2Faccount" {
		t.Fatalf("after logout /account: %d → %q, want redirect to login with next", r.status, r.location)
	}
	r = c.login("ada@example.com", testPassword, "/account")
	if r.status != http.StatusSeeOther || r.location != "/account" {
		t.Fatalf("login: %d → %q", r.status, r.location)
	}
}

func TestSignUpInvalidKeepsInputAndWritesNothing(t *testing.T) {
	app := newTestApp(t)
	c := app.client()
	r := c.post("/signup", "/signup", url.Values{"email": {"not-an-email"}, "password": {"short"}, "display_name": {"Grace"}, "is_buyer": {"1"}})
	if r.status != http.StatusUnprocessableEntity {
		t.Fatalf("status %d, want 422", r.status)
	}
	mustContain(t, r.body, `data-testid="error-email"`, `data-testid="error-password"`, `value="Grace"`, `value="not-an-email"`)
	if n, _ := app.db.CountUsers(context.Background()); n != 0 {
		t.Fatalf("%d users stored after invalid sign-up", n)
	}
	// bcrypt's 72-byte limit is a message, never a silent truncation.
	r = c.post("/signup", "/signup", url.Values{"email": {"g@example.com"}, "password": {strings.Repeat("é", 40)}, "display_name": {"Grace"}, "is_buyer": {"1"}})
	if r.status != http.StatusUnprocessableEntity {
		t.Fatalf("80-byte password: status %d, want 422", r.status)
	}
	mustContain(t, r.body, "at most 72 bytes")
}

// A taken address gets the same answer as a new one, and its owner an
// e-mail instead of a second account.
func TestDuplicateEmailAnswersLikeANewSignUp(t *testing.T) {
	app := newTestApp(t)
	app.client().signUp("dup@example.com", false)
	fresh := app.client().post("/signup", "/signup", url.Values{"email": {"new@example.com"}, "password": {testPassword}, "display_name": {"New"}, "is_buyer": {"1"}})
	taken := app.client().post("/signup", "/signup", url.Values{"email": {"DUP@example.com"}, "password": {"another password"}, "display_name": {"Again"}, "is_buyer": {"1"}})
	if taken.status != http.StatusSeeOther || taken != fresh {
		t.Fatalf("taken address: %d → %q %q; a new one: %d → %q %q", taken.status, taken.location, taken.body, fresh.status, fresh.location, fresh.body)
	}
	if n, _ := app.db.CountUsers(context.Background()); n != 2 {
		t.Fatalf("%d accounts, want 2", n)
	}
	mustContain(t, app.client().get(taken.location).body, `data-testid="signup-sent"`, "Check your e-mail")
	if link := app.mailLink("dup@example.com", store.MailAccountExists); link != "/login" {
		t.Fatalf("account-exists mail links to %q", link)
	}
	// The owner's password is unchanged: the second sign-up's does not log in.
	if r := app.client().login("dup@example.com", "another password", "/"); r.status != http.StatusUnauthorized {
		t.Fatalf("log-in with the second sign-up's password: %d, want 401", r.status)
	}
	if r := app.client().login("dup@example.com", testPassword, "/"); r.status != http.StatusSeeOther {
		t.Fatalf("owner's log-in: %d", r.status)
	}
}

func TestPostWithoutCSRFIsRejected(t *testing.T) {
	app := newTestApp(t)
	c := app.client()
	c.get("/signup") // has the CSRF cookie, but posts no token
	r := c.postRaw("/signup", url.Values{"email": {"x@example.com"}, "password": {testPassword}, "display_name": {"X"}, "is_buyer": {"1"}})
	if r.status != http.StatusForbidden {
		t.Fatalf("status %d, want 403", r.status)
	}
	mustContain(t, r.body, "did not come from this site")
	r = c.postRaw("/signup", url.Values{"_csrf": {"forged"}, "email": {"x@example.com"}, "password": {testPassword}, "display_name": {"X"}, "is_buyer": {"1"}})
	if r.status != http.StatusForbidden {
		t.Fatalf("forged token: status %d, want 403", r.status)
	}
	if n, _ := app.db.CountUsers(context.Background()); n != 0 {
		t.Fatalf("%d users created without a valid CSRF token", n)
	}
}

func TestLoginNextIsNeverAnOpenRedirect(t *testing.T) {
	app := newTestApp(t)
	app.client().signUp("nav@example.com", false)
	for _, next := range []string{"//evil.example", "https://evil.example/", "/\\evil.example", "javascript:alert(1)", ""} {
		c := app.client()
		r := c.login("nav@example.com", testPassword, next)
		if r.status != http.StatusSeeOther || r.location != "/" {
			t.Errorf("next=%q: %d → %q, want /", next, r.status, r.location)
		}
	}
	c := app.client()
	if r := c.login("nav@example.com", testPassword, "/provider/offers?x=1"); r.location != "/provider/offers?x=1" {
		t.Errorf("local next lost: %q", r.location)
	}
}

func TestLoginThrottledPerAccount(t *testing.T) {
	app := newTestApp(t)
	app.client().signUp("victim@example.com", false)
	c := app.client()
	for i := 0; i < loginPerPair; i++ {
		if r := c.login("victim@example.com", "wrong password!", "/"); r.status != http.StatusUnauthorized {
			t.Fatalf("attempt %d: status %d, want 401", i+1, r.status)
		}
	}
	// Even the right password is refused from this address while the
	// account is throttled here (TestFailedLoginsDoNotLockTheOwnerOut: not
	// from another address).
	r := c.login("victim@example.com", testPassword, "/")
	if r.status != http.StatusTooManyRequests {
		t.Fatalf("status %d, want 429", r.status)
	}
	mustContain(t, r.body, "Too many attempts", "Please wait")
}

func TestLoginThrottledPerAddress(t *testing.T) {
	app := newTestApp(t)
	c := app.client()
	var last response
	for i := 0; i <= loginPerAddress; i++ {
		last = c.login("nobody"+string(rune('a'+i%26))+"@example.com", "wrong password!", "/")
	}
	if last.status != http.StatusTooManyRequests {
		t.Fatalf("attempt %d: status %d, want 429", loginPerAddress+1, last.status)
	}
}

func TestPasswordChangeEndsOtherSessions(t *testing.T) {
	app := newTestApp(t)
	a := app.client()
	a.signUp("pw@example.com", false)
	b := app.client()
	if r := b.login("pw@example.com", testPassword, "/account"); r.status != http.StatusSeeOther {
		t.Fatal("second login failed")
	}
	r := a.post("/account", "/account/password", url.Values{"current_password": {"wrong"}, "new_password": {"another long password"}})
	if r.status != http.StatusUnprocessableEntity {
		t.Fatalf("wrong current password: status %d", r.status)
	}
	mustContain(t, r.body, `data-testid="error-current_password"`)
	r = a.post("/account", "/account/password", url.Values{"current_password": {testPassword}, "new_password": {"another long password"}})
	if r.status != http.StatusSeeOther {
		t.Fatalf("change: status %d\n%s", r.status, r.body)
	}
	if r := a.get("/account"); r.status != http.StatusOK {
		t.Errorf("the changing session was logged out: %d", r.status)
	}
	if r := b.get("/account"); r.status != http.StatusSeeOther {
		t.Errorf("the other session still works: %d", r.status)
	}
}

func TestSuspensionEndsSessionAtOnce(t *testing.T) {
	app := newTestApp(t)
	c := app.client()
	c.signUp("bad@example.com", true)
	id := c.userID()
	app.suspend(id)
	if r := c.get("/provider/offers"); r.status != http.StatusSeeOther {
		t.Fatalf("suspended provider still served: %d", r.status)
	}
	if r := app.client().login("bad@example.com", testPassword, "/"); r.status == http.StatusSeeOther {
		t.Fatal("suspended account could log in")
	}
}

func TestOfferCreateInvalidIs422AndWritesNothing(t *testing.T) {
	app := newTestApp(t)
	c := app.client()
	c.signUp("prov@example.com", true)
	form := validOfferForm()
	form.Set("memory_gb", "96")  // not what the catalogue says
	form.Set("price", "2.999")   // three decimals
	form.Set("title", "My H100") // kept on the re-rendered form
	r := c.post("/provider/offers/new", "/provider/offers", form)
	if r.status != http.StatusUnprocessableEntity {
		t.Fatalf("status %d, want 422", r.status)
	}
	mustContain(t, r.body, `data-testid="error-memory_gb"`, "has 80 GB per device", `data-testid="error-price"`, `value="My H100"`, `value="2.999"`)
	offers, err := app.db.ListProviderOffers(context.Background(), c.userID())
	if err != nil || len(offers) != 0 {
		t.Fatalf("invalid offer stored: %v %d", err, len(offers))
	}
}

func TestOfferLifecycleAndCatalogue(t *testing.T) {
	app := newTestApp(t)
	prov := app.client()
	prov.signUp("lister@example.com", true)
	id := prov.createOffer(validOfferForm())
	mustContain(t, prov.get("/provider/offers").body, "pending review")

	visitor := app.client()
	mustNotContain(t, visitor.get("/").body, "8× H100 SXM, Oregon")
	if r := visitor.get("/offers/" + itoa(id)); r.status != http.StatusNotFound {
		t.Fatalf("pending offer visible to a visitor: %d", r.status)
	}

	if err := app.db.ReviewOffer(context.Background(), id, market.ReviewApproved, "", testNow); err != nil {
		t.Fatal(err)
	}
	body := visitor.get("/?model=nvidia-h100-80gb-sxm&country=US&max_price=2.50").body
	mustContain(t, body, "8× H100 SXM, Oregon", "1 offer")
	mustNotContain(t, visitor.get("/?country=DE").body, "8× H100 SXM, Oregon")
	mustNotContain(t, visitor.get("/?max_price=2.00").body, "8× H100 SXM, Oregon")
	r := visitor.get("/?max_price=abc")
	if r.status != http.StatusUnprocessableEntity {
		t.Fatalf("bad filter: %d", r.status)
	}
	mustContain(t, r.body, `data-testid="error-max_price"`)
	detail := visitor.get("/offers/" + itoa(id)).body
	mustContain(t, detail, "H100 80GB SXM", "nccl-tests all_reduce_perf", "badge-estimated", "badge-guaranteed", "55 gCO2/kWh")

	// Pause hides it; resume shows it again.
	prov.post("/provider/offers", "/provider/offers/"+itoa(id)+"/state", url.Values{"state": {"paused"}})
	mustNotContain(t, visitor.get("/").body, "8× H100 SXM, Oregon")
	prov.post("/provider/offers", "/provider/offers/"+itoa(id)+"/state", url.Values{"state": {"active"}})
	mustContain(t, visitor.get("/").body, "8× H100 SXM, Oregon")

	// A lower price (2.39 → 2.19) and a later end apply at once: still
	// listed, at the new price, audited with before and after.
	form := validOfferForm()
	form.Set("price", "2.19")
	form.Set("available_until", "2027-04-01T00:00")
	r = prov.post("/provider/offers/"+itoa(id)+"/edit", "/provider/offers/"+itoa(id), form)
	if r.status != http.StatusSeeOther {
		t.Fatalf("edit: %d\n%s", r.status, r.body)
	}
	mustContain(t, prov.get("/provider/offers").body, "still listed")
	mustContain(t, visitor.get("/?max_price=2.20").body, "8× H100 SXM, Oregon")
	audit, _, err := app.db.ListAudit(context.Background(), store.AuditFilter{SubjectKind: store.AuditSubjectOffer, SubjectID: id})
	if err != nil {
		t.Fatal(err)
	}
	var logged bool
	for _, e := range audit {
		if e.Action == store.AuditOfferEditAtOnce && strings.Contains(e.Before, `"price_cents_per_device_hour":239`) &&
			strings.Contains(e.After, `"price_cents_per_device_hour":219`) {
			logged = true
		}
	}
	if !logged {
		t.Fatalf("the price cut is not in the audit trail: %+v", audit)
	}

	// A higher price, or any claim (here the title), is held for review
	// while the listed version stays on the market as it was.
	admin := app.client()
	admin.signUp("reviewer@example.com", false)
	if err := app.makeAdmin(context.Background(), admin.userID(), true); err != nil {
		t.Fatal(err)
	}
	for _, change := range []struct{ field, value string }{{"price", "2.29"}, {"title", "8× H100 SXM, Oregon (new)"}} {
		form := validOfferForm()
		form.Set("price", "2.19")
		form.Set("available_until", "2027-04-01T00:00")
		form.Set(change.field, change.value)
		if r := prov.post("/provider/offers/"+itoa(id)+"/edit", "/provider/offers/"+itoa(id), form); r.status != http.StatusSeeOther {
			t.Fatalf("edit %s: %d\n%s", change.field, r.status, r.body)
		}
		mine := prov.get("/provider/offers").body
		mustContain(t, mine, "waits for review", `data-testid="edit-pending"`)
		o, err := app.db.FindOfferByID(context.Background(), id)
		if err != nil || o.Offer.Review != market.ReviewApproved || o.Offer.Title != "8× H100 SXM, Oregon" || o.Offer.PriceCentsPerDeviceHour != 219 {
			t.Fatalf("after changing %s the listed offer is %+v, %v; want it as it was", change.field, o.Offer, err)
		}
		mustContain(t, visitor.get("/?max_price=2.20").body, "8× H100 SXM, Oregon", "1 offer")
		// The provider goes on editing what they submitted.
		mustContain(t, prov.get("/provider/offers/"+itoa(id)+"/edit").body, "value=\""+change.value+"\"")
		queue := admin.get("/admin/offers").body
		mustContain(t, queue, `data-testid="review-edit"`, "An edit of a listed offer")
		if change.field == "price" {
			// Rejected: the edit is dropped, the offer stays listed at 2.19.
			if r := admin.post("/admin/offers", "/admin/offers/"+itoa(id)+"/review", url.Values{"decision": {"rejected"}, "note": {"No reason for a dearer hour."}}); r.status != http.StatusSeeOther {
				t.Fatalf("reject the edit: %d", r.status)
			}
			if o, _ := app.db.FindOfferByID(context.Background(), id); o.Offer.Review != market.ReviewApproved || o.Offer.PriceCentsPerDeviceHour != 219 {
				t.Fatalf("after the edit's rejection: %+v", o.Offer)
			}
			mine := prov.get("/provider/offers").body
			mustNotContain(t, mine, `data-testid="edit-pending"`)
			mustContain(t, prov.get("/notifications").body, "stays listed as it was", "No reason for a dearer hour.")
			mustContain(t, visitor.get("/?max_price=2.20").body, "8× H100 SXM, Oregon")
			continue
		}
		// Approved: the edit replaces the listed version.
		if r := admin.post("/admin/offers", "/admin/offers/"+itoa(id)+"/review", url.Values{"decision": {"approved"}}); r.status != http.StatusSeeOther {
			t.Fatalf("approve the edit: %d", r.status)
		}
		o, err = app.db.FindOfferByID(context.Background(), id)
		if err != nil || o.Offer.Review != market.ReviewApproved || o.Offer.Title != change.value {
			t.Fatalf("after approving the edit: %+v, %v", o.Offer, err)
		}
		mustContain(t, visitor.get("/").body, change.value)
		mustContain(t, admin.get("/admin/offers").body, `data-testid="review-empty"`)
	}
}

func TestAnotherProvidersOfferIsNotFound(t *testing.T) {
	app := newTestApp(t)
	owner := app.client()
	owner.signUp("owner@example.com", true)
	id := owner.createOffer(validOfferForm())
	before, err := app.db.FindOfferByID(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}

	other := app.client()
	other.signUp("other@example.com", true)
	if r := other.get("/provider/offers/" + itoa(id) + "/edit"); r.status != http.StatusNotFound {
		t.Errorf("edit form of another's offer: %d, want 404", r.status)
	}
	form := validOfferForm()
	form.Set("title", "Hijacked")
	if r := other.post("/provider/offers", "/provider/offers/"+itoa(id), form); r.status != http.StatusNotFound {
		t.Errorf("update of another's offer: %d, want 404", r.status)
	}
	if r := other.post("/provider/offers", "/provider/offers/"+itoa(id)+"/state", url.Values{"state": {"withdrawn"}}); r.status != http.StatusNotFound {
		t.Errorf("withdraw of another's offer: %d, want 404", r.status)
	}
	if r := other.get("/offers/" + itoa(id)); r.status != http.StatusNotFound {
		t.Errorf("another's pending offer page: %d, want 404", r.status)
	}
	after, err := app.db.FindOfferByID(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if after.Offer.Title != before.Offer.Title || after.Offer.State != before.Offer.State {
		t.Errorf("offer changed by another provider: %+v", after.Offer)
	}
}

func TestRoleGuards(t *testing.T) {
	app := newTestApp(t)
	buyer := app.client()
	buyer.signUp("buyer@example.com", false)
	if r := buyer.get("/provider/offers"); r.status != http.StatusForbidden {
		t.Errorf("buyer on provider page: %d, want 403", r.status)
	}
	if r := buyer.get("/admin/offers"); r.status != http.StatusForbidden {
		t.Errorf("buyer on admin page: %d, want 403", r.status)
	}
	if r := buyer.post("/", "/admin/offers/1/review", url.Values{"decision": {"approved"}}); r.status != http.StatusForbidden {
		t.Errorf("buyer posting an admin review: %d, want 403", r.status)
	}
}

func TestAdminApproveAndReject(t *testing.T) {
	app := newTestApp(t)
	prov := app.client()
	prov.signUp("p@example.com", true)
	keep := prov.createOffer(validOfferForm())
	form := validOfferForm()
	form.Set("title", "Too good to be true")
	drop := prov.createOffer(form)

	admin := app.client()
	admin.signUp("root@example.com", false)
	if err := app.makeAdmin(context.Background(), admin.userID(), true); err != nil {
		t.Fatal(err)
	}
	mustContain(t, admin.get("/admin/offers").body, "Too good to be true", "8× H100 SXM, Oregon")
	if r := admin.post("/admin/offers", "/admin/offers/"+itoa(keep)+"/review", url.Values{"decision": {"approved"}}); r.status != http.StatusSeeOther {
		t.Fatalf("approve: %d", r.status)
	}
	if r := admin.post("/admin/offers", "/admin/offers/"+itoa(drop)+"/review", url.Values{"decision": {"rejected"}, "note": {"Price inconsistent with the hardware."}}); r.status != http.StatusSeeOther {
		t.Fatalf("reject: %d", r.status)
	}
	mustContain(t, prov.get("/provider/offers").body, "Price inconsistent with the hardware.", "rejected")
	body := app.client().get("/").body
	mustContain(t, body, "8× H100 SXM, Oregon")
	mustNotContain(t, body, "Too good to be true")
}

func TestErrorPagesNeverLeakInternals(t *testing.T) {
	app := newTestApp(t)
	r := app.client().get("/offers/999999")
	if r.status != http.StatusNotFound {
		t.Fatalf("status %d", r.status)
	}
	mustContain(t, r.body, `data-testid="error-page"`)
	r = app.client().get("/offers/not-a-number")
	if r.status != http.StatusNotFound {
		t.Fatalf("status %d", r.status)
	}
	r = app.client().get("/no/such/page")
	if r.status != http.StatusNotFound || !strings.Contains(r.body, "nothing at this address") {
		t.Fatalf("unknown page: %d", r.status)
	}
}

func TestBodyLimit(t *testing.T) {
	app := newTestApp(t)
	c := app.client()
	tok := c.csrf("/signup")
	big := url.Values{"_csrf": {tok}, "display_name": {strings.Repeat("x", 300<<10)}}
	r := c.postRaw("/signup", big)
	if r.status != http.StatusRequestEntityTooLarge {
		t.Fatalf("status %d, want 413", r.status)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
