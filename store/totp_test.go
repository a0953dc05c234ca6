package store

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/account"
	"github.com/gpumarket/gpumarket/market"
)

// signInMail returns the subjects of the user's sign-in-method mail, oldest first.
func signInMail(t *testing.T, db *DB, userID int64) []string {
	t.Helper()
	ms, err := db.ListMail(context.Background(), userID, 100)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for i := len(ms) - 1; i >= 0; i-- {
		if ms[i].Kind == MailSignInMethod {
			if ms[i].URLPath != "/account/two-factor" {
				t.Errorf("sign-in mail %q links to %q", ms[i].Subject, ms[i].URLPath)
			}
			out = append(out, ms[i].Subject)
		}
	}
	return out
}

// recoveryHashes are the hashes of a new set of recovery codes.
func recoveryHashes(t *testing.T, userID int64) []string {
	t.Helper()
	codes, err := account.NewRecoveryCodes()
	if err != nil {
		t.Fatal(err)
	}
	return account.HashRecoveryCodes(userID, codes)
}

// typedHash is what workflow looks a typed recovery code up by.
func typedHash(t *testing.T, userID int64, typed string) string {
	t.Helper()
	f, err := market.ParseSecondFactor(typed)
	if err != nil || f.Recovery == "" {
		t.Fatalf("%q is not a recovery code: %v", typed, err)
	}
	return account.HashRecoveryCode(userID, f.Recovery)
}

