package web

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pquerna/otp/totp"
	"golang.org/x/crypto/bcrypt"

	"github.com/gpumarket/gpumarket/account"
	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
)

// makeAdmin grants or removes the admin role, and enrols a new admin in
// two-factor sign-in through the store (the admin pages require it), as an
// admin who set it up on the two-factor page would be.
func (a *testApp) makeAdmin(ctx context.Context, userID int64, admin bool) error {
	a.t.Helper()
	if err := a.db.SetUserAdmin(ctx, userID, admin); err != nil || !admin {
		return err
	}
	if tf, err := a.db.FindTwoFactor(ctx, userID); err != nil || tf.Enabled() {
		return err
	}
	a.enrolTOTP(userID)
	return nil
}

// enrolTOTP turns two-factor sign-in on for the account through the store,
// with a fresh secret, and returns the secret.
func (a *testApp) enrolTOTP(userID int64) string {
	a.t.Helper()
	ctx := context.Background()
	key, err := totp.Generate(totp.GenerateOpts{Issuer: account.Issuer, AccountName: "test", SecretSize: 20})
	if err != nil {
		a.t.Fatal(err)
	}
	sealed, err := account.SealSecret(a.handler.cfg.SessionKey, userID, key.Secret())
	if err != nil {
		a.t.Fatal(err)
	}
	if err := a.db.BeginTOTP(ctx, userID, sealed, testNow); err != nil {
		a.t.Fatal(err)
	}
	// Enabled with a step long past, so every code of the test's clock is fresh.
	codes, err := account.NewRecoveryCodes()
	if err != nil {
		a.t.Fatal(err)
	}
	if err := a.db.EnableTOTP(ctx, userID, market.TOTPStep(testNow)-100, account.HashRecoveryCodes(userID, codes), testNow); err != nil {
		a.t.Fatal(err)
	}
	return key.Secret()
}

// freshCode is the code of the earliest step of the window at testNow not
// yet used by the account: what a person whose phone's clock runs a little
// ahead would type for a second login within 30 seconds.
func (a *testApp) freshCode(userID int64, secret string) string {
	a.t.Helper()
	tf, err := a.db.FindTwoFactor(context.Background(), userID)
	if err != nil {
		a.t.Fatal(err)
	}
	for _, s := range market.TOTPWindow(testNow) {
		if s > tf.LastStep {
			return codeAt(a.t, secret, market.TOTPStepStart(s))
		}
	}
	a.t.Fatalf("every step of the window at the test's clock is used")
	return ""
}

func codeAt(t *testing.T, secret string, at time.Time) string {
	t.Helper()
	code, err := totp.GenerateCode(secret, at)
	if err != nil {
		t.Fatal(err)
	}
	return code
}

// loginWithCode logs in with the password, then enters code on the code
// page, and returns the code page's answer.
func (c *client) loginWithCode(email, password, next, code string) response {
	c.app.t.Helper()
	r := c.login(email, password, next)
	if r.status != http.StatusSeeOther || r.location != "/login/code" {
		c.app.t.Fatalf("login %s: %d → %q, want the code page\n%s", email, r.status, r.location, r.body)
	}
	return c.post("/login/code", "/login/code", url.Values{"code": {code}})
}

// storeUser creates an account directly in the store with testPassword.
func (a *testApp) storeUser(email string, admin bool) market.User {
	a.t.Helper()
	hash, err := bcrypt.GenerateFromPassword([]byte(testPassword), bcrypt.MinCost)
	if err != nil {
		a.t.Fatal(err)
	}
	u, err := a.db.CreateUser(context.Background(), market.User{Email: email, DisplayName: "Tester " + email, IsBuyer: true, IsAdmin: admin}, hash, testNow)
	if err != nil {
		a.t.Fatal(err)
	}
	return u
}

var (
	secretRe   = regexp.MustCompile(`data-testid="totp-secret">([A-Z2-7 ]+)<`)
	recoveryRe = regexp.MustCompile(`<li>([a-z2-9]{4}-[a-z2-9]{4}-[a-z2-9]{4})</li>`)
)

