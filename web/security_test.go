package web

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// clientFrom is a browser whose connections come from the loopback address
// ip (all of 127.0.0.0/8 is loopback), so the server sees another client
// address than 127.0.0.1.
func (a *testApp) clientFrom(ip string) *client {
	c := a.client()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	c.http.Transport = &http.Transport{DialContext: d.DialContext}
	return c
}

// do sends a request with extra headers and returns the response with them.
func (c *client) do(method, path string, form url.Values, header http.Header) (response, http.Header) {
	c.app.t.Helper()
	var body *strings.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	} else {
		body = strings.NewReader("")
	}
	req, err := http.NewRequest(method, c.app.srv.URL+path, body)
	if err != nil {
		c.app.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	resp, err := c.http.Do(req)
	if err != nil {
		c.app.t.Fatal(err)
	}
	h := resp.Header
	return read(c.app.t, resp), h
}

// tokenCount is how many API tokens the user has, revoked ones included.
func (a *testApp) tokenCount(userID int64) int {
	a.t.Helper()
	ts, err := a.db.ListAPITokens(context.Background(), userID)
	if err != nil {
		a.t.Fatal(err)
	}
	return len(ts)
}

// A CSRF token is the session's own: a gm_csrf cookie planted with its
// matching token (as a sibling subdomain or a man in the middle on http
// could), another browser's token, the token of a session that has logged
// out, or the one from before logging in are all refused.
func TestCSRFTokenIsBoundToTheSession(t *testing.T) {
	app := newTestApp(t)
	base, _ := url.Parse(app.srv.URL)
	victim := app.client()
	victim.signUp("victim@example.com", false)
	victimID := victim.userID()
	createToken := url.Values{"token_name": {"planted"}, "token_scope": {"write"}}

	// A planted gm_csrf cookie and the token that matches it.
	const planted = "cGxhbnRlZC1ieS1hbi1hdHRhY2tlci0wMTIzNDU2Nzg5"
	victim.http.Jar.SetCookies(base, []*http.Cookie{{Name: "gm_csrf", Value: planted, Path: "/"}})
	form := url.Values{"_csrf": {planted}}
	for k, v := range createToken {
		form[k] = v
	}
	if r := victim.postRaw("/account/tokens", form); r.status != http.StatusForbidden {
		t.Errorf("planted gm_csrf cookie and its token: status %d, want 403", r.status)
	}

	// Another browser's cookies (all but its session) and its token.
	attacker := app.client()
	tok := attacker.csrf("/login")
	var theirs []*http.Cookie
	for _, ck := range attacker.http.Jar.Cookies(base) {
		if ck.Name != sessionCookie {
			theirs = append(theirs, ck)
		}
	}
	victim.http.Jar.SetCookies(base, theirs)
	form.Set("_csrf", tok)
	if r := victim.postRaw("/account/tokens", form); r.status != http.StatusForbidden {
		t.Errorf("another browser's token: status %d, want 403", r.status)
	}
	if n := app.tokenCount(victimID); n != 0 {
		t.Fatalf("%d tokens created with forged CSRF tokens", n)
	}
	// The session's own token works.
	if r := victim.post("/account", "/account/tokens", createToken); r.status != http.StatusSeeOther {
		t.Fatalf("own token: status %d, want 303", r.status)
	}

	// A session that logged out: its cookies and token are dead, for a
	// replay of the pair and for the browser itself.
	leaver := app.client()
	leaver.signUp("leaver@example.com", false)
	old := leaver.csrf("/account")
	saved := leaver.http.Jar.Cookies(base)
	if r := leaver.post("/account", "/logout", url.Values{}); r.status != http.StatusSeeOther {
		t.Fatalf("logout: %d", r.status)
	}
	replay := app.client()
	replay.http.Jar.SetCookies(base, saved)
	login := url.Values{"_csrf": {old}, "email": {"victim@example.com"}, "password": {testPassword}, "next": {"/"}}
	if r := replay.postRaw("/login", login); r.status != http.StatusForbidden {
		t.Errorf("a logged-out session's cookies and token: status %d, want 403", r.status)
	}
	leaver.get("/") // the browser carries on as a visitor
	if r := leaver.postRaw("/login", login); r.status != http.StatusForbidden {
		t.Errorf("the logged-out session's token in its own browser: status %d, want 403", r.status)
	}

	// Logging in starts a new session with a new token.
	c := app.client()
	before := c.csrf("/login")
	if r := c.login("leaver@example.com", testPassword, "/account"); r.status != http.StatusSeeOther {
		t.Fatalf("login: %d", r.status)
	}
	form.Set("_csrf", before)
	if r := c.postRaw("/account/tokens", form); r.status != http.StatusForbidden {
		t.Errorf("the token from before logging in: status %d, want 403", r.status)
	}
	if after := c.csrf("/account"); after == before {
		t.Error("the token did not change at login")
	}

	// Anonymous forms are protected by their visitor's own token.
	anon := app.client()
	anon.get("/signup")
	signup := url.Values{"_csrf": {attacker.csrf("/signup")}, "email": {"x@example.com"}, "password": {testPassword}, "display_name": {"X"}, "is_buyer": {"1"}}
	if r := anon.postRaw("/signup", signup); r.status != http.StatusForbidden {
		t.Errorf("sign-up with another visitor's token: status %d, want 403", r.status)
	}
	if n, _ := app.db.CountUsers(context.Background()); n != 2 {
		t.Errorf("%d users, want the 2 signed up", n)
	}
}

