package web

import (
	"context"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/account"
	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
)

// An unconfirmed address can browse and quote but not book, list offers or
// connect payouts; once confirmed from the mailed
// link it can. The link works once.
func TestUnverifiedCannotTradeUntilTheLinkIsFollowed(t *testing.T) {
	app := newBillingApp(t)
	app.listedOffer("nvidia-h100-80gb-sxm", 8, 1, "us-east-va", 219)
	c := app.client()
	c.signUpUnverified("new@example.com", true)

	acct := c.get("/account")
	mustContain(t, acct.body, `data-testid="verify-banner"`, `data-testid="address-status">not confirmed`, `data-testid="resend-verification"`)
	quotes := c.get("/requests?" + trainingQuery().Encode())
	if quotes.status != http.StatusOK {
		t.Fatalf("quotes: %d", quotes.status)
	}
	reqJSON, sig := firstQuote(t, quotes.body)
	refused := []struct {
		what string
		r    response
	}{
		{"book", c.post("/requests", "/reservations", url.Values{"request": {reqJSON}, "quote_id": {sig}})},
		{"offer form", c.get("/provider/offers/new")},
		{"list an offer", c.post("/provider/offers", "/provider/offers", validOfferForm())},
		{"connect payouts", c.post("/provider/reservations", "/provider/payouts/connect", url.Values{})},
	}
	for _, x := range refused {
		if x.r.status != http.StatusForbidden {
			t.Fatalf("%s unverified: status %d, want 403\n%.2000s", x.what, x.r.status, x.r.body)
		}
		mustContain(t, x.r.body, `data-testid="verify-needed"`, "Confirm your e-mail address first", `data-testid="resend-verification"`)
	}
	// The API needs a token, which an unconfirmed account cannot create
	// (TestUnconfirmedAccountHoldsNothingThatActsForIt).
	if n, _ := app.db.ListProviderOffers(context.Background(), c.userID()); len(n) != 0 {
		t.Fatalf("%d offers listed by an unverified account", len(n))
	}

	// Asking again replaces the link; the first stops working.
	first := app.mailLink("new@example.com", store.MailVerifyAddress)
	if r := c.post("/account", "/account/verify/resend", url.Values{"next": {"/account"}}); r.status != http.StatusSeeOther || r.location != "/account" {
		t.Fatalf("resend: %d → %q", r.status, r.location)
	}
	second := app.mailLink("new@example.com", store.MailVerifyAddress)
	if second == first || !strings.HasPrefix(second, "/verify?token=") {
		t.Fatalf("resent link %q (first %q)", second, first)
	}
	if r := c.get(first); r.status != http.StatusConflict {
		t.Fatalf("replaced link: %d, want 409", r.status)
	}
	r := c.get(second)
	if r.status != http.StatusSeeOther || r.location != "/account" {
		t.Fatalf("verify: %d → %q", r.status, r.location)
	}
	mustContain(t, c.get(r.location).body, "Your e-mail address is confirmed", `data-testid="address-status">confirmed`)
	again := c.get(second)
	if again.status != http.StatusConflict {
		t.Fatalf("second use: %d, want 409", again.status)
	}
	mustContain(t, again.body, `data-testid="link-problem"`, "already been used")
	if strings.Contains(c.get("/").body, `data-testid="verify-banner"`) {
		t.Fatal("the banner stays after confirming")
	}

	// Now everything that was refused works.
	if r := c.get("/provider/offers/new"); r.status != http.StatusOK {
		t.Fatalf("offer form after verifying: %d", r.status)
	}
	c.createOffer(validOfferForm())
	if r := c.post("/provider/reservations", "/provider/payouts/connect", url.Values{}); r.status != http.StatusSeeOther {
		t.Fatalf("connect payouts after verifying: %d\n%.2000s", r.status, r.body)
	}
	res := app.bookAndPay(c)
	if res.ID == 0 {
		t.Fatal("no reservation")
	}
	requireReconciled(t, app.testApp)
}