func TestTwoFactorSetupUseAndDisable(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	u := createUser(t, db, "tf@example.com", false)

	tf, err := db.FindTwoFactor(ctx, u.ID)
	if err != nil || tf.Enabled() || tf.Pending() || tf.UserID != u.ID {
		t.Fatalf("before setup: %+v, %v; want off, not pending", tf, err)
	}
	// Enabling without a setup under way is refused.
	codes, err := account.NewRecoveryCodes()
	if err != nil {
		t.Fatal(err)
	}
	hashes := account.HashRecoveryCodes(u.ID, codes)
	wantCode(t, db.EnableTOTP(ctx, u.ID, 100, hashes, t0), market.CodeConflict)

	if err := db.BeginTOTP(ctx, u.ID, []byte("sealed-1"), t0); err != nil {
		t.Fatal(err)
	}
	// A second start replaces the first secret.
	if err := db.BeginTOTP(ctx, u.ID, []byte("sealed-2"), t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	tf, err = db.FindTwoFactor(ctx, u.ID)
	if err != nil || !tf.Pending() || tf.Enabled() || string(tf.Secret) != "sealed-2" || !tf.CreatedAt.Equal(t0.Add(time.Minute)) {
		t.Fatalf("pending: %+v, %v", tf, err)
	}
	if mail := signInMail(t, db, u.ID); len(mail) != 0 {
		t.Fatalf("mail before it is on: %q", mail)
	}

	if err := db.EnableTOTP(ctx, u.ID, 1000, hashes, t0.Add(2*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if len(codes) != market.RecoveryCodeCount {
		t.Fatalf("%d recovery codes, want %d", len(codes), market.RecoveryCodeCount)
	}
	seen := map[string]bool{}
	for _, c := range codes {
		if len(c) != market.RecoveryCodeLen || strings.Trim(c, market.RecoveryAlphabet) != "" || seen[c] {
			t.Errorf("recovery code %q: wrong length, alphabet or repeated", c)
		}
		seen[c] = true
	}
	tf, err = db.FindTwoFactor(ctx, u.ID)
	if err != nil || !tf.Enabled() || tf.Pending() || tf.LastStep != 1000 || tf.RecoveryLeft != market.RecoveryCodeCount ||
		!tf.EnabledAt.Equal(t0.Add(2*time.Minute)) {
		t.Fatalf("enabled: %+v, %v", tf, err)
	}
	// The recovery codes are stored hashed only.
	var stored string
	if err := db.reader.QueryRowContext(ctx, `SELECT code_hash FROM recovery_codes WHERE user_id = ? LIMIT 1`, u.ID).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if seen[stored] || len(stored) != 64 {
		t.Errorf("stored recovery code %q is not a SHA-256", stored)
	}
	if got := signInMail(t, db, u.ID); len(got) != 1 || got[0] != "Two-factor sign-in was turned on" {
		t.Fatalf("mail after enabling: %q", got)
	}
	wantCode(t, db.BeginTOTP(ctx, u.ID, []byte("sealed-3"), t0), market.CodeConflict)
	wantCode(t, db.EnableTOTP(ctx, u.ID, 1001, hashes, t0), market.CodeConflict)

	// Steps: the confirmed one and older are refused, a later one once.
	wantCode(t, db.UseTOTPStep(ctx, u.ID, 1000), market.CodeUnauthorized)
	wantCode(t, db.UseTOTPStep(ctx, u.ID, 999), market.CodeUnauthorized)
	if err := db.UseTOTPStep(ctx, u.ID, 1001); err != nil {
		t.Fatal(err)
	}
	wantCode(t, db.UseTOTPStep(ctx, u.ID, 1001), market.CodeUnauthorized)

	// A recovery code works once, however it is typed.
	typed := strings.ToUpper(market.FormatRecoveryCode(codes[3]))
	left, err := db.UseRecoveryCode(ctx, u.ID, typedHash(t, u.ID, typed), t0.Add(3*time.Minute))
	if err != nil || left != market.RecoveryCodeCount-1 {
		t.Fatalf("recovery code %q: %d left, %v", typed, left, err)
	}
	_, err = db.UseRecoveryCode(ctx, u.ID, typedHash(t, u.ID, codes[3]), t0.Add(4*time.Minute))
	wantCode(t, err, market.CodeUnauthorized)
	_, err = db.UseRecoveryCode(ctx, u.ID, typedHash(t, u.ID, "abcdefghijkm"), t0)
	wantCode(t, err, market.CodeUnauthorized)
	// Another account's code is not this one's.
	other := createUser(t, db, "other@example.com", false)
	_, err = db.UseRecoveryCode(ctx, other.ID, typedHash(t, other.ID, codes[4]), t0)
	wantCode(t, err, market.CodeUnauthorized)
	if got := signInMail(t, db, u.ID); len(got) != 2 || got[1] != "A recovery code was used to sign in" {
		t.Fatalf("mail after a recovery code: %q", got)
	}

	if err := db.DisableTOTP(ctx, u.ID, t0.Add(5*time.Minute)); err != nil {
		t.Fatal(err)
	}
	tf, err = db.FindTwoFactor(ctx, u.ID)
	if err != nil || tf.Enabled() || tf.Pending() || tf.RecoveryLeft != 0 || tf.Secret != nil {
		t.Fatalf("after disabling: %+v, %v", tf, err)
	}
	wantCode(t, db.DisableTOTP(ctx, u.ID, t0), market.CodeConflict)
	wantCode(t, db.UseTOTPStep(ctx, u.ID, 5000), market.CodeUnauthorized)
	_, err = db.UseRecoveryCode(ctx, u.ID, typedHash(t, u.ID, codes[5]), t0)
	wantCode(t, err, market.CodeUnauthorized)
	if got := signInMail(t, db, u.ID); len(got) != 3 || got[2] != "Two-factor sign-in was turned off" {
		t.Fatalf("mail after disabling: %q", got)
	}
}

// Concurrent uses of one step (the same code sent twice at once, to two
// replicas) accept exactly one.
func TestTwoFactorStepUsedOnceUnderConcurrency(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	u := createUser(t, db, "race@example.com", false)
	if err := db.BeginTOTP(ctx, u.ID, []byte("s"), t0); err != nil {
		t.Fatal(err)
	}
	if err := db.EnableTOTP(ctx, u.ID, 10, recoveryHashes(t, u.ID), t0); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok, refused := 0, 0
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := db.UseTOTPStep(ctx, u.ID, 11)
			mu.Lock()
			defer mu.Unlock()
			switch market.ErrorCode(err) {
			case "":
				ok++
			case market.CodeUnauthorized:
				refused++
			default:
				t.Errorf("use step: %v", err)
			}
		}()
	}
	wg.Wait()
	if ok != 1 || refused != 7 {
		t.Fatalf("accepted %d, refused %d; want 1 and 7", ok, refused)
	}
}

func TestResetTwoFactor(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	u := createUser(t, db, "locked@example.com", false)
	_, err := db.ResetTwoFactor(ctx, "locked@example.com", "lost phone", t0)
	wantCode(t, err, market.CodeConflict)
	_, err = db.ResetTwoFactor(ctx, "nobody@example.com", "", t0)
	wantCode(t, err, market.CodeNotFound)

	if err := db.BeginTOTP(ctx, u.ID, []byte("s"), t0); err != nil {
		t.Fatal(err)
	}
	if err := db.EnableTOTP(ctx, u.ID, 10, recoveryHashes(t, u.ID), t0); err != nil {
		t.Fatal(err)
	}
	s, err := db.CreateSession(ctx, u.ID, t0, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	lc, err := db.CreateLoginChallenge(ctx, u.ID, "/", t0)
	if err != nil {
		t.Fatal(err)
	}
	at := t0.Add(time.Hour)
	got, err := db.ResetTwoFactor(ctx, " Locked@Example.com ", "ticket 42: lost phone, identity checked", at)
	if err != nil || got.ID != u.ID {
		t.Fatalf("reset: %+v, %v", got, err)
	}
	tf, err := db.FindTwoFactor(ctx, u.ID)
	if err != nil || tf.Enabled() || tf.Pending() || tf.RecoveryLeft != 0 {
		t.Fatalf("after reset: %+v, %v", tf, err)
	}
	_, _, err = db.FindSession(ctx, s.ID, t0)
	wantCode(t, err, market.CodeNotFound)
	_, err = db.FindLoginChallenge(ctx, lc, t0)
	wantCode(t, err, market.CodeNotFound)
	entries, n, err := db.ListAudit(ctx, AuditFilter{Action: AuditTwoFactorReset})
	if err != nil || n != 1 {
		t.Fatalf("audit: %d entries, %v", n, err)
	}
	e := entries[0]
	if e.SubjectKind != AuditSubjectUser || e.SubjectID != u.ID || e.ActorID != 0 || !e.At.Equal(at) ||
		e.Note != "ticket 42: lost phone, identity checked" || !strings.Contains(e.Before, `"two_factor":"on"`) || !strings.Contains(e.After, `"two_factor":"off"`) {
		t.Errorf("audit entry: %+v", e)
	}
	if got := signInMail(t, db, u.ID); len(got) != 2 || got[1] != "Two-factor sign-in was reset" {
		t.Fatalf("mail: %q", got)
	}
	// It can be set up again.
	if err := db.BeginTOTP(ctx, u.ID, []byte("s2"), at); err != nil {
		t.Fatal(err)
	}
}

func TestLoginChallenge(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	u := createUser(t, db, "lc@example.com", false)
	id, err := db.CreateLoginChallenge(ctx, u.ID, "/account", t0)
	if err != nil {
		t.Fatal(err)
	}
	lc, err := db.FindLoginChallenge(ctx, id, t0.Add(market.LoginChallengeTTL-time.Second))
	if err != nil || lc.UserID != u.ID || lc.Next != "/account" || !lc.ExpiresAt.Equal(t0.Add(market.LoginChallengeTTL)) {
		t.Fatalf("find: %+v, %v", lc, err)
	}
	_, err = db.FindLoginChallenge(ctx, id, t0.Add(market.LoginChallengeTTL))
	wantCode(t, err, market.CodeNotFound)
	_, err = db.FindLoginChallenge(ctx, "", t0)
	wantCode(t, err, market.CodeNotFound)
	// Only the hash is stored.
	var n int
	if err := db.reader.QueryRowContext(ctx, `SELECT COUNT(*) FROM login_challenges WHERE id_hash = ?`, id).Scan(&n); err != nil || n != 0 {
		t.Fatalf("raw id stored: %d, %v", n, err)
	}
	if err := db.DeleteLoginChallenge(ctx, id); err != nil {
		t.Fatal(err)
	}
	_, err = db.FindLoginChallenge(ctx, id, t0)
	wantCode(t, err, market.CodeNotFound)
	// A new challenge prunes expired ones.
	if _, err := db.CreateLoginChallenge(ctx, u.ID, "/", t0); err != nil {
		t.Fatal(err)
	}
	if _, err := db.CreateLoginChallenge(ctx, u.ID, "/", t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := db.reader.QueryRowContext(ctx, `SELECT COUNT(*) FROM login_challenges`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d challenges after pruning, want 1 (%v)", n, err)
	}
}
