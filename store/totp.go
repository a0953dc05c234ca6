package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// TwoFactor is an account's two-factor sign-in (0025_two_factor.sql): the
// TOTP secret as account sealed it, whether it is on, the last time step a
// code was accepted for, and how many recovery codes are unused.
type TwoFactor struct {
	UserID       int64
	Secret       []byte // sealed by account.SealSecret; nil when there is none
	CreatedAt    time.Time
	EnabledAt    time.Time // zero while being set up, or when off
	LastStep     int64
	RecoveryLeft int
}

// Enabled reports whether two-factor sign-in is on.
func (t TwoFactor) Enabled() bool { return !t.EnabledAt.IsZero() }

// Pending reports whether setup has begun but no code was confirmed yet.
func (t TwoFactor) Pending() bool { return t.Secret != nil && t.EnabledAt.IsZero() }

// LoginChallenge is a login whose password was accepted and which waits
// for the second factor. It grants nothing else.
type LoginChallenge struct {
	UserID    int64
	Next      string
	ExpiresAt time.Time
}

const (
	msgTwoFactorOn       = "Two-factor sign-in is already on."
	msgTwoFactorOff      = "Two-factor sign-in is not on for this account."
	msgTwoFactorRestart  = "Setup has expired or was replaced. Start setting up two-factor sign-in again."
	msgCodeUsed          = "That code has already been used. Wait for the next code in your app and enter it."
	msgRecoveryCodeWrong = "That recovery code is not one of yours, or it has been used."
	msgChallengeExpired  = "Your sign-in took too long. Enter your email and password again."
)

// FindTwoFactor returns the user's two-factor sign-in. An account that has
// never set it up has it off: the zero TwoFactor with UserID set, no error.
func (db *DB) FindTwoFactor(ctx context.Context, userID int64) (TwoFactor, error) {
	const op = "find two-factor"
	tx, err := db.read(ctx)
	if err != nil {
		return TwoFactor{}, fail(op, err, "")
	}
	defer tx.Rollback()
	t, err := findTwoFactor(ctx, tx, userID)
	return t, fail(op, err, "")
}

func findTwoFactor(ctx context.Context, q querier, userID int64) (TwoFactor, error) {
	t := TwoFactor{UserID: userID}
	var created int64
	var enabled sql.NullInt64
	err := q.QueryRowContext(ctx, `SELECT secret, created_at, enabled_at, last_step FROM user_totp WHERE user_id = ?`, userID).
		Scan(&t.Secret, &created, &enabled, &t.LastStep)
	if errors.Is(err, sql.ErrNoRows) {
		return t, nil
	}
	if err != nil {
		return TwoFactor{}, err
	}
	t.CreatedAt = fromUnix(created)
	if enabled.Valid {
		t.EnabledAt = fromUnix(enabled.Int64)
	}
	err = q.QueryRowContext(ctx, `SELECT COUNT(*) FROM recovery_codes WHERE user_id = ? AND used_at IS NULL`, userID).Scan(&t.RecoveryLeft)
	return t, err
}

// BeginTOTP starts setting up two-factor sign-in with a new sealed secret,
// replacing a setup in progress. It is a conflict when it is already on.
func (db *DB) BeginTOTP(ctx context.Context, userID int64, sealedSecret []byte, now time.Time) error {
	const op = "begin totp"
	if len(sealedSecret) == 0 {
		return fmt.Errorf("store: %s: empty secret", op)
	}
	tx, err := db.begin(ctx)
	if err != nil {
		return fail(op, err, "")
	}
	defer tx.Rollback()
	t, err := findTwoFactor(ctx, tx, userID)
	if err != nil {
		return fail(op, err, "")
	}
	if t.Enabled() {
		return conflict(msgTwoFactorOn)
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM user_totp WHERE user_id = ?`, userID); err != nil {
		return fail(op, err, "")
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO user_totp (user_id, secret, created_at) VALUES (?, ?, ?)`,
		userID, sealedSecret, unix(now)); err != nil {
		return fail(op, err, "")
	}
	return fail(op, tx.Commit(), "")
}