func TestExpiredVerificationLinkSaysSo(t *testing.T) {
	clock := newTestClock(testNow)
	app := newTestAppWith(t, func(cfg *Config) { cfg.Now = clock.now })
	c := app.client()
	c.signUpUnverified("late@example.com", false)
	link := app.mailLink("late@example.com", store.MailVerifyAddress)
	clock.set(testNow.Add(market.VerifyLinkTTL))
	r := app.client().get(link)
	if r.status != http.StatusConflict {
		t.Fatalf("expired link: %d, want 409", r.status)
	}
	mustContain(t, r.body, `data-testid="link-problem"`, "This confirmation link does not work", "has expired", "48 hours", `href="/account"`)
	if r := app.client().get("/verify?token=made-up"); r.status != http.StatusNotFound || !strings.Contains(r.body, "not valid") {
		t.Fatalf("unknown token: %d\n%s", r.status, r.body)
	}
	// Still unverified; a new link works.
	if r := c.get("/account"); !strings.Contains(r.body, "not confirmed") {
		t.Fatal("an expired link confirmed the address")
	}
	c.post("/account", "/account/verify/resend", url.Values{"next": {"/account"}})
	if r := app.client().get(app.mailLink("late@example.com", store.MailVerifyAddress)); r.status != http.StatusSeeOther || r.location != "/login?next=%2Faccount" {
		t.Fatalf("new link in another browser: %d → %q", r.status, r.location)
	}
}

// resetLink asks for a reset link for email from a fresh client and
// returns the link mailed.
func (a *testApp) resetLink(email string) string {
	a.t.Helper()
	r := a.client().post("/password/forgot", "/password/forgot", url.Values{"email": {email}})
	if r.status != http.StatusSeeOther || r.location != "/password/forgot/sent" {
		a.t.Fatalf("forgot %s: %d → %q\n%s", email, r.status, r.location, r.body)
	}
	return a.mailLink(email, store.MailPasswordReset)
}

func TestPasswordResetEndsEverySessionAndWorksOnce(t *testing.T) {
	clock := newTestClock(testNow)
	app := newTestAppWith(t, func(cfg *Config) { cfg.Now = clock.now })
	owner, other := app.client(), app.client()
	owner.signUp("ada@example.com", false)
	other.login("ada@example.com", testPassword, "/")
	if r := other.get("/account"); r.status != http.StatusOK {
		t.Fatalf("second session: %d", r.status)
	}

	link := app.resetLink("ADA@example.com")
	if !strings.HasPrefix(link, "/password/reset?token=") {
		t.Fatalf("reset link %q", link)
	}
	form := owner.get(link)
	if form.status != http.StatusOK {
		t.Fatalf("reset form: %d", form.status)
	}
	mustContain(t, form.body, "Choose a new password", `name="token"`)
	token := mustQuery(t, link, "token")
	// A bad password keeps the link.
	r := owner.post(link, "/password/reset", url.Values{"token": {token}, "new_password": {"short"}})
	if r.status != http.StatusUnprocessableEntity || !strings.Contains(r.body, `data-testid="error-new_password"`) {
		t.Fatalf("short password: %d", r.status)
	}
	r = owner.post(link, "/password/reset", url.Values{"token": {token}, "new_password": {"a brand new password"}})
	if r.status != http.StatusSeeOther || r.location != "/login" {
		t.Fatalf("reset: %d → %q\n%s", r.status, r.location, r.body)
	}
	mustContain(t, owner.get("/login").body, "Your password was changed, and every session of your account was logged out (2 sessions)")
	for name, c := range map[string]*client{"the resetting browser": owner, "the other browser": other} {
		if r := c.get("/account"); r.status != http.StatusSeeOther || !strings.HasPrefix(r.location, "/login") {
			t.Fatalf("%s after the reset: %d → %q, want logged out", name, r.status, r.location)
		}
	}
	if r := app.client().login("ada@example.com", testPassword, "/"); r.status != http.StatusUnauthorized {
		t.Fatalf("old password: %d, want 401", r.status)
	}
	if r := app.client().login("ada@example.com", "a brand new password", "/"); r.status != http.StatusSeeOther {
		t.Fatalf("new password: %d", r.status)
	}

	// Used once: the form and the post both refuse it.
	if r := app.client().get(link); r.status != http.StatusConflict || !strings.Contains(r.body, "already been used") {
		t.Fatalf("used link's form: %d\n%s", r.status, r.body)
	}
	c := app.client()
	if r := c.post("/password/forgot", "/password/reset", url.Values{"token": {token}, "new_password": {"yet another password"}}); r.status != http.StatusConflict {
		t.Fatalf("reused link: %d", r.status)
	}
	if r := app.client().login("ada@example.com", "yet another password", "/"); r.status != http.StatusUnauthorized {
		t.Fatal("a used link changed the password")
	}

	// Expired after an hour.
	link = app.resetLink("ada@example.com")
	clock.set(testNow.Add(market.ResetLinkTTL))
	r = app.client().get(link)
	if r.status != http.StatusConflict {
		t.Fatalf("expired link: %d", r.status)
	}
	mustContain(t, r.body, "This reset link does not work", "has expired", "1 hour", `href="/password/forgot"`)
	if r := c.post("/password/forgot", "/password/reset", url.Values{"token": {mustQuery(t, link, "token")}, "new_password": {"yet another password"}}); r.status != http.StatusConflict {
		t.Fatalf("expired link posted: %d", r.status)
	}
}

