package store

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// Session is a server-side login session. ID is the raw id carried by the
// cookie; the database holds only its SHA-256, so ID is known only when the
// session is created or presented.
type Session struct {
	ID        string
	UserID    int64
	CSRFToken string
	CreatedAt time.Time
	ExpiresAt time.Time
}

// randomToken returns 32 bytes from crypto/rand, base64url without padding.
func randomToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// hashSessionID is how a raw session id is stored and looked up.
func hashSessionID(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:])
}

// CreateSession starts a session for the user, valid for ttl from now, with
// a fresh random id and a separate random CSRF token. A suspended user gets
// no session (forbidden); a missing user is not found.
func (db *DB) CreateSession(ctx context.Context, userID int64, now time.Time, ttl time.Duration) (Session, error) {
	const op = "create session"
	if ttl <= 0 {
		return Session{}, fmt.Errorf("store: %s: ttl %s must be positive", op, ttl)
	}
	id, err := randomToken()
	if err != nil {
		return Session{}, fail(op, err, "")
	}
	csrf, err := randomToken()
	if err != nil {
		return Session{}, fail(op, err, "")
	}
	s := Session{ID: id, UserID: userID, CSRFToken: csrf, CreatedAt: truncate(now), ExpiresAt: truncate(now.Add(ttl))}

	tx, err := db.begin(ctx)
	if err != nil {
		return Session{}, fail(op, err, "")
	}
	defer tx.Rollback()

	var suspended bool
	err = tx.QueryRowContext(ctx, `SELECT suspended FROM users WHERE id = ?`, userID).Scan(&suspended)
	if errors.Is(err, sql.ErrNoRows) {
		return Session{}, notFound(msgUserNotFound)
	}
	if err != nil {
		return Session{}, fail(op, err, "")
	}
	if suspended {
		return Session{}, &market.Error{Code: market.CodeForbidden, Message: "This account is suspended."}
	}
	if _, err := tx.ExecContext(ctx, `
		INSERT INTO sessions (id_hash, user_id, csrf_token, created_at, expires_at) VALUES (?, ?, ?, ?, ?)`,
		hashSessionID(s.ID), s.UserID, s.CSRFToken, unix(s.CreatedAt), unix(s.ExpiresAt)); err != nil {
		return Session{}, fail(op, err, "")
	}
	if err := tx.Commit(); err != nil {
		return Session{}, fail(op, err, "")
	}
	return s, nil
}

// FindSession returns the live session with the raw id and its user. A
// missing or expired session, or one whose user is suspended, is not found.
// A session is live while now is before ExpiresAt.
func (db *DB) FindSession(ctx context.Context, id string, now time.Time) (Session, market.User, error) {
	if id == "" {
		return Session{}, market.User{}, notFound(msgSessionNotFound)
	}
	s := Session{ID: id}
	var created, expires int64
	u, err := scanUser(db.reader.QueryRowContext(ctx, `
		SELECT u.id, u.email, u.display_name, u.organisation, u.is_buyer, u.is_provider, u.is_admin, u.suspended, u.created_at, u.email_verified_at,
		       s.user_id, s.csrf_token, s.created_at, s.expires_at
		FROM sessions s JOIN users u ON u.id = s.user_id
		WHERE s.id_hash = ? AND s.expires_at > ? AND u.suspended = 0`,
		hashSessionID(id), unix(now)), &s.UserID, &s.CSRFToken, &created, &expires)
	if errors.Is(err, sql.ErrNoRows) {
		return Session{}, market.User{}, notFound(msgSessionNotFound)
	}
	if err != nil {
		return Session{}, market.User{}, fail("find session", err, "")
	}
	s.CreatedAt, s.ExpiresAt = fromUnix(created), fromUnix(expires)
	return s, u, nil
}

// DeleteSession ends the session with the raw id (log out). Ending a
// session that no longer exists is not an error.
func (db *DB) DeleteSession(ctx context.Context, id string) error {
	const op = "delete session"
	tx, err := db.begin(ctx)
	if err != nil {
		return fail(op, err, "")
	}
	defer tx.Rollback()

	if _, err := tx.ExecContext(ctx, `DELETE FROM sessions WHERE id_hash = ?`, hashSessionID(id)); err != nil {
		return fail(op, err, "")
	}
	return fail(op, tx.Commit(), "")
}

// DeleteExpiredSessions removes sessions that have expired by now and
// returns how many it removed.
func (db *DB) DeleteExpiredSessions(ctx context.Context, now time.Time) (int64, error) {
	const op = "delete expired sessions"
	tx, err := db.begin(ctx)
	if err != nil {
		return 0, fail(op, err, "")
	}
	defer tx.Rollback()

	res, err := tx.ExecContext(ctx, `DELETE FROM sessions WHERE expires_at <= ?`, unix(now))
	if err != nil {
		return 0, fail(op, err, "")
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fail(op, err, "")
	}
	return n, fail(op, tx.Commit(), "")
}