// A form posted from another origin is refused even with a valid token and
// cookies (a sibling subdomain is same-site, so SameSite cookies do not stop it).
func TestCrossOriginPostIsRefused(t *testing.T) {
	app := newTestApp(t)
	c := app.client()
	c.signUp("origin@example.com", false)
	id := c.userID()
	for _, h := range []http.Header{
		{"Sec-Fetch-Site": {"same-site"}},
		{"Sec-Fetch-Site": {"cross-site"}},
		{"Origin": {"http://evil.example"}},
	} {
		form := url.Values{"_csrf": {c.csrf("/account")}, "token_name": {"x"}, "token_scope": {"read"}}
		if r, _ := c.do("POST", "/account/tokens", form, h); r.status != http.StatusForbidden {
			t.Errorf("POST with %v: status %d, want 403", h, r.status)
		}
	}
	if n := app.tokenCount(id); n != 0 {
		t.Fatalf("%d tokens created from another origin", n)
	}
	form := url.Values{"_csrf": {c.csrf("/account")}, "token_name": {"x"}, "token_scope": {"read"}}
	if r, _ := c.do("POST", "/account/tokens", form, http.Header{"Sec-Fetch-Site": {"same-origin"}, "Origin": {app.srv.URL}}); r.status != http.StatusSeeOther {
		t.Errorf("same-origin POST: status %d, want 303", r.status)
	}
}

// The processor sends a provider whose onboarding link expired to
// /provider/payouts/refresh with a GET: it must create nothing, only lead
// to the button that does.
func TestPayoutRefreshCreatesNothing(t *testing.T) {
	app := newTestApp(t)
	prov := app.client()
	prov.signUp("refresh@example.com", true)
	id := prov.userID()
	r := prov.get("/provider/payouts/refresh")
	if _, err := app.db.FindPayoutAccount(context.Background(), id); market.ErrorCode(err) != market.CodeNotFound {
		t.Fatalf("GET /provider/payouts/refresh created a payout account (err %v)", err)
	}
	if r.status != http.StatusSeeOther || r.location != "/provider/reservations" {
		t.Fatalf("refresh: %d → %q, want a redirect to the payouts panel", r.status, r.location)
	}
	page := prov.get("/provider/reservations").body
	mustContain(t, page, "link expired", `action="/provider/payouts/connect"`)
	// The panel's POST button is what creates the account.
	if r := prov.post("/provider/reservations", "/provider/payouts/connect", url.Values{}); r.status != http.StatusSeeOther {
		t.Fatalf("connect: %d", r.status)
	}
	if _, err := app.db.FindPayoutAccount(context.Background(), id); err != nil {
		t.Errorf("connect did not create the account: %v", err)
	}
}

