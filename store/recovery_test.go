package store

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// linkToken returns the raw token of the newest message of kind to the
// address, from its link, which must start with path.
func linkToken(t *testing.T, db *DB, to, kind, path string) string {
	t.Helper()
	all, err := db.ListMail(context.Background(), 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range all {
		if m.To == to && m.Kind == kind {
			raw, ok := strings.CutPrefix(m.URLPath, path)
			if !ok {
				t.Fatalf("%s mail to %s links to %q, want %s…", kind, to, m.URLPath, path)
			}
			tok, err := url.QueryUnescape(raw)
			if err != nil {
				t.Fatal(err)
			}
			return tok
		}
	}
	t.Fatalf("no %s mail to %s in %+v", kind, to, all)
	return ""
}

func TestSignUpMailsAVerificationLinkThatWorksOnce(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	id, existed, err := db.SignUp(ctx, market.User{Email: " Ada@Example.com", DisplayName: "Ada", IsBuyer: true}, []byte("h"), t0)
	if err != nil || existed || id == 0 {
		t.Fatalf("SignUp = %d, %v, %v", id, existed, err)
	}
	u, err := db.FindUserByID(ctx, id)
	if err != nil || u.Verified() || u.Email != "ada@example.com" {
		t.Fatalf("new account %+v, %v: want unverified ada@example.com", u, err)
	}
	wantCode(t, u.MayAct(), market.CodeForbidden)
	// The address as an existing account's: no account, the owner told.
	id2, existed, err := db.SignUp(ctx, market.User{Email: "ADA@example.com", DisplayName: "Other", IsBuyer: true}, []byte("h2"), t0)
	if err != nil || !existed || id2 != id {
		t.Fatalf("second SignUp = %d, %v, %v; want the existing %d", id2, existed, err, id)
	}
	if n, _ := db.CountUsers(ctx); n != 1 {
		t.Fatalf("%d users, want 1", n)
	}
	mail, _ := db.ListMail(ctx, 0, 10)
	if len(mail) != 2 || mail[0].Kind != MailAccountExists || mail[0].UserID != id || mail[1].Kind != MailVerifyAddress ||
		mail[1].To != "ada@example.com" || !strings.Contains(mail[1].Body, "48 hours") {
		t.Fatalf("outbox %+v", mail)
	}

	raw := linkToken(t, db, "ada@example.com", MailVerifyAddress, VerifyPath)
	wantCode(t, func() error { _, _, err := db.VerifyAddress(ctx, raw+"x", "", t0); return err }(), market.CodeNotFound)
	v, _, err := db.VerifyAddress(ctx, raw, "", t0.Add(time.Hour))
	if err != nil || !v.Verified() || !v.EmailVerifiedAt.Equal(t0.Add(time.Hour)) || v.MayAct() != nil {
		t.Fatalf("VerifyAddress = %+v, %v", v, err)
	}
	_, _, err = db.VerifyAddress(ctx, raw, "", t0.Add(time.Hour))
	wantCode(t, err, market.CodeConflict)
	if !strings.Contains(market.ErrorMessage(err), "already been used") {
		t.Fatalf("reuse: %v", err)
	}
	wantCode(t, db.ResendVerification(ctx, id, t0), market.CodeConflict)
	// Sessions and tokens carry the confirmation.
	s, err := db.CreateSession(ctx, id, t0, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, su, err := db.FindSession(ctx, s.ID, t0); err != nil || !su.Verified() {
		t.Fatalf("FindSession user %+v, %v", su, err)
	}
	_, tok, err := db.CreateAPIToken(ctx, id, "ci", TokenScopeRead, t0)
	if err != nil {
		t.Fatal(err)
	}
	if _, tu, err := db.FindAPIToken(ctx, tok); err != nil || !tu.Verified() {
		t.Fatalf("FindAPIToken user %+v, %v", tu, err)
	}
}

func TestVerificationLinkExpiresAndResendReplacesIt(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	id, _, err := db.SignUp(ctx, market.User{Email: "bo@example.com", DisplayName: "Bo", IsProvider: true}, []byte("h"), t0)
	if err != nil {
		t.Fatal(err)
	}
	first := linkToken(t, db, "bo@example.com", MailVerifyAddress, VerifyPath)
	_, _, err = db.VerifyAddress(ctx, first, "", t0.Add(market.VerifyLinkTTL))
	wantCode(t, err, market.CodeConflict)
	if !strings.Contains(market.ErrorMessage(err), "expired") {
		t.Fatalf("expired link: %v", err)
	}
	if err := db.ResendVerification(ctx, id, t0.Add(market.VerifyLinkTTL)); err != nil {
		t.Fatal(err)
	}
	second := linkToken(t, db, "bo@example.com", MailVerifyAddress, VerifyPath)
	if second == first {
		t.Fatal("the resent link is the first one")
	}
	if _, _, err := db.VerifyAddress(ctx, second, "", t0.Add(market.VerifyLinkTTL+time.Minute)); err != nil {
		t.Fatalf("resent link: %v", err)
	}
}

func TestExistingAndCreatedUsersCountAsVerified(t *testing.T) {
	u := createUser(t, newDB(t), "op@example.com", true)
	if !u.Verified() || !u.EmailVerifiedAt.Equal(t0) {
		t.Fatalf("CreateUser: %+v, want verified at creation", u)
	}
}

func TestPasswordResetLink(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	u := createUser(t, db, "cy@example.com", false)
	for i := 0; i < 2; i++ {
		if _, err := db.CreateSession(ctx, u.ID, t0, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	// An unknown address: nothing queued, no error.
	if err := db.RequestPasswordReset(ctx, "nobody@example.com", t0); err != nil {
		t.Fatal(err)
	}
	if all, _ := db.ListMail(ctx, 0, 10); len(all) != 0 {
		t.Fatalf("mail for an unknown address: %+v", all)
	}
	if err := db.RequestPasswordReset(ctx, "CY@example.com", t0); err != nil {
		t.Fatal(err)
	}
	raw := linkToken(t, db, "cy@example.com", MailPasswordReset, ResetPath)
	if err := db.CheckResetLink(ctx, raw, t0.Add(59*time.Minute)); err != nil {
		t.Fatalf("CheckResetLink: %v", err)
	}
	err := db.CheckResetLink(ctx, raw, t0.Add(market.ResetLinkTTL))
	wantCode(t, err, market.CodeConflict)
	_, _, err = db.ResetPassword(ctx, raw, []byte("new"), t0.Add(market.ResetLinkTTL))
	wantCode(t, err, market.CodeConflict)

	got, ended, err := db.ResetPassword(ctx, raw, []byte("new"), t0.Add(time.Minute))
	if err != nil || got.ID != u.ID || ended.Sessions != 2 {
		t.Fatalf("ResetPassword = %+v, %+v, %v; want 2 sessions ended", got, ended, err)
	}
	if _, hash, _ := db.FindUserByEmail(ctx, "cy@example.com"); string(hash) != "new" {
		t.Fatalf("hash %q after reset", hash)
	}
	_, _, err = db.ResetPassword(ctx, raw, []byte("again"), t0.Add(2*time.Minute))
	wantCode(t, err, market.CodeConflict)
	if _, hash, _ := db.FindUserByEmail(ctx, "cy@example.com"); string(hash) != "new" {
		t.Fatalf("a used link changed the password to %q", hash)
	}
	wantCode(t, db.CheckResetLink(ctx, "nonsense", t0), market.CodeNotFound)
}

func TestAddressChangeIsConfirmedByTheNewAddress(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	u := createUser(t, db, "old@example.com", false)
	createUser(t, db, "taken@example.com", false)
	wantCode(t, db.RequestAddressChange(ctx, u.ID, "OLD@example.com", t0), market.CodeInvalid)
	wantCode(t, db.RequestAddressChange(ctx, u.ID, "not an address", t0), market.CodeInvalid)

	// A taken address: its owner is told, no link, the same answer.
	if err := db.RequestAddressChange(ctx, u.ID, "taken@example.com", t0); err != nil {
		t.Fatal(err)
	}
	if all, _ := db.ListMail(ctx, 0, 10); len(all) != 1 || all[0].Kind != MailAccountExists || all[0].URLPath != "/login" {
		t.Fatalf("outbox after a taken address: %+v", all)
	}

	if err := db.RequestAddressChange(ctx, u.ID, "New@example.com", t0); err != nil {
		t.Fatal(err)
	}
	raw := linkToken(t, db, "new@example.com", MailVerifyAddress, AddressChangePath)
	if still, _ := db.FindUserByID(ctx, u.ID); still.Email != "old@example.com" {
		t.Fatalf("address changed before confirmation: %s", still.Email)
	}
	got, old, err := db.ConfirmAddressChange(ctx, raw, "", t0.Add(time.Hour))
	if err != nil || old != "old@example.com" || got.Email != "new@example.com" || !got.EmailVerifiedAt.Equal(t0.Add(time.Hour)) {
		t.Fatalf("ConfirmAddressChange = %+v, %q, %v", got, old, err)
	}
	all, _ := db.ListMail(ctx, u.ID, 10)
	if len(all) == 0 || all[0].Kind != MailAddressChange || all[0].To != "old@example.com" || !strings.Contains(all[0].Body, "new@example.com") {
		t.Fatalf("the old address was not told: %+v", all)
	}
	_, _, err = db.ConfirmAddressChange(ctx, raw, "", t0.Add(time.Hour))
	wantCode(t, err, market.CodeConflict)

	// Taken between the request and the confirmation.
	if err := db.RequestAddressChange(ctx, u.ID, "later@example.com", t0); err != nil {
		t.Fatal(err)
	}
	raw = linkToken(t, db, "later@example.com", MailVerifyAddress, AddressChangePath)
	createUser(t, db, "later@example.com", true)
	_, _, err = db.ConfirmAddressChange(ctx, raw, "", t0.Add(time.Hour))
	wantCode(t, err, market.CodeConflict)
	if still, _ := db.FindUserByID(ctx, u.ID); still.Email != "new@example.com" {
		t.Fatalf("address %s after a refused change", still.Email)
	}
	// A link to the old address stops working once the address changed.
	if err := db.RequestPasswordReset(ctx, "new@example.com", t0); err != nil {
		t.Fatal(err)
	}
	reset := linkToken(t, db, "new@example.com", MailPasswordReset, ResetPath)
	if err := db.RequestAddressChange(ctx, u.ID, "third@example.com", t0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := db.ConfirmAddressChange(ctx, linkToken(t, db, "third@example.com", MailVerifyAddress, AddressChangePath), "", t0); err != nil {
		t.Fatal(err)
	}
	wantCode(t, db.CheckResetLink(ctx, reset, t0), market.CodeConflict)
}
