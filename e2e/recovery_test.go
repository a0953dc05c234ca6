package e2e

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/store"
)

// Recovery and verification (issue 14) in a browser: sign up, confirm the address from the mailed
// link, forget the password, set a new one from the mailed link, log in with it.

// mailLink is the link (a path) of the newest message of kind to the address, waiting a little
// for it: what a person would click in their mail. On a server that sends mail (withSMTP) it is
// read from the text part of the message the SMTP server received; otherwise from the outbox.
func (s *server) mailLink(t *testing.T, to, kind string) string {
	t.Helper()
	m := s.outboxMail(t, to, kind)
	if s.mail == nil {
		return m.URLPath
	}
	// The outbox names the message (its Message-ID); the link is the one in the mail received.
	id := "<outbox-" + strconv.FormatInt(m.ID, 10) + "@127.0.0.1>"
	deadline := time.Now().Add(10 * time.Second)
	for {
		for _, r := range s.mail.Messages() {
			if r.Header.Get("Message-Id") != id {
				continue
			}
			if len(r.To) != 1 || r.To[0] != to {
				t.Fatalf("%s mail %s went to %v, want %s", kind, id, r.To, to)
			}
			for _, line := range strings.Split(r.Text, "\n") {
				if path, ok := strings.CutPrefix(strings.TrimSpace(line), s.URL+"/"); ok && !strings.HasPrefix(path, "account/mail") {
					return "/" + path
				}
			}
			t.Fatalf("no link to %s in the %s mail received:\n%s", s.URL, kind, r.Text)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the SMTP server did not receive the %s mail %s to %s (%d messages received)", kind, id, to, len(s.mail.Messages()))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// outboxMail is the newest message of kind to the address that carries a link in the running
// server's outbox, waiting a little for it.
func (s *server) outboxMail(t *testing.T, to, kind string) store.OutboxMail {
	t.Helper()
	ctx := context.Background()
	db, err := store.Open(ctx, s.DB)
	if err != nil {
		t.Fatalf("open the server's database: %v", err)
	}
	defer db.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		all, err := db.ListMail(ctx, 0, 1000)
		if err != nil {
			t.Fatalf("read the outbox: %v", err)
		}
		for _, m := range all {
			if m.To == to && m.Kind == kind && m.URLPath != "" {
				return m
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s mail to %s in the outbox (%d messages)", kind, to, len(all))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestForgottenPasswordIsResetFromTheMailedLink(t *testing.T) {
	srv := startServer(t)
	page := newPage(t)
	const email = "rosa@recover.test"
	signUp(t, page, srv, email, "Rosa Recover", "", true, false)
	gotoOK(t, page, srv.URL+"/account")
	expectText(t, page.GetByTestId("address-status"), "confirmed", "the account page's address status")
	logOut(t, page)

	gotoOK(t, page, srv.URL+"/login")
	click(t, page.GetByTestId("forgot-link"), "Forgot your password?")
	fill(t, field(page, "Email"), email)
	shot(t, page, "forgot")
	click(t, page.GetByTestId("forgot-submit"), "Send the link")
	expectText(t, page.GetByTestId("forgot-sent"), "If an account exists for that address", "the same answer for every address")

	gotoOK(t, page, srv.URL+srv.mailLink(t, email, store.MailPasswordReset))
	fill(t, field(page, "New password"), "short")
	click(t, page.GetByTestId("reset-submit"), "Set the new password")
	expectText(t, page.GetByTestId("error-new_password"), "at least 10 characters", "a too-short password refused")
	fill(t, field(page, "New password"), "a new and better password")
	shot(t, page, "reset")
	click(t, page.GetByTestId("reset-submit"), "Set the new password")
	expectURL(t, page, srv.URL+"/login")
	expectText(t, page.GetByTestId("flash"), "every session of your account was logged out", "the flash after the reset")

	fill(t, field(page, "Email"), email)
	fill(t, field(page, "Password"), "a long enough password")
	click(t, page.GetByTestId("login-submit"), "Log in")
	expectText(t, page.GetByTestId("form-message"), "do not match", "the old password refused")
	logIn(t, page, srv, email, "a new and better password")
}

// The browser test in one go, with the mail really sent: sign up and confirm the address
// from the link in the mail received, forget the password and set a new one from the mail, turn on
// two-factor sign-in with a code computed from the secret shown, sign out, and sign in again with
// the new password and a code.
func TestAccountLifecycleFromMail(t *testing.T) {
	srv := startServer(t, withSMTP(t))
	page := newPage(t)
	const email, password = "lin@lifecycle.test", "a fresh password 2026"
	signUp(t, page, srv, email, "Lin Lifecycle", "", true, false)
	gotoOK(t, page, srv.URL+"/account")
	expectText(t, page.GetByTestId("address-status"), "confirmed", "the account page's address status")
	logOut(t, page)

	gotoOK(t, page, srv.URL+"/login")
	click(t, page.GetByTestId("forgot-link"), "Forgot your password?")
	fill(t, field(page, "Email"), email)
	click(t, page.GetByTestId("forgot-submit"), "Send the link")
	expectText(t, page.GetByTestId("forgot-sent"), "If an account exists for that address", "the answer to the forgotten password")
	gotoOK(t, page, srv.URL+srv.mailLink(t, email, store.MailPasswordReset))
	fill(t, field(page, "New password"), password)
	click(t, page.GetByTestId("reset-submit"), "Set the new password")
	expectURL(t, page, srv.URL+"/login")
	expectText(t, page.GetByTestId("flash"), "every session of your account was logged out", "the flash after the reset")

	// logIn enters no code yet: two-factor sign-in is not on.
	logIn(t, page, srv, email, password)
	setUpTwoFactor(t, page, srv, email)
	gotoOK(t, page, srv.URL+"/account")
	expectText(t, page.GetByTestId("two-factor-status"), "on", "the account page's two-factor status")
	logOut(t, page)

	// The password alone no longer signs in: the code page follows, and a code from the secret opens the account.
	logIn(t, page, srv, email, password)
	gotoOK(t, page, srv.URL+"/account")
	expectText(t, page.GetByTestId("account-email"), email, "the account signed in to")
	noHorizontalOverflow(t, page, "the account page, wide")
}