// Eight wrong passwords from one address lock that address out of the
// account, not the owner at another address. Failures from many addresses
// lock the account for new browsers, but not a browser that has logged in
// to it before.
func TestFailedLoginsDoNotLockTheOwnerOut(t *testing.T) {
	app := newTestApp(t)
	app.client().signUp("owner@example.com", false)

	attacker := app.clientFrom("127.0.0.2")
	for i := 0; i < loginPerPair; i++ {
		if r := attacker.login("owner@example.com", "wrong password!", "/"); r.status != http.StatusUnauthorized {
			t.Fatalf("attempt %d: status %d, want 401", i+1, r.status)
		}
	}
	r := attacker.login("owner@example.com", testPassword, "/")
	if r.status != http.StatusTooManyRequests {
		t.Fatalf("the guessing address with the right password: status %d, want 429", r.status)
	}
	mustContain(t, r.body, "Too many attempts", "Please wait 15 minutes")
	// Other accounts from the same address are not locked by it.
	app.client().signUp("neighbour@example.com", false)
	if r := attacker.login("neighbour@example.com", testPassword, "/"); r.status != http.StatusSeeOther {
		t.Errorf("another account from the guessing address: status %d, want 303", r.status)
	}

	owner := app.clientFrom("127.0.0.3")
	if r := owner.login("owner@example.com", testPassword, "/account"); r.status != http.StatusSeeOther {
		t.Fatalf("the owner at another address: status %d, want 303\n%s", r.status, r.body)
	}
	if r := owner.post("/account", "/logout", url.Values{}); r.status != http.StatusSeeOther {
		t.Fatalf("logout: %d", r.status)
	}

	// A distributed guess: each address stays under its own limits, the
	// account's failures add up to the account-wide limit.
	failures := loginPerPair
	for i := 1; failures < loginPerAccount; i++ {
		c := app.clientFrom(fmt.Sprintf("127.0.1.%d", i))
		for j := 0; j < loginPerPair && failures < loginPerAccount; j++ {
			if r := c.login("owner@example.com", "wrong password!", "/"); r.status != http.StatusUnauthorized {
				t.Fatalf("address %d attempt %d: status %d, want 401", i, j+1, r.status)
			}
			failures++
		}
	}
	r = app.clientFrom("127.0.2.1").login("owner@example.com", testPassword, "/")
	if r.status != http.StatusTooManyRequests {
		t.Fatalf("a new browser after %d failures from many addresses: status %d, want 429", failures, r.status)
	}
	mustContain(t, r.body, "too many failed log-ins", "browser you have logged in with before")
	// The owner's browser, known to the account, still gets in.
	if r := owner.login("owner@example.com", testPassword, "/account"); r.status != http.StatusSeeOther {
		t.Fatalf("the owner's known browser: status %d, want 303\n%s", r.status, r.body)
	}
}

// A password change offers to revoke every API token, saying how many
// there are; without asking, the tokens keep working.
func TestPasswordChangeOffersToRevokeTokens(t *testing.T) {
	app := newTestApp(t)
	c := app.client()
	c.signUp("tokens@example.com", false)
	first := c.createToken("ci", "read")
	second := c.createToken("laptop", "write")
	page := c.get("/account").body
	mustContain(t, page, `data-testid="active-tokens"`, "2 active API tokens", `name="revoke_tokens"`)

	r := c.post("/account", "/account/password", url.Values{"current_password": {testPassword}, "new_password": {"another long password"}})
	if r.status != http.StatusSeeOther {
		t.Fatalf("change: %d\n%s", r.status, r.body)
	}
	for _, tok := range []string{first, second} {
		if r := app.apiCall("GET", "/api/v1/ping", tok, ""); r.status != http.StatusOK {
			t.Errorf("token stopped working without being asked: %d", r.status)
		}
	}

	r = c.post("/account", "/account/password", url.Values{"current_password": {"another long password"}, "new_password": {"a third long password"}, "revoke_tokens": {"1"}})
	if r.status != http.StatusSeeOther {
		t.Fatalf("change and revoke: %d\n%s", r.status, r.body)
	}
	mustContain(t, c.get("/account").body, "2 API tokens revoked", `data-testid="active-tokens"`, "no active API tokens")
	for _, tok := range []string{first, second} {
		if r := app.apiCall("GET", "/api/v1/ping", tok, ""); r.status != http.StatusUnauthorized {
			t.Errorf("token still works after the change: %d", r.status)
		}
	}
}