// EnableTOTP turns on the two-factor sign-in being set up, once the person
// has entered a code for step (workflow checked it against the secret):
// step becomes the last one used. codeHashes are the hashes of the new
// recovery codes (account.HashRecoveryCode), which replace any the account
// had; the codes themselves are never stored. A security e-mail to the
// person is queued in the same transaction.
func (db *DB) EnableTOTP(ctx context.Context, userID, step int64, codeHashes []string, now time.Time) error {
	const op = "enable totp"
	tx, err := db.begin(ctx)
	if err != nil {
		return fail(op, err, "")
	}
	defer tx.Rollback()
	t, err := findTwoFactor(ctx, tx, userID)
	switch {
	case err != nil:
		return fail(op, err, "")
	case t.Enabled():
		return conflict(msgTwoFactorOn)
	case !t.Pending():
		return conflict(msgTwoFactorRestart)
	case step <= t.LastStep:
		return unauthorized(msgCodeUsed)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE user_totp SET enabled_at = ?, last_step = ? WHERE user_id = ?`,
		unix(now), step, userID); err != nil {
		return fail(op, err, "")
	}
	if err := replaceRecoveryCodes(ctx, tx, userID, codeHashes); err != nil {
		return fail(op, err, "")
	}
	if err := queueSignInMethodMail(ctx, tx, userID, now, "Two-factor sign-in was turned on",
		"Two-factor sign-in was turned on for your account: from now on, signing in asks for a code from your authenticator app after your password. "+
			"If you did not do this, reset your password and contact support at once."); err != nil {
		return fail(op, err, "")
	}
	return fail(op, tx.Commit(), "")
}

// UseTOTPStep records that a code for step was accepted for the user's
// two-factor sign-in. A step at or before the last one accepted is refused
// (unauthorized): a code works once, however quickly it is replayed, and
// this holds across replicas.
func (db *DB) UseTOTPStep(ctx context.Context, userID, step int64) error {
	const op = "use totp step"
	tx, err := db.begin(ctx)
	if err != nil {
		return fail(op, err, "")
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, `UPDATE user_totp SET last_step = ? WHERE user_id = ? AND enabled_at IS NOT NULL AND last_step < ?`,
		step, userID, step)
	if err != nil {
		return fail(op, err, "")
	}
	if n, err := res.RowsAffected(); err != nil {
		return fail(op, err, "")
	} else if n == 0 {
		return unauthorized(msgCodeUsed)
	}
	return fail(op, tx.Commit(), "")
}

// UseRecoveryCode spends the user's recovery code with the hash
// (account.HashRecoveryCode) and returns how many are left. A code that is
// not theirs or was used is unauthorized. The person is e-mailed that a
// recovery code was used, in the same transaction.
func (db *DB) UseRecoveryCode(ctx context.Context, userID int64, codeHash string, now time.Time) (int, error) {
	const op = "use recovery code"
	tx, err := db.begin(ctx)
	if err != nil {
		return 0, fail(op, err, "")
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, `UPDATE recovery_codes SET used_at = ?
		WHERE user_id = ? AND code_hash = ? AND used_at IS NULL
		  AND EXISTS (SELECT 1 FROM user_totp t WHERE t.user_id = recovery_codes.user_id AND t.enabled_at IS NOT NULL)`,
		unix(now), userID, codeHash)
	if err != nil {
		return 0, fail(op, err, "")
	}
	if n, err := res.RowsAffected(); err != nil {
		return 0, fail(op, err, "")
	} else if n == 0 {
		return 0, unauthorized(msgRecoveryCodeWrong)
	}
	var left int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM recovery_codes WHERE user_id = ? AND used_at IS NULL`, userID).Scan(&left); err != nil {
		return 0, fail(op, err, "")
	}
	if err := queueSignInMethodMail(ctx, tx, userID, now, "A recovery code was used to sign in",
		fmt.Sprintf("A recovery code was used to sign in to your account; %d of your recovery codes are left. "+
			"If this was not you, reset your password and turn two-factor sign-in off and on again for new codes.", left)); err != nil {
		return 0, fail(op, err, "")
	}
	return left, fail(op, tx.Commit(), "")
}

// DisableTOTP turns the user's two-factor sign-in off (the person proved
// who they are with a code or their password first), forgets the secret
// and the recovery codes, and queues a security e-mail, in one
// transaction. It is a conflict when it is not on.
func (db *DB) DisableTOTP(ctx context.Context, userID int64, now time.Time) error {
	const op = "disable totp"
	tx, err := db.begin(ctx)
	if err != nil {
		return fail(op, err, "")
	}
	defer tx.Rollback()
	t, err := findTwoFactor(ctx, tx, userID)
	if err != nil {
		return fail(op, err, "")
	}
	if !t.Enabled() {
		return conflict(msgTwoFactorOff)
	}
	if err := deleteTwoFactor(ctx, tx, userID); err != nil {
		return fail(op, err, "")
	}
	if err := queueSignInMethodMail(ctx, tx, userID, now, "Two-factor sign-in was turned off",
		"Two-factor sign-in was turned off for your account: signing in now needs only your password. "+
			"If you did not do this, reset your password and contact support at once."); err != nil {
		return fail(op, err, "")
	}
	return fail(op, tx.Commit(), "")
}

