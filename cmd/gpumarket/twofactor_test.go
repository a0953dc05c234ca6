package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
)

// TestAdminReset2FA runs `gpumarket admin reset-2fa` through run, as an
// operator does, for an admin locked out of their two-factor sign-in.
func TestAdminReset2FA(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "m.db")
	var out bytes.Buffer
	if err := run(ctx, []string{"admin", "create", "-db", path, "-email", "ops@example.com", "-name", "Ops"},
		env(map[string]string{"GPUMARKET_ADMIN_PASSWORD": "a long admin passphrase"}), strings.NewReader(""), &out, &out); err != nil {
		t.Fatalf("admin create: %v\n%s", err, out.String())
	}
	db, err := store.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	u, _, err := db.FindUserByEmail(ctx, "ops@example.com")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	if err := db.BeginTOTP(ctx, u.ID, []byte("sealed"), now); err != nil {
		t.Fatal(err)
	}
	if err := db.EnableTOTP(ctx, u.ID, market.TOTPStep(now), []string{"a recovery code's hash"}, now); err != nil {
		t.Fatal(err)
	}
	sess, err := db.CreateSession(ctx, u.ID, now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	db.Close()

	reset := func(args ...string) (string, error) {
		var out bytes.Buffer
		err := run(ctx, append([]string{"admin", "reset-2fa", "-db", path}, args...), env(nil), strings.NewReader(""), &out, &out)
		return out.String(), err
	}
	if _, err := reset("-note", "no email"); err == nil || !strings.Contains(err.Error(), "-email is required") {
		t.Fatalf("without -email: %v", err)
	}
	if _, err := reset("-email", "nobody@example.com"); err == nil || !strings.Contains(err.Error(), "could not be found") {
		t.Fatalf("unknown account: %v", err)
	}
	got, err := reset("-email", "OPS@example.com", "-note", "ticket 7: lost phone; identity checked by video call")
	if err != nil {
		t.Fatalf("reset: %v\n%s", err, got)
	}
	if !strings.Contains(got, "two-factor sign-in of ops@example.com") || !strings.Contains(got, "reset") {
		t.Errorf("output: %q", got)
	}
	// Again: nothing to reset, and it says so.
	if _, err := reset("-email", "ops@example.com"); err == nil || !strings.Contains(err.Error(), "not on for this account") {
		t.Fatalf("second reset: %v", err)
	}

	db, err = store.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if tf, err := db.FindTwoFactor(ctx, u.ID); err != nil || tf.Enabled() || tf.RecoveryLeft != 0 {
		t.Fatalf("after reset: %+v, %v", tf, err)
	}
	if _, _, err := db.FindSession(ctx, sess.ID, now); market.ErrorCode(err) != market.CodeNotFound {
		t.Errorf("session survived the reset: %v", err)
	}
	entries, n, err := db.ListAudit(ctx, store.AuditFilter{Action: store.AuditTwoFactorReset})
	if err != nil || n != 1 || entries[0].SubjectID != u.ID || entries[0].SubjectKind != store.AuditSubjectUser ||
		entries[0].Note != "ticket 7: lost phone; identity checked by video call" {
		t.Fatalf("audit: %+v (%d), %v", entries, n, err)
	}
	mail, err := db.ListMail(ctx, u.ID, 10)
	if err != nil || len(mail) == 0 || mail[0].Kind != store.MailSignInMethod || mail[0].Subject != "Two-factor sign-in was reset" || mail[0].To != "ops@example.com" {
		t.Fatalf("mail: %+v, %v", mail, err)
	}
}

// The demo admin has two-factor sign-in on, with its key kept beside the
// demo credentials, enrolled once.
func TestDemoAdminHasTwoFactor(t *testing.T) {
	ctx := context.Background()
	db, err := store.Open(ctx, filepath.Join(t.TempDir(), "d.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	u, err := db.CreateUser(ctx, market.User{Email: "admin@demo.gpumarket.test", DisplayName: "Demo Admin", IsAdmin: true}, []byte("x"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	creds := []demoCredential{{Role: "admin", Email: u.Email, Password: "pw"}, {Role: "buyer", Email: "b@example.com", Password: "pw2"}}
	key := bytes.Repeat([]byte("k"), 32)
	got, err := demoTwoFactor(ctx, db, key, creds, time.Now().UTC())
	if err != nil {
		t.Fatal(err)
	}
	if len(got[0].TOTPSecret) != 32 || got[1].TOTPSecret != "" {
		t.Fatalf("creds: %+v", got)
	}
	if tf, err := db.FindTwoFactor(ctx, u.ID); err != nil || !tf.Enabled() {
		t.Fatalf("demo admin two-factor: %+v, %v", tf, err)
	}
	saved, err := db.GetSetting(ctx, demoSettingKey)
	if err != nil || !strings.Contains(saved, got[0].TOTPSecret) {
		t.Fatalf("secret not kept with the credentials: %q, %v", saved, err)
	}
	again, err := demoTwoFactor(ctx, db, key, got, time.Now().UTC())
	if err != nil || again[0].TOTPSecret != got[0].TOTPSecret {
		t.Fatalf("enrolled twice: %+v, %v", again, err)
	}
}