// Pages that show one person's account, bookings, statements, or the
// provider's and admin's work are never stored by a browser or a proxy.
func TestPrivatePagesAreNotStored(t *testing.T) {
	app := newBillingApp(t)
	r, buyer, prov, _ := svBooking(t, app)
	app.tick(r.End().Add(time.Minute))
	admin := app.adminClient("root@example.com")
	id := fmt.Sprint(r.ID)
	pages := []struct {
		who   *client
		paths []string
	}{
		{buyer, []string{"/account", "/reservations", "/reservations/" + id, "/reservations/" + id + "/statement", "/notifications"}},
		{prov, []string{"/provider/offers", "/provider/reservations", "/provider/bookings/" + id, "/provider/bookings/" + id + "/statement"}},
		{admin, []string{"/admin/offers", "/admin/providers", "/admin/audit", "/admin/reservations/" + id, "/admin/reconciliation", "/admin/disputes"}},
	}
	for _, p := range pages {
		for _, path := range p.paths {
			r, h := p.who.do("GET", path, nil, nil)
			if r.status != http.StatusOK {
				t.Errorf("%s: status %d", path, r.status)
			}
			if cc := h.Get("Cache-Control"); !strings.Contains(cc, "no-store") {
				t.Errorf("%s: Cache-Control %q, want no-store", path, cc)
			}
		}
	}
}

// Every integer a person or client sends is bounded, and a value out of
// bounds is refused with a message naming the field, never defaulted.
func TestIntegersAreBoundedWithAMessage(t *testing.T) {
	app := newTestApp(t)
	prov := app.client()
	prov.signUp("bounds@example.com", true)

	// 5,000,000 hours was accepted, approved and quoted, and then every
	// booking got a 409.
	form := validOfferForm()
	form.Set("max_rental_hours", "5000000")
	r := prov.post("/provider/offers/new", "/provider/offers", form)
	if r.status != http.StatusUnprocessableEntity {
		t.Fatalf("max_rental_hours 5000000: status %d, want 422", r.status)
	}
	mustContain(t, r.body, `data-testid="error-max_rental_hours"`, "26,352 hours")
	for _, field := range []string{"memory_gb", "devices_per_node", "nodes", "cpu_cores", "ram_gb", "storage_gb",
		"min_rental_hours", "max_rental_hours", "provisioning_mins", "free_cancel_hours"} {
		for _, v := range []string{"9223372036854775807", "-9223372036854775808", "99999999999999999999", "2147483648"} {
			form := validOfferForm()
			form.Set(field, v)
			r := prov.post("/provider/offers/new", "/provider/offers", form)
			if r.status != http.StatusUnprocessableEntity || !strings.Contains(r.body, `data-testid="error-`+field+`"`) {
				t.Errorf("%s=%s: status %d, want 422 with a message next to the field", field, v, r.status)
			}
		}
	}
	if offers, _ := app.db.ListProviderOffers(context.Background(), prov.userID()); len(offers) != 0 {
		t.Fatalf("%d offers stored with out-of-bounds integers", len(offers))
	}

	// The API says which parameter is wrong instead of defaulting it.
	tok := prov.createToken("bounds", "write")
	for _, q := range []struct{ query, field string }{
		{"limit=0", "limit"}, {"limit=201", "limit"}, {"limit=-1", "limit"}, {"limit=ten", "limit"},
		{"limit=99999999999999999999", "limit"}, {"offset=-1", "offset"}, {"offset=x", "offset"},
		{"offset=9223372036854775807", "offset"},
	} {
		r := app.apiCall("GET", "/api/v1/offers?"+q.query, tok, "")
		var body struct {
			Error struct {
				Message string            `json:"message"`
				Fields  map[string]string `json:"fields"`
			} `json:"error"`
		}
		_ = json.Unmarshal([]byte(r.body), &body)
		if r.status != http.StatusBadRequest || body.Error.Fields[q.field] == "" || !strings.Contains(body.Error.Message, q.field) {
			t.Errorf("%s: status %d %s, want 400 naming %s", q.query, r.status, r.body, q.field)
		}
	}
	for _, q := range []string{"", "limit=1", "limit=200&offset=0", "offset=1000000"} {
		if r := app.apiCall("GET", "/api/v1/offers?"+q, tok, ""); r.status != http.StatusOK {
			t.Errorf("%q: status %d, want 200", q, r.status)
		}
	}
	// The offer API names the field too.
	o := market.Offer{
		Title: "8× H100 SXM", AcceleratorID: "nvidia-h100-80gb-sxm", MemoryGB: 80, DevicesPerNode: 8, Nodes: 1,
		Interconnect: market.InterconnectNVLink, NetworkID: "none", CPUCores: 96, RAMGB: 1024, StorageGB: 8000,
		DriverVersion: "550.90", CUDAVersion: "12.4", OSImage: "Ubuntu 22.04", ContainerRuntime: "Docker 26", RegionID: "us-west-or",
		AvailableFrom: testNow, AvailableUntil: testNow.AddDate(0, 1, 0), MinRentalHours: 1, MaxRentalHours: 5_000_000,
		ProvisioningMins: 10, PriceCentsPerDeviceHour: 239, BillingBasis: market.BillingWallClock, UptimeBP: 9950,
		CreditSchedule: []market.CreditTier{{BelowBP: 9950, CreditBP: 1000}}, CreditCapBP: 10000, FreeCancelHours: 24, CancelFeeBP: 2500,
	}
	b, err := market.EncodeOfferJSON(o)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	if r := app.apiCall("POST", "/api/v1/provider/offers", tok, doc); r.status != http.StatusBadRequest || !strings.Contains(r.body, `"max_rental_hours"`) {
		t.Errorf("API offer with 5,000,000 hours: %d %s", r.status, r.body)
	}

	// Page numbers.
	for _, path := range []string{"/?page=0", "/?page=-3", "/?page=ten", "/?page=99999999999999999999", "/?page=9223372036854775807"} {
		r := app.client().get(path)
		if r.status != http.StatusUnprocessableEntity || !strings.Contains(r.body, "page number") {
			t.Errorf("%s: status %d, want 422 naming the page number", path, r.status)
		}
	}
	if r := app.client().get("/?page=2"); r.status != http.StatusOK {
		t.Errorf("/?page=2: status %d", r.status)
	}
	admin := app.adminClient("root@example.com")
	if r := admin.get("/admin/audit?page=9223372036854775807"); r.status != http.StatusUnprocessableEntity || !strings.Contains(r.body, "page number") {
		t.Errorf("audit page 2^63-1: status %d, want 422 naming the page number", r.status)
	}
}

