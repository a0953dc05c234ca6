package workflow

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pquerna/otp/totp"
	"golang.org/x/crypto/bcrypt"

	"github.com/gpumarket/gpumarket/account"
	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
	"github.com/gpumarket/gpumarket/store/pgtest"
)

// newAccounts is a workflow over a fresh database with a session key, a
// cheap password cost and a clock the test moves.
func newAccounts(t *testing.T) (*Service, *store.DB, *time.Time) {
	t.Helper()
	ctx := context.Background()
	db, err := store.Open(ctx, pgtest.DSN(t, filepath.Join(t.TempDir(), "acct.db")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	now := t0
	wf, err := New(ctx, Config{Now: func() time.Time { return now }, SessionKey: []byte(strings.Repeat("s", 32)), PasswordCost: bcrypt.MinCost},
		db, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return wf, db, &now
}

func wantCode(t *testing.T, what string, err error, code market.Code) {
	t.Helper()
	if got := market.ErrorCode(err); got != code {
		t.Fatalf("%s: %v (code %q), want code %q", what, err, got, code)
	}
}

func signUp(t *testing.T, wf *Service, email, pw string) int64 {
	t.Helper()
	su := market.SignUp{Email: email, Password: pw, DisplayName: "Ada", IsBuyer: true}
	id, existed, err := wf.SignUp(context.Background(), &su, "198.51.100.1")
	if err != nil || existed {
		t.Fatalf("sign up %s: %d, existed %v, %v", email, id, existed, err)
	}
	return id
}

func TestSignUpLogInAndOut(t *testing.T) {
	ctx := context.Background()
	wf, db, _ := newAccounts(t)
	su := market.SignUp{Email: "  Ada@Example.com ", Password: "a long password", DisplayName: " Ada ", IsBuyer: true}
	id, existed, err := wf.SignUp(ctx, &su, "198.51.100.1")
	if err != nil || existed || su.Email != "ada@example.com" || su.DisplayName != "Ada" {
		t.Fatalf("sign up: %d, existed %v, %v; form now %+v", id, existed, err, su)
	}
	again := market.SignUp{Email: "ada@example.com", Password: "another long one", DisplayName: "Eve", IsBuyer: true}
	if id2, existed, err := wf.SignUp(ctx, &again, "198.51.100.1"); err != nil || !existed || id2 != id {
		t.Fatalf("second sign-up of the address: %d, existed %v, %v; want %d, existed", id2, existed, err, id)
	}
	bad := market.SignUp{Email: "not an address", Password: "short"}
	_, _, err = wf.SignUp(ctx, &bad, "198.51.100.1")
	if market.ErrorCode(err) != market.CodeInvalid || market.FieldErrors(err)["email"] == "" || market.FieldErrors(err)["password"] == "" {
		t.Fatalf("invalid sign-up: %v", err)
	}

	in := LogIn{Email: "ada@example.com", Password: "a long password", Network: "198.51.100.1"}
	_, err = wf.LogIn(ctx, LogIn{Email: in.Email, Password: "not the password", Network: in.Network})
	wantCode(t, "wrong password", err, market.CodeUnauthorized)
	_, err = wf.LogIn(ctx, LogIn{Email: "nobody@example.com", Password: "a long password", Network: in.Network})
	wantCode(t, "unknown email", err, market.CodeUnauthorized)
	_, err = wf.LogIn(ctx, LogIn{Email: in.Email, Network: in.Network})
	wantCode(t, "no password", err, market.CodeInvalid)

	first, err := wf.LogIn(ctx, in)
	if err != nil || first.User.ID != id || first.Session.ID == "" || first.Challenge != "" ||
		!first.Session.ExpiresAt.Equal(t0.Add(account.SessionTTL)) {
		t.Fatalf("log in: %+v, %v", first, err)
	}
	// Logging in again from the same browser ends its old session.
	in.OldSession = first.Session.ID
	second, err := wf.LogIn(ctx, in)
	if err != nil || second.Session.ID == first.Session.ID {
		t.Fatalf("second log-in: %+v, %v", second, err)
	}
	_, _, err = db.FindSession(ctx, first.Session.ID, t0)
	wantCode(t, "the old session", err, market.CodeNotFound)
	if err := wf.LogOut(ctx, second.Session.ID); err != nil {
		t.Fatal(err)
	}
	_, _, err = db.FindSession(ctx, second.Session.ID, t0)
	wantCode(t, "the session logged out", err, market.CodeNotFound)
}

// Failures lock an account out from one network after account.LoginPerPair,
// not from another; failures from everywhere lock it out for a day except
// from a browser it logged in with before.
func TestLogInThrottles(t *testing.T) {
	ctx := context.Background()
	wf, _, now := newAccounts(t)
	signUp(t, wf, "ada@example.com", "a long password")
	wrong := LogIn{Email: "ada@example.com", Password: "guess", Network: "203.0.113.7"}
	for i := range account.LoginPerPair {
		_, err := wf.LogIn(ctx, wrong)
		wantCode(t, "guess "+strconv.Itoa(i), err, market.CodeUnauthorized)
	}
	right := LogIn{Email: "ada@example.com", Password: "a long password", Network: "203.0.113.7"}
	_, err := wf.LogIn(ctx, right)
	wantCode(t, "the right password after the pair's limit", err, market.CodeRateLimited)
	right.Network = "198.51.100.1"
	if _, err := wf.LogIn(ctx, right); err != nil {
		t.Fatalf("from another network: %v", err)
	}
	// The short window passes; the account's daily count is reached from
	// many networks, within each pair's daily limit.
	*now = now.Add(account.LoginWindow)
	failures := account.LoginPerPair
	for n := 1; failures < account.LoginPerAccount; n++ {
		g := LogIn{Email: "ada@example.com", Password: "guess", Network: "203.0.114." + strconv.Itoa(n)}
		for j := 0; j < account.LoginPerPair && failures < account.LoginPerAccount; j++ {
			_, err := wf.LogIn(ctx, g)
			wantCode(t, "guess", err, market.CodeUnauthorized)
			failures++
		}
	}
	right.Network = "192.0.2.1"
	_, err = wf.LogIn(ctx, right)
	wantCode(t, "the right password after the account's daily limit", err, market.CodeRateLimited)
	right.KnownDevice = true
	if _, err := wf.LogIn(ctx, right); err != nil {
		t.Fatalf("from a known browser: %v", err)
	}
}

func TestTwoFactorLogIn(t *testing.T) {
	ctx := context.Background()
	wf, db, now := newAccounts(t)
	id := signUp(t, wf, "ada@example.com", "a long password")
	u, err := db.FindUserByID(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if err := wf.BeginTwoFactor(ctx, u); err != nil {
		t.Fatal(err)
	}
	tf, err := db.FindTwoFactor(ctx, id)
	if err != nil || !tf.Pending() {
		t.Fatalf("after begin: %+v, %v", tf, err)
	}
	secret, err := wf.TwoFactorSecret(tf)
	if err != nil {
		t.Fatal(err)
	}
	code := func(at time.Time) string {
		c, err := totp.GenerateCode(secret, at)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	_, err = wf.EnableTwoFactor(ctx, id, "000000", "198.51.100.1")
	if market.FieldErrors(err)["code"] == "" {
		t.Fatalf("a wrong code: %v, want a message for the code field", err)
	}
	codes, err := wf.EnableTwoFactor(ctx, id, code(*now), "198.51.100.1")
	if err != nil || len(codes) != market.RecoveryCodeCount || len(codes[0]) != market.RecoveryCodeLen+2 {
		t.Fatalf("enable: %q, %v", codes, err)
	}
	wantCode(t, "enabling twice", wf.BeginTwoFactor(ctx, u), market.CodeConflict)

	in := LogIn{Email: "ada@example.com", Password: "a long password", Network: "198.51.100.1", Next: "/account"}
	half, err := wf.LogIn(ctx, in)
	if err != nil || half.Challenge == "" || half.Session.ID != "" {
		t.Fatalf("password of an account with two-factor: %+v, %v", half, err)
	}
	cl := CodeLogIn{Challenge: half.Challenge, Code: code(*now), Network: in.Network}
	_, err = wf.LogInWithCode(ctx, cl)
	wantCode(t, "the code that turned it on, again", err, market.CodeUnauthorized)
	cl.Code = "12345"
	_, err = wf.LogInWithCode(ctx, cl)
	wantCode(t, "not a code", err, market.CodeInvalid)
	cl.Code = code(now.Add(market.TOTPPeriod))
	done, err := wf.LogInWithCode(ctx, cl)
	if err != nil || done.Session.ID == "" || done.User.ID != id || done.Next != "/account" || done.Recovery {
		t.Fatalf("with the next code: %+v, %v", done, err)
	}
	_, err = wf.LogInWithCode(ctx, cl)
	wantCode(t, "the half-done login, completed", err, market.CodeNotFound)

	// A recovery code, typed in capitals, works once.
	half, err = wf.LogIn(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	done, err = wf.LogInWithCode(ctx, CodeLogIn{Challenge: half.Challenge, Code: strings.ToUpper(codes[2]), Network: in.Network})
	if err != nil || !done.Recovery || done.RecoveryLeft != market.RecoveryCodeCount-1 {
		t.Fatalf("recovery code: %+v, %v", done, err)
	}
	half, err = wf.LogIn(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	_, err = wf.LogInWithCode(ctx, CodeLogIn{Challenge: half.Challenge, Code: codes[2], Network: in.Network})
	wantCode(t, "a used recovery code", err, market.CodeUnauthorized)

	// Turning it off takes the password (or a code); a wrong one is the
	// proof field's. Each try counts against the account's code attempts:
	// three so far (the replay, the used code, and "12345").
	err = wf.DisableTwoFactor(ctx, u, "not my password", in.Network)
	if market.FieldErrors(err)["proof"] == "" {
		t.Fatalf("disable with a wrong password: %v", err)
	}
	if err := wf.DisableTwoFactor(ctx, u, "a long password", in.Network); err != nil {
		t.Fatal(err)
	}
	if tf, err := db.FindTwoFactor(ctx, id); err != nil || tf.Enabled() || tf.RecoveryLeft != 0 {
		t.Fatalf("after disabling: %+v, %v", tf, err)
	}
	wantCode(t, "disabling twice", wf.DisableTwoFactor(ctx, u, "a long password", in.Network), market.CodeConflict)
}

// Wrong codes are counted before they are checked: after
// account.CodeAttemptsPerAccount the right one waits too.
func TestTwoFactorCodeAttemptsLimited(t *testing.T) {
	ctx := context.Background()
	wf, db, now := newAccounts(t)
	id := signUp(t, wf, "ada@example.com", "a long password")
	u, _ := db.FindUserByID(ctx, id)
	if err := wf.BeginTwoFactor(ctx, u); err != nil {
		t.Fatal(err)
	}
	tf, _ := db.FindTwoFactor(ctx, id)
	secret, err := wf.TwoFactorSecret(tf)
	if err != nil {
		t.Fatal(err)
	}
	for i := range account.CodeAttemptsPerAccount {
		_, err := wf.EnableTwoFactor(ctx, id, "000000", "198.51.100."+strconv.Itoa(i))
		wantCode(t, "wrong code "+strconv.Itoa(i), err, market.CodeInvalid)
	}
	right, _ := totp.GenerateCode(secret, *now)
	_, err = wf.EnableTwoFactor(ctx, id, right, "198.51.100.99")
	wantCode(t, "the right code after the limit", err, market.CodeRateLimited)
	*now = now.Add(account.LoginWindow)
	right, _ = totp.GenerateCode(secret, *now)
	if _, err := wf.EnableTwoFactor(ctx, id, right, "198.51.100.99"); err != nil {
		t.Fatalf("after the window: %v", err)
	}
}

func TestChangePasswordAndAddress(t *testing.T) {
	ctx := context.Background()
	wf, db, _ := newAccounts(t)
	// Created as cmd creates accounts, with its address confirmed (API
	// tokens need it).
	hash, err := account.Hash("a long password", bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	u, err := db.CreateUser(ctx, market.User{Email: "ada@example.com", DisplayName: "Ada", IsBuyer: true}, hash, t0)
	if err != nil {
		t.Fatal(err)
	}
	id := u.ID
	in, err := wf.LogIn(ctx, LogIn{Email: "ada@example.com", Password: "a long password", Network: "198.51.100.1"})
	if err != nil {
		t.Fatal(err)
	}
	other, err := wf.LogIn(ctx, LogIn{Email: "ada@example.com", Password: "a long password", Network: "198.51.100.2"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := wf.CreateAPIToken(ctx, id, "ci", "read"); err != nil {
		t.Fatal(err)
	}
	_, err = wf.ChangePassword(ctx, u, "wrong", "a new long password", in.Session.ID, true)
	if market.FieldErrors(err)["current_password"] == "" {
		t.Fatalf("wrong current password: %v", err)
	}
	_, err = wf.ChangePassword(ctx, u, "a long password", "short", in.Session.ID, true)
	if market.FieldErrors(err)["new_password"] == "" {
		t.Fatalf("short new password: %v", err)
	}
	revoked, err := wf.ChangePassword(ctx, u, "a long password", "a new long password", in.Session.ID, true)
	if err != nil || revoked != 1 {
		t.Fatalf("change: %d revoked, %v; want 1", revoked, err)
	}
	if _, _, err := db.FindSession(ctx, in.Session.ID, t0); err != nil {
		t.Fatalf("the session that changed it: %v", err)
	}
	_, _, err = db.FindSession(ctx, other.Session.ID, t0)
	wantCode(t, "another session", err, market.CodeNotFound)
	_, err = wf.LogIn(ctx, LogIn{Email: "ada@example.com", Password: "a long password", Network: "198.51.100.3"})
	wantCode(t, "the old password", err, market.CodeUnauthorized)

	err = wf.RequestAddressChange(ctx, u, "ada@new.example", "a long password")
	if market.FieldErrors(err)["email_password"] == "" {
		t.Fatalf("address change with the old password: %v", err)
	}
	if err := wf.RequestAddressChange(ctx, u, "ada@new.example", "a new long password"); err != nil {
		t.Fatal(err)
	}
	for i := 2; i < account.AddressChangePerUser; i++ {
		if err := wf.RequestAddressChange(ctx, u, "ada@new.example", "a new long password"); err != nil {
			t.Fatal(err)
		}
	}
	err = wf.RequestAddressChange(ctx, u, "ada@new.example", "a new long password")
	wantCode(t, "one address change too many", err, market.CodeRateLimited)

	err = wf.RequestPasswordReset(ctx, "not an address", "198.51.100.1")
	wantCode(t, "reset for no address", err, market.CodeInvalid)
	for range account.ResetPerAddress {
		if err := wf.RequestPasswordReset(ctx, "nobody@example.com", "198.51.100.1"); err != nil {
			t.Fatal(err)
		}
	}
	err = wf.RequestPasswordReset(ctx, "nobody@example.com", "198.51.100.1")
	wantCode(t, "one reset link too many", err, market.CodeRateLimited)
}

// Under a shifted market clock (a demo's -clock-offset), authenticator
// codes are checked against the code clock, the real time the person's app
// counts: a code for the real time signs in, one for the shifted time
// does not.
func TestTwoFactorCodesUseTheRealClock(t *testing.T) {
	ctx := context.Background()
	db, err := store.Open(ctx, pgtest.DSN(t, filepath.Join(t.TempDir(), "acct.db")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	real := t0
	shifted := real.Add(72 * time.Hour)
	wf, err := New(ctx, Config{Now: func() time.Time { return shifted }, CodeNow: func() time.Time { return real },
		SessionKey: []byte(strings.Repeat("s", 32)), PasswordCost: bcrypt.MinCost}, db, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	id := signUp(t, wf, "ada@example.com", "a long password")
	u, err := db.FindUserByID(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if err := wf.BeginTwoFactor(ctx, u); err != nil {
		t.Fatal(err)
	}
	tf, err := db.FindTwoFactor(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	secret, err := wf.TwoFactorSecret(tf)
	if err != nil {
		t.Fatal(err)
	}
	code := func(at time.Time) string {
		c, err := totp.GenerateCode(secret, at)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	if _, err := wf.EnableTwoFactor(ctx, id, code(shifted), "198.51.100.1"); market.FieldErrors(err)["code"] == "" {
		t.Fatalf("a code for the shifted clock turned two-factor on: %v", err)
	}
	if _, err := wf.EnableTwoFactor(ctx, id, code(real), "198.51.100.1"); err != nil {
		t.Fatalf("a code for the real time: %v", err)
	}
	half, err := wf.LogIn(ctx, LogIn{Email: "ada@example.com", Password: "a long password", Network: "198.51.100.1", Next: "/"})
	if err != nil || half.Challenge == "" {
		t.Fatalf("password: %+v, %v", half, err)
	}
	real = real.Add(market.TOTPPeriod)
	if done, err := wf.LogInWithCode(ctx, CodeLogIn{Challenge: half.Challenge, Code: code(real), Network: "198.51.100.1"}); err != nil || done.Session.ID == "" {
		t.Fatalf("the next real code: %+v, %v", done, err)
	}
}
