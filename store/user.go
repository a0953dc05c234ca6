package store

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

const userColumns = `id, email, display_name, organisation, is_buyer, is_provider, is_admin, suspended, created_at, email_verified_at`

// scanner is a *sql.Row or *sql.Rows.
type scanner interface{ Scan(dest ...any) error }

func scanUser(s scanner, extra ...any) (market.User, error) {
	var u market.User
	var created int64
	var verified sql.NullInt64
	dest := append([]any{&u.ID, &u.Email, &u.DisplayName, &u.Organisation,
		&u.IsBuyer, &u.IsProvider, &u.IsAdmin, &u.Suspended, &created, &verified}, extra...)
	if err := s.Scan(dest...); err != nil {
		return market.User{}, err
	}
	u.CreatedAt = fromUnix(created)
	if verified.Valid {
		u.EmailVerifiedAt = fromUnix(verified.Int64)
	}
	return u, nil
}

// CreateUser stores a new account with its password hash and returns it with
// its id and creation time. The email is stored normalised; a second account
// for the same mailbox is a conflict. It is for accounts the operator, the
// demo or a test creates, whose address counts as confirmed from the start
// (unless u says when it was); people signing up go through SignUp, which
// mails them a link to confirm it.
func (db *DB) CreateUser(ctx context.Context, u market.User, passwordHash []byte, now time.Time) (market.User, error) {
	const op = "create user"
	tx, err := db.begin(ctx)
	if err != nil {
		return market.User{}, fail(op, err, "")
	}
	defer tx.Rollback()

	u.Email = market.NormaliseEmail(u.Email)
	u.CreatedAt = truncate(now)
	if u.EmailVerifiedAt.IsZero() {
		u.EmailVerifiedAt = u.CreatedAt
	}
	if u.ID, err = insertUser(ctx, tx, u, passwordHash); err != nil {
		return market.User{}, fail(op, err, "An account with this email already exists.")
	}
	if err := tx.Commit(); err != nil {
		return market.User{}, fail(op, err, "")
	}
	return u, nil
}

func insertUser(ctx context.Context, tx *sql.Tx, u market.User, hash []byte) (int64, error) {
	var id int64
	err := tx.QueryRowContext(ctx, `
		INSERT INTO users (email, password_hash, display_name, organisation, is_buyer, is_provider, is_admin, suspended, created_at, email_verified_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		RETURNING id`,
		u.Email, hash, u.DisplayName, u.Organisation,
		boolInt(u.IsBuyer), boolInt(u.IsProvider), boolInt(u.IsAdmin), boolInt(u.Suspended), unix(u.CreatedAt), nullUnix(u.EmailVerifiedAt),
	).Scan(&id)
	return id, err
}

// findUserIn returns the account with the given id inside the caller's
// transaction; a missing account is a not-found error.
func findUserIn(ctx context.Context, q querier, id int64) (market.User, error) {
	u, err := scanUser(q.QueryRowContext(ctx, `SELECT `+userColumns+` FROM users WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return market.User{}, notFound(msgUserNotFound)
	}
	return u, err
}

// FindUserByID returns the account with the given id.
func (db *DB) FindUserByID(ctx context.Context, id int64) (market.User, error) {
	u, err := scanUser(db.reader.QueryRowContext(ctx, `SELECT `+userColumns+` FROM users WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return market.User{}, notFound(msgUserNotFound)
	}
	if err != nil {
		return market.User{}, fail("find user", err, "")
	}
	return u, nil
}

// FindUserByEmail returns the account for an email address (normalised
// before the lookup) and its password hash.
func (db *DB) FindUserByEmail(ctx context.Context, email string) (market.User, []byte, error) {
	var hash []byte
	u, err := scanUser(db.reader.QueryRowContext(ctx,
		`SELECT `+userColumns+`, password_hash FROM users WHERE email = ?`, market.NormaliseEmail(email)), &hash)
	if errors.Is(err, sql.ErrNoRows) {
		return market.User{}, nil, notFound(msgUserNotFound)
	}
	if err != nil {
		return market.User{}, nil, fail("find user by email", err, "")
	}
	return u, hash, nil
}

// UpdatePassword replaces the user's password hash and ends every other
// session of the user, keeping only keepSessionID (the raw id of the session
// the change was made from; "" ends them all). With revokeTokens it also
// revokes every API token of the user at now, in the same transaction, and
// returns how many it revoked.
func (db *DB) UpdatePassword(ctx context.Context, userID int64, hash []byte, keepSessionID string, revokeTokens bool, now time.Time) (int, error) {
	const op = "update password"
	tx, err := db.begin(ctx)
	if err != nil {
		return 0, fail(op, err, "")
	}
	defer tx.Rollback()

	if err := updateUser(ctx, tx, `UPDATE users SET password_hash = ? WHERE id = ?`, hash, userID); err != nil {
		return 0, fail(op, err, "")
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM sessions WHERE user_id = ? AND id_hash <> ?`,
		userID, hashSessionID(keepSessionID)); err != nil {
		return 0, fail(op, err, "")
	}
	revoked := 0
	if revokeTokens {
		if revoked, err = revokeAPITokens(ctx, tx, userID, now); err != nil {
			return 0, fail(op, err, "")
		}
	}
	return revoked, fail(op, tx.Commit(), "")
}

// SetUserAdmin grants or removes the admin role, for the operator's command
// line (admins are never created through sign-up).
func (db *DB) SetUserAdmin(ctx context.Context, userID int64, admin bool) error {
	const op = "set user admin"
	tx, err := db.begin(ctx)
	if err != nil {
		return fail(op, err, "")
	}
	defer tx.Rollback()

	if err := updateUser(ctx, tx, `UPDATE users SET is_admin = ? WHERE id = ?`, boolInt(admin), userID); err != nil {
		return fail(op, err, "")
	}
	return fail(op, tx.Commit(), "")
}

// updateUser runs an UPDATE of one user row and reports a missing user as
// not found.
func updateUser(ctx context.Context, tx *sql.Tx, query string, args ...any) error {
	res, err := tx.ExecContext(ctx, query, args...)
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		return notFound(msgUserNotFound)
	}
	return nil
}

// CountUsers returns the number of accounts.
func (db *DB) CountUsers(ctx context.Context) (int, error) {
	var n int
	if err := db.reader.QueryRowContext(ctx, `SELECT COUNT(*) FROM users`).Scan(&n); err != nil {
		return 0, fail("count users", err, "")
	}
	return n, nil
}

// mayAct checks, inside the caller's transaction, that the account may
// create something that acts for it (market.User.MayAct): a missing
// account is not found, an unconfirmed one forbidden.
func mayAct(ctx context.Context, q querier, userID int64) error {
	u, err := findUserIn(ctx, q, userID)
	if err != nil {
		return err
	}
	return u.MayAct()
}
