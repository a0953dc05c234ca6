package store

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gpumarket/gpumarket/market"
)

// APIToken is a personal API token. The raw token is shown once, when it
// is created; the database keeps only its SHA-256 and its first
// characters (Prefix) so the owner can tell tokens apart. A zero
// LastUsedAt means never used; a zero RevokedAt means not revoked.
type APIToken struct {
	ID, UserID int64
	Name       string
	Scope      string // TokenScopeRead or TokenScopeWrite
	Prefix     string // first 8 characters of the raw token, for display
	CreatedAt  time.Time
	LastUsedAt time.Time
	RevokedAt  time.Time
}

// Scopes of an API token: read may only look; write may also book, cancel
// and manage offers.
const (
	TokenScopeRead  = "read"
	TokenScopeWrite = "write"
)

// Revoked reports whether the token has been revoked.
func (t APIToken) Revoked() bool { return !t.RevokedAt.IsZero() }

const (
	tokenRawPrefix   = "gpm_"
	tokenPrefixLen   = 8
	maxTokenName     = 80
	apiTokenColumns  = `t.id, t.user_id, t.name, t.scope, t.prefix, t.created_at, t.last_used_at, t.revoked_at`
	msgTokenNotFound = "That API token could not be found."
	msgTokenInvalid  = "This API token is not valid. Create a new one on your account page."
)

// hashToken is how a raw API token is stored and looked up.
func hashToken(raw string) string {
	sum := sha256.Sum256([]byte(raw))
	return hex.EncodeToString(sum[:])
}

func scanAPIToken(s scanner, extra ...any) (APIToken, error) {
	var t APIToken
	var created int64
	var lastUsed, revoked sql.NullInt64
	dest := append([]any{&t.ID, &t.UserID, &t.Name, &t.Scope, &t.Prefix, &created, &lastUsed, &revoked}, extra...)
	if err := s.Scan(dest...); err != nil {
		return APIToken{}, err
	}
	t.CreatedAt = fromUnix(created)
	if lastUsed.Valid {
		t.LastUsedAt = fromUnix(lastUsed.Int64)
	}
	if revoked.Valid {
		t.RevokedAt = fromUnix(revoked.Int64)
	}
	return t, nil
}

// CreateAPIToken creates a token for the user named name (trimmed, 1 to 80
// characters) with scope TokenScopeRead or TokenScopeWrite, and returns it
// with the raw token ("gpm_" and 32 random bytes, base64url), which is
// never available again. A suspended user gets no token (forbidden); a
// missing user is not found.
func (db *DB) CreateAPIToken(ctx context.Context, userID int64, name, scope string, now time.Time) (APIToken, string, error) {
	const op = "create api token"
	p := market.Problems{}
	name = strings.TrimSpace(name)
	switch n := utf8.RuneCountInString(name); {
	case n == 0:
		p.Add("name", "Give the token a name, such as the machine that will use it.")
	case n > maxTokenName:
		p.Add("name", "Keep the name to 80 characters or fewer.")
	}
	if msg := market.TextProblem(name, false); msg != "" {
		p.Add("name", msg)
	}
	if scope != TokenScopeRead && scope != TokenScopeWrite {
		p.Add("scope", "Choose read or write.")
	}
	if err := p.Err(); err != nil {
		return APIToken{}, "", err
	}
	secret, err := randomToken()
	if err != nil {
		return APIToken{}, "", fail(op, err, "")
	}
	raw := tokenRawPrefix + secret
	t := APIToken{UserID: userID, Name: name, Scope: scope, Prefix: raw[:tokenPrefixLen], CreatedAt: truncate(now)}

	tx, err := db.begin(ctx)
	if err != nil {
		return APIToken{}, "", fail(op, err, "")
	}
	defer tx.Rollback()

	var suspended bool
	err = tx.QueryRowContext(ctx, `SELECT suspended FROM users WHERE id = ?`, userID).Scan(&suspended)
	if errors.Is(err, sql.ErrNoRows) {
		return APIToken{}, "", notFound(msgUserNotFound)
	}
	if err != nil {
		return APIToken{}, "", fail(op, err, "")
	}
	if suspended {
		return APIToken{}, "", &market.Error{Code: market.CodeForbidden, Message: "This account is suspended."}
	}
	if err := mayAct(ctx, tx, userID); err != nil {
		return APIToken{}, "", fail(op, err, "")
	}
	err = tx.QueryRowContext(ctx, `
		INSERT INTO api_tokens (user_id, name, scope, prefix, token_hash, created_at) VALUES (?, ?, ?, ?, ?, ?)
		RETURNING id`, t.UserID, t.Name, t.Scope, t.Prefix, hashToken(raw), unix(t.CreatedAt)).Scan(&t.ID)
	if err != nil {
		return APIToken{}, "", fail(op, err, "")
	}
	if err := tx.Commit(); err != nil {
		return APIToken{}, "", fail(op, err, "")
	}
	return t, raw, nil
}

