package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/store"
)

// Recovery and verification (issue 14) in a browser: sign up, confirm the address from the mailed
// link, forget the password, set a new one from the mailed link, log in with it.

// mailLink reads the link (a path) of the newest message of kind to the address from the running
// server's outbox, waiting a little for it: what a person would click in their mail.
func (s *server) mailLink(t *testing.T, to, kind string) string {
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
				return m.URLPath
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
	click(t, page.GetByTestId("logout"), "Log out")

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