// setUpTOTP turns two-factor sign-in on through the pages, as a person
// does, and returns the secret shown and the recovery codes.
func (c *client) setUpTOTP() (string, []string) {
	t := c.app.t
	t.Helper()
	if r := c.post("/account", "/account/two-factor", url.Values{}); r.status != http.StatusSeeOther || r.location != "/account/two-factor" {
		t.Fatalf("start: %d → %q", r.status, r.location)
	}
	r := c.get("/account/two-factor")
	mustContain(t, r.body, `data-testid="totp-qr"`, `src="data:image/png;base64,`)
	m := secretRe.FindStringSubmatch(r.body)
	if m == nil {
		t.Fatalf("no secret on the setup page:\n%s", r.body)
	}
	secret := strings.ReplaceAll(m[1], " ", "")
	r = c.post("/account/two-factor", "/account/two-factor/confirm", url.Values{"code": {codeAt(t, secret, testNow)}})
	if r.status != http.StatusSeeOther || r.location != "/account/two-factor" {
		t.Fatalf("confirm: %d → %q\n%s", r.status, r.location, r.body)
	}
	r = c.get("/account/two-factor")
	var codes []string
	for _, m := range recoveryRe.FindAllStringSubmatch(r.body, -1) {
		codes = append(codes, m[1])
	}
	if len(codes) != market.RecoveryCodeCount {
		t.Fatalf("%d recovery codes shown, want %d:\n%s", len(codes), market.RecoveryCodeCount, r.body)
	}
	return secret, codes
}

func TestTwoFactorSetUpAndLogIn(t *testing.T) {
	app := newTestApp(t)
	ctx := context.Background()
	u := app.storeUser("two@example.com", false)
	c := app.client()
	if r := c.login(u.Email, testPassword, "/account"); r.status != http.StatusSeeOther || r.location != "/account" {
		t.Fatalf("login without two-factor: %d → %q", r.status, r.location)
	}
	mustContain(t, c.get("/account").body, `data-testid="two-factor-section"`, "Turn on two-factor sign-in", `data-testid="two-factor-status">off`)

	// Setup: a wrong code is refused with the setup page kept.
	if r := c.post("/account", "/account/two-factor", url.Values{}); r.status != http.StatusSeeOther {
		t.Fatalf("start: %d", r.status)
	}
	r := c.get("/account/two-factor")
	secret := strings.ReplaceAll(secretRe.FindStringSubmatch(r.body)[1], " ", "")
	if r.status != http.StatusOK || len(secret) != 32 {
		t.Fatalf("setup page: %d, secret %q", r.status, secret)
	}
	wrong := codeAt(t, secret, testNow.Add(-time.Hour))
	r = c.post("/account/two-factor", "/account/two-factor/confirm", url.Values{"code": {wrong}})
	if r.status != http.StatusUnprocessableEntity {
		t.Fatalf("wrong setup code: %d, want 422", r.status)
	}
	mustContain(t, r.body, "That code does not match", secretRe.FindString(r.body))
	if tf, _ := app.db.FindTwoFactor(ctx, u.ID); tf.Enabled() {
		t.Fatal("on after a wrong code")
	}
	// The secret is not in the database as it was shown.
	if tf, _ := app.db.FindTwoFactor(ctx, u.ID); strings.Contains(string(tf.Secret), secret) {
		t.Error("the TOTP secret is stored in the clear")
	}

	// The right code turns it on; the recovery codes are shown once.
	confirmCode := codeAt(t, secret, testNow)
	r = c.post("/account/two-factor", "/account/two-factor/confirm", url.Values{"code": {confirmCode}})
	if r.status != http.StatusSeeOther {
		t.Fatalf("confirm: %d\n%s", r.status, r.body)
	}
	r = c.get("/account/two-factor")
	codes := recoveryRe.FindAllStringSubmatch(r.body, -1)
	if len(codes) != market.RecoveryCodeCount {
		t.Fatalf("%d recovery codes, want %d", len(codes), market.RecoveryCodeCount)
	}
	mustContain(t, r.body, `data-testid="two-factor-on"`, "shown only once")
	mustNotContain(t, c.get("/account/two-factor").body, codes[0][1], `data-testid="recovery-codes"`)
	mustContain(t, c.get("/account").body, `data-testid="two-factor-status">on`, "10 of 10 recovery codes unused")
	mail, err := app.db.ListMail(ctx, u.ID, 10)
	if err != nil || len(mail) != 1 || mail[0].Kind != store.MailSignInMethod || mail[0].To != u.Email {
		t.Fatalf("security mail after turning on: %+v, %v", mail, err)
	}

	// Logging in now asks for a code; the password alone opens nothing.
	c.post("/account", "/logout", url.Values{})
	r = c.login(u.Email, testPassword, "/account")
	if r.status != http.StatusSeeOther || r.location != "/login/code" {
		t.Fatalf("password step: %d → %q, want the code page", r.status, r.location)
	}
	if r := c.get("/account"); r.status != http.StatusSeeOther || !strings.HasPrefix(r.location, "/login") {
		t.Fatalf("account after the password alone: %d → %q, want the login page", r.status, r.location)
	}
	mustContain(t, c.get("/login/code").body, "Enter your code", `autocomplete="one-time-code"`)
	// The code that turned it on cannot be replayed.
	r = c.post("/login/code", "/login/code", url.Values{"code": {confirmCode}})
	if r.status != http.StatusUnauthorized {
		t.Fatalf("replayed setup code: %d, want 401", r.status)
	}
	mustContain(t, r.body, "already been used")
	// A wrong code is refused.
	r = c.post("/login/code", "/login/code", url.Values{"code": {wrong}})
	if r.status != http.StatusUnauthorized {
		t.Fatalf("wrong code: %d, want 401", r.status)
	}
	mustContain(t, r.body, "That code does not match")
	// The next step's code (a phone a little ahead) signs in, to where the login wanted to go.
	next := codeAt(t, secret, testNow.Add(market.TOTPPeriod))
	r = c.post("/login/code", "/login/code", url.Values{"code": {next}})
	if r.status != http.StatusSeeOther || r.location != "/account" {
		t.Fatalf("right code: %d → %q\n%s", r.status, r.location, r.body)
	}
	mustContain(t, c.get("/account").body, `data-testid="account-email">two@example.com<`)
	// The half-done login is gone.
	if r := c.get("/login/code"); r.status != http.StatusSeeOther || r.location != "/login" {
		t.Fatalf("code page after signing in: %d → %q", r.status, r.location)
	}

	// Another browser: the same code again is a replay.
	b := app.client()
	if r := b.loginWithCode(u.Email, testPassword, "/", next); r.status != http.StatusUnauthorized {
		t.Fatalf("replayed login code: %d, want 401", r.status)
	}
	// A recovery code works once.
	rc := strings.ToUpper(codes[3][1])
	if r := b.post("/login/code", "/login/code", url.Values{"code": {rc}}); r.status != http.StatusSeeOther {
		t.Fatalf("recovery code: %d\n%s", r.status, r.body)
	}
	mustContain(t, b.get("/account").body, "Signed in with a recovery code; 9 left", "9 of 10 recovery codes unused")
	d := app.client()
	if r := d.loginWithCode(u.Email, testPassword, "/", codes[3][1]); r.status != http.StatusUnauthorized {
		t.Fatalf("recovery code used twice: %d, want 401", r.status)
	}
}