// Text fields refuse NUL and other control characters, and e-mail
// addresses the invisible characters of look-alike accounts, with the
// message next to the field.
func TestTextRefusesControlAndInvisibleCharacters(t *testing.T) {
	app := newTestApp(t)
	for _, tc := range []struct{ field, value string }{
		{"display_name", "Ada\x00"},
		{"organisation", "ACME\x1b[2J"},
		{"email", "ad\u202ea@example.com"},
		{"email", "ad\u200ba@example.com"},
	} {
		form := url.Values{"email": {"fine@example.com"}, "password": {testPassword}, "display_name": {"Fine"}, "is_buyer": {"1"}}
		form.Set(tc.field, tc.value)
		r := app.client().post("/signup", "/signup", form)
		if r.status != http.StatusUnprocessableEntity || !strings.Contains(r.body, `data-testid="error-`+tc.field+`"`) {
			t.Errorf("sign-up with %s=%+q: status %d, want 422 with a message next to the field", tc.field, tc.value, r.status)
		}
	}
	if n, _ := app.db.CountUsers(context.Background()); n != 0 {
		t.Fatalf("%d users created with control or invisible characters", n)
	}

	prov := app.client()
	prov.signUp("text@example.com", true)
	form := validOfferForm()
	form.Set("title", "8× H100\x00")
	r := prov.post("/provider/offers/new", "/provider/offers", form)
	if r.status != http.StatusUnprocessableEntity || !strings.Contains(r.body, `data-testid="error-title"`) {
		t.Errorf("offer title with NUL: status %d", r.status)
	}
	r = prov.post("/account", "/account/tokens", url.Values{"token_name": {"ci\x07"}, "token_scope": {"read"}})
	if r.status != http.StatusUnprocessableEntity || !strings.Contains(r.body, `data-testid="error-token_name"`) {
		t.Errorf("token name with a bell: status %d", r.status)
	}
	if m := regexp.MustCompile(`U\+0007`).FindString(r.body); m == "" {
		t.Error("the message does not name the character")
	}
}