func mustQuery(t *testing.T, link, key string) string {
	t.Helper()
	u, err := url.Parse(link)
	if err != nil {
		t.Fatal(err)
	}
	return u.Query().Get(key)
}

// Asking for a reset link answers the same for an address with an account
// and one without: the same status, body and page, in comparable time.
func TestForgotPasswordDoesNotTellWhetherAnAccountExists(t *testing.T) {
	app := newTestApp(t)
	app.client().signUp("known@example.com", false)
	ask := func(email string) (response, response, time.Duration) {
		c := app.client()
		tok := c.csrf("/password/forgot")
		start := time.Now()
		r := c.postRaw("/password/forgot", url.Values{"_csrf": {tok}, "email": {email}})
		took := time.Since(start)
		return r, c.get(r.location), took
	}
	var known, unknown []time.Duration
	for i := 0; i < 4; i++ { // within account.ResetPerAddress
		kr, kp, kt := ask("known@example.com")
		ur, up, ut := ask("unknown@example.com")
		if kr != ur || kr.status != http.StatusSeeOther || kr.location != "/password/forgot/sent" {
			t.Fatalf("known: %d → %q %q; unknown: %d → %q %q", kr.status, kr.location, kr.body, ur.status, ur.location, ur.body)
		}
		if csrfRe.ReplaceAllString(kp.body, "") != csrfRe.ReplaceAllString(up.body, "") || kp.status != up.status {
			t.Fatalf("the pages differ:\n%s\n---\n%s", kp.body, up.body)
		}
		mustContain(t, kp.body, `data-testid="forgot-sent"`, "If an account exists for that address")
		known, unknown = append(known, kt), append(unknown, ut)
	}
	// Timing: the medians of the two within a generous factor (both paths
	// record a throttle hit and run one write transaction; the known one also
	// inserts a link and a message). Loose, so a busy machine does not fail it;
	// a path that skipped the work, or did a bcrypt more, would stand out.
	km, um := median(known), median(unknown)
	if km > 5*um+20*time.Millisecond || um > 5*km+20*time.Millisecond {
		t.Errorf("known addresses take %s (median), unknown %s: too different", km, um)
	}
	t.Logf("median time: known %s, unknown %s", km, um)
	if all, _ := app.db.ListMail(context.Background(), 0, 100); countMailKind(all, store.MailPasswordReset) != 4 {
		t.Fatalf("%d reset mails, want 4 (to the known address only)", countMailKind(all, store.MailPasswordReset))
	}

	// The per-address limit applies alike.
	for _, email := range []string{"known@example.com", "unknown@example.com"} {
		ask(email)
		r, _, _ := ask(email)
		if r.status != http.StatusTooManyRequests || !strings.Contains(r.body, "Several links were asked for this address") {
			t.Fatalf("%s over the limit: %d", email, r.status)
		}
	}
}

