package e2e

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/playwright-community/playwright-go"
	"github.com/pquerna/otp/totp"
)

// Two-factor sign-in in the browser (issue 14): admin pages wait until it is on; it is set up from
// the QR page with a code computed from the secret the page shows; signing in then asks for a code.

// totpAccounts holds the TOTP secret of each account the tests set up, by database and email, and
// the last time step whose code they used (a code works once), across restarts of a server.
var totpAccounts sync.Map // db + " " + email → *totpAccount

type totpAccount struct {
	secret string
	last   int64
}

func totpKey(srv *server, email string) string { return srv.DB + " " + strings.ToLower(email) }

// serverNow is the server's clock: the test's, shifted by the server's -clock-offset if it has one.
func (s *server) serverNow() time.Time {
	now := time.Now()
	for i, a := range s.cmd.Args {
		if a == "-clock-offset" && i+1 < len(s.cmd.Args) {
			if d, err := time.ParseDuration(s.cmd.Args[i+1]); err == nil {
				now = now.Add(d)
			}
		}
	}
	return now
}

// totpCode is a code for the account that the server accepts now and that was not used before: the
// current step's, or the next one's (a phone a little ahead) when the current one was used, else
// after waiting for the next step. Codes are not taken within a second of a step's edge, so the
// server's clock agrees on the step.
func (s *server) totpCode(t *testing.T, a *totpAccount) string {
	t.Helper()
	for {
		now := s.serverNow()
		if r := now.Unix() % 30; r == 0 || r == 29 {
			time.Sleep(1500 * time.Millisecond)
			continue
		}
		cur := now.Unix() / 30
		step := max(cur, a.last+1)
		if step > cur+1 {
			time.Sleep(time.Until(time.Unix((cur+1)*30, 0).Add(time.Second)))
			continue
		}
		code, err := totp.GenerateCode(a.secret, time.Unix(step*30, 0))
		if err != nil {
			t.Fatalf("TOTP code: %v", err)
		}
		a.last = step
		return code
	}
}

// nextTOTPCode is totpCode for an account set up by setUpTwoFactor.
func (s *server) nextTOTPCode(t *testing.T, email string) string {
	t.Helper()
	v, ok := totpAccounts.Load(totpKey(s, email))
	if !ok {
		t.Fatalf("%s has no two-factor sign-in set up by the test", email)
	}
	return s.totpCode(t, v.(*totpAccount))
}

// setUpTwoFactor turns on two-factor sign-in for the signed-in account from its account page, with
// a code computed from the secret the page shows, and returns the recovery codes it shows once.
func setUpTwoFactor(t *testing.T, page playwright.Page, srv *server, email string) []string {
	t.Helper()
	gotoOK(t, page, srv.URL+"/account")
	click(t, page.GetByTestId("two-factor-start"), "Turn on two-factor sign-in")
	expectURL(t, page, srv.URL+"/account/two-factor")
	expectVisible(t, page.GetByTestId("totp-qr"), "the QR code")
	text, err := page.GetByTestId("totp-secret").TextContent()
	if err != nil {
		t.Fatalf("read the secret: %v", err)
	}
	a := &totpAccount{secret: strings.ReplaceAll(strings.TrimSpace(text), " ", "")}
	fill(t, field(page, "Code from your app"), srv.totpCode(t, a))
	click(t, page.GetByTestId("two-factor-confirm"), "Turn on")
	expectText(t, page.GetByTestId("flash"), "Two-factor sign-in is on", "flash after turning it on")
	items := page.GetByTestId("recovery-codes").Locator("li")
	if err := expect.Locator(items).ToHaveCount(10); err != nil {
		t.Fatalf("ten recovery codes are not shown: %v", err)
	}
	codes, err := items.AllTextContents()
	if err != nil {
		t.Fatal(err)
	}
	totpAccounts.Store(totpKey(srv, email), a)
	return codes
}

// enterTOTPCode answers the code page of a login to an account set up by setUpTwoFactor.
func enterTOTPCode(t *testing.T, page playwright.Page, srv *server, email string) {
	t.Helper()
	if _, ok := totpAccounts.Load(totpKey(srv, email)); !ok {
		return
	}
	expectURL(t, page, srv.URL+"/login/code")
	fill(t, field(page, "Code from your app"), srv.nextTOTPCode(t, email))
	click(t, page.GetByTestId("code-submit"), "Log in")
}

func TestAdminTwoFactorSignIn(t *testing.T) {
	srv := startServer(t)
	const email, password = "ops@twofactor.test", "an admin password 123"
	srv.createAdminAccount(t, email, password)

	// Until two-factor sign-in is on, an admin page sends the admin to set it up, saying why.
	admin := newPage(t)
	logIn(t, admin, srv, email, password)
	gotoOK(t, admin, srv.URL+"/admin/offers")
	expectURL(t, admin, srv.URL+"/account/two-factor")
	expectVisible(t, admin.GetByTestId("two-factor-required"), "the notice that admins need two-factor sign-in")
	click(t, admin.GetByTestId("two-factor-start"), "Turn on two-factor sign-in")
	expectVisible(t, admin.GetByTestId("totp-qr"), "the QR code")
	shot(t, admin, "two-factor-setup")
	noHorizontalOverflow(t, admin, "the setup page, wide")

	// A wrong code is refused with the same secret kept on the page.
	before, _ := admin.GetByTestId("totp-secret").TextContent()
	fill(t, field(admin, "Code from your app"), "000000")
	click(t, admin.GetByTestId("two-factor-confirm"), "Turn on")
	expectText(t, admin.Locator("#e-code"), "does not match", "the message on a wrong code")
	if after, _ := admin.GetByTestId("totp-secret").TextContent(); after != before {
		t.Errorf("the secret changed after a wrong code: %q → %q", before, after)
	}

	codes := setUpTwoFactor(t, admin, srv, email)
	shot(t, admin, "two-factor-recovery-codes")
	gotoOK(t, admin, srv.URL+"/admin/offers")
	expectURL(t, admin, srv.URL+"/admin/offers")

	// Signing in again asks for a code after the password; the code from the secret opens the admin pages.
	logOut(t, admin)
	logIn(t, admin, srv, email, password)
	gotoOK(t, admin, srv.URL+"/admin/offers")
	expectURL(t, admin, srv.URL+"/admin/offers")

	// On a phone: the password, then a recovery code, which works once.
	phone := newPage(t, narrow)
	gotoOK(t, phone, srv.URL+"/login")
	fill(t, field(phone, "Email"), email)
	fill(t, field(phone, "Password"), password)
	click(t, phone.GetByTestId("login-submit"), "Log in")
	expectURL(t, phone, srv.URL+"/login/code")
	noHorizontalOverflow(t, phone, "the code page, narrow")
	shot(t, phone, "two-factor-code")
	fill(t, field(phone, "Code from your app"), codes[0])
	click(t, phone.GetByTestId("code-submit"), "Log in")
	expectVisible(t, phone.GetByTestId("nav-account"), "the Account menu after a recovery code")
	expectText(t, phone.GetByTestId("flash"), "recovery code; 9 left", "flash after a recovery code")
	gotoOK(t, phone, srv.URL+"/account/two-factor")
	noHorizontalOverflow(t, phone, "the two-factor page, narrow")
}