// ListAPITokens returns the user's tokens, revoked ones included, newest
// first.
func (db *DB) ListAPITokens(ctx context.Context, userID int64) ([]APIToken, error) {
	const op = "list api tokens"
	tx, err := db.read(ctx)
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer tx.Rollback()

	out, err := collect(ctx, tx, func(s scanner) (APIToken, error) { return scanAPIToken(s) }, `SELECT `+apiTokenColumns+` FROM api_tokens t
		WHERE t.user_id = ? ORDER BY t.created_at DESC, t.id DESC`, userID)
	if err != nil {
		return nil, fail(op, err, "")
	}
	return out, nil
}

// RevokeAPIToken revokes a token of the user at now; it stops working at
// once. Another user's token is not found; revoking a revoked token keeps
// the first revocation time and is not an error.
func (db *DB) RevokeAPIToken(ctx context.Context, userID, id int64, now time.Time) error {
	const op = "revoke api token"
	tx, err := db.begin(ctx)
	if err != nil {
		return fail(op, err, "")
	}
	defer tx.Rollback()

	var owner int64
	err = tx.QueryRowContext(ctx, `SELECT user_id FROM api_tokens WHERE id = ?`, id).Scan(&owner)
	if errors.Is(err, sql.ErrNoRows) || (err == nil && owner != userID) {
		return notFound(msgTokenNotFound)
	}
	if err != nil {
		return fail(op, err, "")
	}
	if _, err := tx.ExecContext(ctx, `UPDATE api_tokens SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL`,
		unix(now), id); err != nil {
		return fail(op, err, "")
	}
	return fail(op, tx.Commit(), "")
}

// revokeAPITokens revokes every live token of the user at now and returns
// how many it revoked.
func revokeAPITokens(ctx context.Context, tx *sql.Tx, userID int64, now time.Time) (int, error) {
	res, err := tx.ExecContext(ctx, `UPDATE api_tokens SET revoked_at = ? WHERE user_id = ? AND revoked_at IS NULL`, unix(now), userID)
	if err != nil {
		return 0, err
	}
	n, err := res.RowsAffected()
	return int(n), err
}

// findAPITokenQuery reads a token and its user by the token's hash.
const findAPITokenQuery = `SELECT ` + apiTokenColumns + `,
		u.id, u.email, u.display_name, u.organisation, u.is_buyer, u.is_provider, u.is_admin, u.suspended, u.created_at, u.email_verified_at
		FROM api_tokens t JOIN users u ON u.id = t.user_id WHERE t.token_hash = ?`

// FindAPIToken authenticates a raw token and returns it with its user. An
// unknown or revoked token, or one whose user is suspended, is
// unauthorized. It only reads: the token's use is recorded apart, in
// batches (RecordAPITokenUses), so that no request waits for the writer.
func (db *DB) FindAPIToken(ctx context.Context, raw string) (APIToken, market.User, error) {
	const op = "find api token"
	if !strings.HasPrefix(raw, tokenRawPrefix) || len(raw) > 128 {
		return APIToken{}, market.User{}, &market.Error{Code: market.CodeUnauthorized, Message: msgTokenInvalid}
	}
	// One statement, so one consistent read without an explicit transaction.
	stmt, err := db.readStmt(ctx, findAPITokenQuery)
	if err != nil {
		return APIToken{}, market.User{}, fail(op, err, "")
	}
	var u market.User
	var created int64
	var verified sql.NullInt64
	t, err := scanAPIToken(stmt.QueryRowContext(ctx, hashToken(raw)),
		&u.ID, &u.Email, &u.DisplayName, &u.Organisation, &u.IsBuyer, &u.IsProvider, &u.IsAdmin, &u.Suspended, &created, &verified)
	if errors.Is(err, sql.ErrNoRows) {
		return APIToken{}, market.User{}, &market.Error{Code: market.CodeUnauthorized, Message: msgTokenInvalid}
	}
	if err != nil {
		return APIToken{}, market.User{}, fail(op, err, "")
	}
	u.CreatedAt = fromUnix(created)
	if verified.Valid {
		u.EmailVerifiedAt = fromUnix(verified.Int64)
	}
	switch {
	case t.Revoked():
		return APIToken{}, market.User{}, &market.Error{Code: market.CodeUnauthorized, Message: "This API token has been revoked."}
	case u.Suspended:
		return APIToken{}, market.User{}, &market.Error{Code: market.CodeUnauthorized, Message: "This account is suspended."}
	}
	return t, u, nil
}

// APITokenUse is a token's latest use, to record (RecordAPITokenUses).
type APITokenUse struct {
	TokenID int64
	At      time.Time
}

// RecordAPITokenUses records the tokens' latest uses in one transaction.
// A use older than the one recorded changes nothing, so a batch written
// late, or twice, or by two replicas, never moves a token's last use back.
func (db *DB) RecordAPITokenUses(ctx context.Context, uses []APITokenUse) error {
	const op = "record api token uses"
	if len(uses) == 0 {
		return nil
	}
	tx, err := db.begin(ctx)
	if err != nil {
		return fail(op, err, "")
	}
	defer tx.Rollback()
	for _, u := range uses {
		if _, err := tx.ExecContext(ctx, `UPDATE api_tokens SET last_used_at = ?
			WHERE id = ? AND (last_used_at IS NULL OR last_used_at < ?)`,
			unix(u.At), u.TokenID, unix(u.At)); err != nil {
			return fail(op, err, "")
		}
	}
	return fail(op, tx.Commit(), "")
}