// The client-address limit of reset requests.
func TestForgotPasswordIsThrottledPerClient(t *testing.T) {
	app := newTestApp(t)
	c := app.client()
	for i := 0; i < account.ResetPerNetwork; i++ {
		r := c.post("/password/forgot", "/password/forgot", url.Values{"email": {"x" + string(rune('a'+i)) + "@example.com"}})
		if r.status != http.StatusSeeOther {
			t.Fatalf("request %d: %d", i+1, r.status)
		}
	}
	r := c.post("/password/forgot", "/password/forgot", url.Values{"email": {"more@example.com"}})
	if r.status != http.StatusTooManyRequests || !strings.Contains(r.body, "Too many attempts") {
		t.Fatalf("over the client limit: %d", r.status)
	}
}

func median(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func countMailKind(ms []store.OutboxMail, kind string) int {
	n := 0
	for _, m := range ms {
		if m.Kind == kind {
			n++
		}
	}
	return n
}

func TestAddressChangeNeedsThePasswordAndTheNewAddressLink(t *testing.T) {
	app := newTestApp(t)
	c := app.client()
	c.signUp("old@example.com", false)

	r := c.post("/account", "/account/email", url.Values{"new_email": {"new@example.com"}, "email_password": {"wrong password"}})
	if r.status != http.StatusUnprocessableEntity {
		t.Fatalf("wrong password: %d", r.status)
	}
	mustContain(t, r.body, `data-testid="error-email_password"`, `value="new@example.com"`)
	r = c.post("/account", "/account/email", url.Values{"new_email": {"old@example.com"}, "email_password": {testPassword}})
	if r.status != http.StatusUnprocessableEntity || !strings.Contains(r.body, "already your address") {
		t.Fatalf("same address: %d", r.status)
	}
	r = c.post("/account", "/account/email", url.Values{"new_email": {"New@Example.com"}, "email_password": {testPassword}})
	if r.status != http.StatusSeeOther || r.location != "/account" {
		t.Fatalf("change: %d → %q\n%s", r.status, r.location, r.body)
	}
	page := c.get("/account").body
	mustContain(t, page, "We sent a link to new@example.com", `data-testid="account-email">old@example.com<`)

	link := app.mailLink("new@example.com", store.MailVerifyAddress)
	if !strings.HasPrefix(link, "/account/email/confirm?token=") {
		t.Fatalf("confirmation link %q", link)
	}
	r = c.get(link)
	if r.status != http.StatusSeeOther || r.location != "/account" {
		t.Fatalf("confirm: %d → %q", r.status, r.location)
	}
	mustContain(t, c.get("/account").body, "Your e-mail address is now new@example.com", `data-testid="account-email">new@example.com<`,
		`data-testid="address-status">confirmed`)
	all, _ := app.db.ListMail(context.Background(), 0, 100)
	told := false
	for _, m := range all {
		if m.Kind == store.MailAddressChange && m.To == "old@example.com" && strings.Contains(m.Body, "new@example.com") {
			told = true
		}
	}
	if !told {
		t.Fatalf("the old address was not told: %+v", all)
	}
	if r := c.get(link); r.status != http.StatusConflict {
		t.Fatalf("second use: %d", r.status)
	}
	if r := app.client().login("old@example.com", testPassword, "/"); r.status != http.StatusUnauthorized {
		t.Fatalf("old address logs in: %d", r.status)
	}
	if r := app.client().login("new@example.com", testPassword, "/"); r.status != http.StatusSeeOther {
		t.Fatalf("new address: %d", r.status)
	}
}