func TestTwoFactorCodesThrottled(t *testing.T) {
	app := newTestApp(t)
	u := app.storeUser("slow@example.com", false)
	secret := app.enrolTOTP(u.ID)
	c := app.client()
	wrong := codeAt(t, secret, testNow.Add(-time.Hour))
	c.login(u.Email, testPassword, "/")
	for i := range codeFailuresPerAccount {
		if r := c.post("/login/code", "/login/code", url.Values{"code": {wrong}}); r.status != http.StatusUnauthorized {
			t.Fatalf("wrong code %d: %d, want 401", i+1, r.status)
		}
	}
	// Then even the right code waits, from another browser too.
	r := c.post("/login/code", "/login/code", url.Values{"code": {app.freshCode(u.ID, secret)}})
	if r.status != http.StatusTooManyRequests {
		t.Fatalf("after %d wrong codes: %d, want 429", codeFailuresPerAccount, r.status)
	}
	mustContain(t, r.body, "Too many wrong codes")
	if r := app.client().loginWithCode(u.Email, testPassword, "/", app.freshCode(u.ID, secret)); r.status != http.StatusTooManyRequests {
		t.Fatalf("another browser: %d, want 429", r.status)
	}
	// No code was spent while throttled.
	if tf, _ := app.db.FindTwoFactor(context.Background(), u.ID); tf.LastStep != market.TOTPStep(testNow)-100 {
		t.Errorf("a throttled code was used: last step %d", tf.LastStep)
	}
}