// ResetTwoFactor turns off the two-factor sign-in of the account with the
// email for the operator (gpumarket admin reset-2fa), when its owner has
// lost their authenticator and their recovery codes. In one transaction it
// forgets the secret and recovery codes, ends every session and half-done
// login of the account, records the reset in the audit trail with the
// operator's note, and queues a security e-mail to the person. It is a
// conflict when the account has no two-factor sign-in on.
func (db *DB) ResetTwoFactor(ctx context.Context, email, note string, now time.Time) (market.User, error) {
	const op = "reset two-factor"
	tx, err := db.begin(ctx)
	if err != nil {
		return market.User{}, fail(op, err, "")
	}
	defer tx.Rollback()
	u, err := scanUser(tx.QueryRowContext(ctx, `SELECT `+userColumns+` FROM users WHERE email = ?`, market.NormaliseEmail(email)))
	if errors.Is(err, sql.ErrNoRows) {
		return market.User{}, notFound(msgUserNotFound)
	}
	if err != nil {
		return market.User{}, fail(op, err, "")
	}
	t, err := findTwoFactor(ctx, tx, u.ID)
	if err != nil {
		return market.User{}, fail(op, err, "")
	}
	if !t.Enabled() {
		return market.User{}, conflict(msgTwoFactorOff)
	}
	if err := deleteTwoFactor(ctx, tx, u.ID); err != nil {
		return market.User{}, fail(op, err, "")
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM sessions WHERE user_id = ?`, u.ID); err != nil {
		return market.User{}, fail(op, err, "")
	}
	if err := insertAudit(ctx, tx, AuditEntry{At: now, Action: AuditTwoFactorReset, SubjectKind: AuditSubjectUser, SubjectID: u.ID,
		Before: AuditJSON(map[string]any{"two_factor": "on", "enabled_at": unix(t.EnabledAt), "recovery_codes_left": t.RecoveryLeft}),
		After:  AuditJSON(map[string]any{"two_factor": "off", "sessions": "ended"}), Note: note}); err != nil {
		return market.User{}, fail(op, err, "")
	}
	if err := queueSignInMethodMail(ctx, tx, u.ID, now, "Two-factor sign-in was reset",
		"An operator reset two-factor sign-in on your account at your request, and logged it out everywhere. "+
			"Sign in with your password and set up two-factor sign-in again. If you did not ask for this, contact support at once."); err != nil {
		return market.User{}, fail(op, err, "")
	}
	return u, fail(op, tx.Commit(), "")
}

// deleteTwoFactor forgets the user's secret, recovery codes and half-done
// logins.
func deleteTwoFactor(ctx context.Context, tx *sql.Tx, userID int64) error {
	for _, q := range []string{`DELETE FROM user_totp WHERE user_id = ?`, `DELETE FROM recovery_codes WHERE user_id = ?`,
		`DELETE FROM login_challenges WHERE user_id = ?`} {
		if _, err := tx.ExecContext(ctx, q, userID); err != nil {
			return err
		}
	}
	return nil
}

// queueSignInMethodMail queues a security e-mail about the user's sign-in
// methods, which they cannot turn off.
func queueSignInMethodMail(ctx context.Context, tx *sql.Tx, userID int64, now time.Time, subject, body string) error {
	var email string
	if err := tx.QueryRowContext(ctx, `SELECT email FROM users WHERE id = ?`, userID).Scan(&email); err != nil {
		return err
	}
	return queueMail(ctx, tx, OutboxMail{UserID: userID, To: email, Kind: MailSignInMethod, Subject: subject, Body: body,
		URLPath: "/account/two-factor", CreatedAt: now})
}

// replaceRecoveryCodes stores codeHashes as the user's recovery codes, in
// place of any they had.
func replaceRecoveryCodes(ctx context.Context, tx *sql.Tx, userID int64, codeHashes []string) error {
	if _, err := tx.ExecContext(ctx, `DELETE FROM recovery_codes WHERE user_id = ?`, userID); err != nil {
		return err
	}
	for _, h := range codeHashes {
		if _, err := tx.ExecContext(ctx, `INSERT INTO recovery_codes (user_id, code_hash) VALUES (?, ?)`, userID, h); err != nil {
			return err
		}
	}
	return nil
}

// CreateLoginChallenge records that the user's password was accepted and
// their second factor is awaited, for market.LoginChallengeTTL, and returns
// the raw id for the browser's cookie (the database keeps its SHA-256).
// Expired challenges of anyone are pruned on the way.
func (db *DB) CreateLoginChallenge(ctx context.Context, userID int64, next string, now time.Time) (string, error) {
	const op = "create login challenge"
	id, err := randomToken()
	if err != nil {
		return "", fail(op, err, "")
	}
	tx, err := db.begin(ctx)
	if err != nil {
		return "", fail(op, err, "")
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `DELETE FROM login_challenges WHERE expires_at <= ?`, unix(now)); err != nil {
		return "", fail(op, err, "")
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO login_challenges (id_hash, user_id, next_path, created_at, expires_at) VALUES (?, ?, ?, ?, ?)`,
		hashSessionID(id), userID, next, unix(now), unix(now.Add(market.LoginChallengeTTL))); err != nil {
		return "", fail(op, err, "")
	}
	return id, fail(op, tx.Commit(), "")
}

