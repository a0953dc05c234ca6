package store

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

func TestAPITokens(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	u := createUser(t, db, "buyer@example.com", false)
	other := createUser(t, db, "other@example.com", false)

	tok, raw, err := db.CreateAPIToken(ctx, u.ID, " CI runner ", TokenScopeWrite, t0)
	if err != nil {
		t.Fatal(err)
	}
	if tok.ID == 0 || tok.UserID != u.ID || tok.Name != "CI runner" || tok.Scope != TokenScopeWrite ||
		!tok.CreatedAt.Equal(t0) || !tok.LastUsedAt.IsZero() || tok.Revoked() {
		t.Fatalf("CreateAPIToken = %+v", tok)
	}
	if !strings.HasPrefix(raw, "gpm_") || len(raw) != 4+43 || tok.Prefix != raw[:8] {
		t.Fatalf("raw token %q, prefix %q", raw, tok.Prefix)
	}
	var stored int
	db.reader.QueryRowContext(ctx, `SELECT COUNT(*) FROM api_tokens WHERE token_hash = ? OR prefix = ?`, raw, raw).Scan(&stored)
	if stored != 0 {
		t.Error("the raw token is stored in the clear")
	}

	got, gu, err := db.FindAPIToken(ctx, raw)
	if err != nil || got.ID != tok.ID || got.Scope != TokenScopeWrite || gu.ID != u.ID || gu.Email != u.Email {
		t.Fatalf("FindAPIToken = %+v, %+v, %v", got, gu, err)
	}
	lastUsed := func() time.Time {
		ts, err := db.ListAPITokens(ctx, u.ID)
		if err != nil || len(ts) == 0 {
			t.Fatalf("ListAPITokens = %v, %v", ts, err)
		}
		return ts[len(ts)-1].LastUsedAt
	}
	// Authenticating writes nothing; uses are recorded in batches, never
	// moving a token's last use back (a late or repeated batch).
	if lu := lastUsed(); !lu.IsZero() || !got.LastUsedAt.IsZero() {
		t.Errorf("last use %s (found %s) before any was recorded", lu, got.LastUsedAt)
	}
	if err := db.RecordAPITokenUses(ctx, []APITokenUse{{TokenID: tok.ID, At: t0.Add(61 * time.Second)}, {TokenID: 1 << 40, At: t0}}); err != nil {
		t.Fatal(err)
	}
	if lu := lastUsed(); !lu.Equal(t0.Add(61 * time.Second)) {
		t.Errorf("last_used_at = %s, want the use recorded", lu)
	}
	if got, _, _ := db.FindAPIToken(ctx, raw); !got.LastUsedAt.Equal(t0.Add(61 * time.Second)) {
		t.Errorf("FindAPIToken's LastUsedAt = %s, want the use recorded", got.LastUsedAt)
	}
	if err := db.RecordAPITokenUses(ctx, []APITokenUse{{TokenID: tok.ID, At: t0.Add(time.Second)}}); err != nil {
		t.Fatal(err)
	}
	if lu := lastUsed(); !lu.Equal(t0.Add(61 * time.Second)) {
		t.Errorf("last_used_at = %s after an older use; want it unchanged", lu)
	}
	if err := db.RecordAPITokenUses(ctx, nil); err != nil {
		t.Fatal(err)
	}

	read, rawRead, err := db.CreateAPIToken(ctx, u.ID, "dashboard", TokenScopeRead, t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	ts, err := db.ListAPITokens(ctx, u.ID)
	if err != nil || len(ts) != 2 || ts[0].ID != read.ID || ts[1].ID != tok.ID || ts[0].Scope != TokenScopeRead {
		t.Errorf("ListAPITokens = %+v, %v; want newest first", ts, err)
	}
	if ts, _ := db.ListAPITokens(ctx, other.ID); len(ts) != 0 {
		t.Errorf("other user's tokens = %+v", ts)
	}

	for _, bad := range []string{"", "gpm_", "gpm_nope", raw + "x", strings.TrimPrefix(raw, "gpm_"), strings.Repeat("gpm_", 100)} {
		_, _, err := db.FindAPIToken(ctx, bad)
		wantCode(t, err, market.CodeUnauthorized)
	}

	// Revocation: only by the owner, and at once.
	wantCode(t, db.RevokeAPIToken(ctx, other.ID, tok.ID, t0), market.CodeNotFound)
	wantCode(t, db.RevokeAPIToken(ctx, u.ID, tok.ID+100, t0), market.CodeNotFound)
	if err := db.RevokeAPIToken(ctx, u.ID, tok.ID, t0.Add(2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	_, _, err = db.FindAPIToken(ctx, raw)
	wantCode(t, err, market.CodeUnauthorized)
	if err := db.RevokeAPIToken(ctx, u.ID, tok.ID, t0.Add(3*time.Hour)); err != nil {
		t.Errorf("revoking twice: %v", err)
	}
	if ts, _ := db.ListAPITokens(ctx, u.ID); len(ts) != 2 || !ts[1].RevokedAt.Equal(t0.Add(2*time.Hour)) || ts[0].Revoked() {
		t.Errorf("tokens after revocation = %+v", ts)
	}
	if _, _, err := db.FindAPIToken(ctx, rawRead); err != nil {
		t.Errorf("the other token stopped working: %v", err)
	}

	// A suspended user's tokens are revoked, and stay revoked on
	// reinstatement; new ones can be created then.
	suspend(t, db, u.ID)
	_, _, err = db.FindAPIToken(ctx, rawRead)
	wantCode(t, err, market.CodeUnauthorized)
	_, _, err = db.CreateAPIToken(ctx, u.ID, "more", TokenScopeRead, t0)
	wantCode(t, err, market.CodeForbidden)
	reinstate(t, db, u.ID)
	_, _, err = db.FindAPIToken(ctx, rawRead)
	wantCode(t, err, market.CodeUnauthorized)
	if _, raw, err := db.CreateAPIToken(ctx, u.ID, "after", TokenScopeRead, t0); err != nil {
		t.Errorf("new token after reinstatement: %v", err)
	} else if _, _, err := db.FindAPIToken(ctx, raw); err != nil {
		t.Errorf("new token after reinstatement does not work: %v", err)
	}

	for _, c := range []struct{ name, scope, field string }{
		{"", TokenScopeRead, "name"},
		{strings.Repeat("x", 81), TokenScopeRead, "name"},
		{"ok", "admin", "scope"},
		{"ok", "", "scope"},
		{"ci\x00", TokenScopeRead, "name"},
		{"ci\x1b[0m", TokenScopeRead, "name"},
	} {
		_, _, err := db.CreateAPIToken(ctx, u.ID, c.name, c.scope, t0)
		wantCode(t, err, market.CodeInvalid)
		if f := market.FieldErrors(err); f[c.field] == "" || len(f) != 1 {
			t.Errorf("CreateAPIToken(%q, %q) fields = %v; want only %s", c.name, c.scope, f, c.field)
		}
	}
	_, _, err = db.CreateAPIToken(ctx, 9999, "ghost", TokenScopeRead, t0)
	wantCode(t, err, market.CodeNotFound)
}

func TestPasswordChangeRevokesTokensOnRequest(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	u := createUser(t, db, "pw@example.com", false)
	other := createUser(t, db, "other@example.com", false)
	_, keep, _ := db.CreateAPIToken(ctx, u.ID, "ci", TokenScopeRead, t0)
	_, theirs, _ := db.CreateAPIToken(ctx, other.ID, "theirs", TokenScopeRead, t0)

	// Without asking, the tokens keep working.
	if n, err := db.UpdatePassword(ctx, u.ID, []byte("h1"), "", false, t0.Add(time.Hour)); err != nil || n != 0 {
		t.Fatalf("UpdatePassword without revoking = %d, %v", n, err)
	}
	if _, _, err := db.FindAPIToken(ctx, keep); err != nil {
		t.Errorf("token revoked without asking: %v", err)
	}

	// Asking revokes every live token of the user, once, and no one else's.
	_, second, _ := db.CreateAPIToken(ctx, u.ID, "laptop", TokenScopeWrite, t0)
	revokedTok, _, _ := db.CreateAPIToken(ctx, u.ID, "old", TokenScopeRead, t0)
	if err := db.RevokeAPIToken(ctx, u.ID, revokedTok.ID, t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	at := t0.Add(2 * time.Hour)
	if n, err := db.UpdatePassword(ctx, u.ID, []byte("h2"), "", true, at); err != nil || n != 2 {
		t.Fatalf("UpdatePassword revoking = %d, %v; want 2 revoked", n, err)
	}
	for _, raw := range []string{keep, second} {
		_, _, err := db.FindAPIToken(ctx, raw)
		wantCode(t, err, market.CodeUnauthorized)
	}
	ts, _ := db.ListAPITokens(ctx, u.ID)
	for _, tok := range ts {
		want := at
		if tok.ID == revokedTok.ID {
			want = t0.Add(time.Minute) // the first revocation is kept
		}
		if !tok.RevokedAt.Equal(want) {
			t.Errorf("token %q revoked at %s, want %s", tok.Name, tok.RevokedAt, want)
		}
	}
	if _, _, err := db.FindAPIToken(ctx, theirs); err != nil {
		t.Errorf("another user's token revoked: %v", err)
	}
}