func TestTwoFactorTurnOff(t *testing.T) {
	app := newTestApp(t)
	ctx := context.Background()
	u := app.storeUser("off@example.com", false)
	secret := app.enrolTOTP(u.ID)
	c := app.client()
	if r := c.loginWithCode(u.Email, testPassword, "/", app.freshCode(u.ID, secret)); r.status != http.StatusSeeOther {
		t.Fatalf("login: %d", r.status)
	}
	r := c.post("/account/two-factor", "/account/two-factor/disable", url.Values{"proof": {"not my password"}})
	if r.status != http.StatusUnprocessableEntity {
		t.Fatalf("wrong password: %d, want 422", r.status)
	}
	mustContain(t, r.body, "neither a current code from your app nor your password")
	// A used code does not turn it off either.
	used := codeAt(t, secret, market.TOTPStepStart(market.TOTPWindow(testNow)[0]))
	if r := c.post("/account/two-factor", "/account/two-factor/disable", url.Values{"proof": {used}}); r.status != http.StatusUnprocessableEntity {
		t.Fatalf("used code: %d, want 422", r.status)
	}
	// A current code does.
	if r := c.post("/account/two-factor", "/account/two-factor/disable", url.Values{"proof": {app.freshCode(u.ID, secret)}}); r.status != http.StatusSeeOther {
		t.Fatalf("current code: %d\n%s", r.status, r.body)
	}
	if tf, _ := app.db.FindTwoFactor(ctx, u.ID); tf.Enabled() {
		t.Fatal("still on")
	}
	mail, _ := app.db.ListMail(ctx, u.ID, 10)
	if len(mail) == 0 || mail[0].Kind != store.MailSignInMethod || mail[0].Subject != "Two-factor sign-in was turned off" {
		t.Fatalf("no security mail for turning it off: %+v", mail)
	}
	// Logging in takes the password only again.
	if r := app.client().login(u.Email, testPassword, "/account"); r.location != "/account" {
		t.Fatalf("login after turning off: %d → %q", r.status, r.location)
	}
	// On again, then off with the password.
	c.setUpTOTP()
	if r := c.post("/account/two-factor", "/account/two-factor/disable", url.Values{"proof": {testPassword}}); r.status != http.StatusSeeOther {
		t.Fatalf("password: %d\n%s", r.status, r.body)
	}
	if tf, _ := app.db.FindTwoFactor(ctx, u.ID); tf.Enabled() {
		t.Fatal("still on after the password")
	}
}

func TestAdminPagesNeedTwoFactor(t *testing.T) {
	app := newTestApp(t)
	u := app.storeUser("new-admin@example.com", true)
	c := app.client()
	if r := c.login(u.Email, testPassword, "/"); r.status != http.StatusSeeOther || r.location != "/" {
		t.Fatalf("admin login without two-factor: %d → %q", r.status, r.location)
	}
	for _, path := range []string{"/admin/offers", "/admin/audit", "/admin/disputes"} {
		if r := c.get(path); r.status != http.StatusSeeOther || r.location != "/account/two-factor" {
			t.Fatalf("GET %s without two-factor: %d → %q, want the setup page", path, r.status, r.location)
		}
	}
	if r := c.post("/account", "/admin/offers/1/review", url.Values{"decision": {"approved"}}); r.status != http.StatusSeeOther || r.location != "/account/two-factor" {
		t.Fatalf("POST review without two-factor: %d → %q", r.status, r.location)
	}
	r := c.get("/account/two-factor")
	mustContain(t, r.body, `data-testid="two-factor-required"`, "Administrators must turn on two-factor sign-in", "Turn on two-factor sign-in to use the admin pages.")
	mustContain(t, c.get("/account").body, "Required for administrators")
	c.setUpTOTP()
	if r := c.get("/admin/offers"); r.status != http.StatusOK {
		t.Fatalf("admin page with two-factor on: %d", r.status)
	}
	mustNotContain(t, c.get("/account/two-factor").body, `data-testid="two-factor-required"`)
	// A buyer is not asked.
	b := app.storeUser("buyer@example.com", false)
	bc := app.client()
	bc.login(b.Email, testPassword, "/")
	mustNotContain(t, bc.get("/account").body, "Required for administrators")
}