// FindLoginChallenge returns the live challenge with the raw id. A missing
// or expired one is not found, with a message asking to start again.
func (db *DB) FindLoginChallenge(ctx context.Context, id string, now time.Time) (LoginChallenge, error) {
	if id == "" {
		return LoginChallenge{}, notFound(msgChallengeExpired)
	}
	var lc LoginChallenge
	var expires int64
	err := db.reader.QueryRowContext(ctx, `SELECT user_id, next_path, expires_at FROM login_challenges WHERE id_hash = ? AND expires_at > ?`,
		hashSessionID(id), unix(now)).Scan(&lc.UserID, &lc.Next, &expires)
	if errors.Is(err, sql.ErrNoRows) {
		return LoginChallenge{}, notFound(msgChallengeExpired)
	}
	if err != nil {
		return LoginChallenge{}, fail("find login challenge", err, "")
	}
	lc.ExpiresAt = fromUnix(expires)
	return lc, nil
}

// DeleteLoginChallenge ends the challenge with the raw id (the login was
// completed or abandoned). Deleting one that is gone is not an error.
func (db *DB) DeleteLoginChallenge(ctx context.Context, id string) error {
	const op = "delete login challenge"
	tx, err := db.begin(ctx)
	if err != nil {
		return fail(op, err, "")
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `DELETE FROM login_challenges WHERE id_hash = ?`, hashSessionID(id)); err != nil {
		return fail(op, err, "")
	}
	return fail(op, tx.Commit(), "")
}

func unauthorized(msg string) error {
	return &market.Error{Code: market.CodeUnauthorized, Message: msg}
}

// TakeCodeAttempt counts an attempt at the user's second factor at now
// and reports whether it may go ahead: at most limit attempts per fixed
// window of the given length, from the window's first attempt. It is one
// conditional UPDATE (the row's lock serialises simultaneous attempts on
// both engines), so a burst of simultaneous codes cannot all pass the
// check before any is counted. A refused attempt is not counted; wait is
// how long until the window ends. An account without two-factor sign-in
// is allowed (there is nothing to guess).
func (db *DB) TakeCodeAttempt(ctx context.Context, userID int64, now time.Time, window time.Duration, limit int) (bool, time.Duration, error) {
	const op = "take code attempt"
	tx, err := db.begin(ctx)
	if err != nil {
		return false, 0, fail(op, err, "")
	}
	defer tx.Rollback()
	expired := unix(now.Add(-window))
	n, err := execCount(ctx, tx, `UPDATE user_totp SET
		code_attempts = CASE WHEN code_window_start <= ? THEN 1 ELSE code_attempts + 1 END,
		code_window_start = CASE WHEN code_window_start <= ? THEN ? ELSE code_window_start END
		WHERE user_id = ? AND (code_window_start <= ? OR code_attempts < ?)`,
		expired, expired, unix(now), userID, expired, limit)
	if err != nil {
		return false, 0, fail(op, err, "")
	}
	if n == 1 {
		return true, 0, fail(op, tx.Commit(), "")
	}
	var start int64
	err = tx.QueryRowContext(ctx, `SELECT code_window_start FROM user_totp WHERE user_id = ?`, userID).Scan(&start)
	if errors.Is(err, sql.ErrNoRows) {
		return true, 0, nil
	}
	if err != nil {
		return false, 0, fail(op, err, "")
	}
	return false, fromUnix(start).Add(window).Sub(now), nil
}

// ResetCodeAttempts forgets the user's attempts at a second factor (a
// correct one was given).
func (db *DB) ResetCodeAttempts(ctx context.Context, userID int64) error {
	const op = "reset code attempts"
	tx, err := db.begin(ctx)
	if err != nil {
		return fail(op, err, "")
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `UPDATE user_totp SET code_attempts = 0, code_window_start = 0 WHERE user_id = ?`, userID); err != nil {
		return fail(op, err, "")
	}
	return fail(op, tx.Commit(), "")
}
