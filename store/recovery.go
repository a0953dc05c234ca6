package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// Purposes of a mailed account link (account_links.purpose).
const (
	linkVerify  = "verify"  // confirms the address given at sign-up
	linkReset   = "reset"   // sets a new password
	linkAddress = "address" // confirms a new address
)

// Where each link leads, relative to the server's base URL; the raw token
// follows.
const (
	VerifyPath        = "/verify?token="
	ResetPath         = "/password/reset?token="
	AddressChangePath = "/account/email/confirm?token="
)

const (
	msgLinkUnknown      = "This link is not valid. Check that the whole link from the e-mail was copied, or ask for a new one."
	msgLinkUsed         = "This link has already been used: each link works once."
	msgLinkOtherAddress = "This link was sent to an address that is no longer the account's."
)

// nullUnix is a time for a nullable INTEGER column: NULL when zero.
func nullUnix(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return unix(t)
}

// issueLink stores a new single-use link for the user, mailed to email and
// valid for ttl from now, and returns the raw token that goes in it.
func issueLink(ctx context.Context, tx *sql.Tx, userID int64, purpose, email string, now time.Time, ttl time.Duration) (string, error) {
	raw, err := randomToken()
	if err != nil {
		return "", err
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO account_links (user_id, purpose, token_hash, email, created_at, expires_at)
		VALUES (?, ?, ?, ?, ?, ?)`, userID, purpose, hashToken(raw), email, unix(now), unix(now.Add(ttl)))
	return raw, err
}

// retireLinks marks the user's unused links of a purpose used at now, so
// that only the newest (or none) works.
func retireLinks(ctx context.Context, tx *sql.Tx, userID int64, purpose string, now time.Time) error {
	_, err := tx.ExecContext(ctx, `UPDATE account_links SET used_at = ? WHERE user_id = ? AND purpose = ? AND used_at IS NULL`,
		unix(now), userID, purpose)
	return err
}

// accountLink is a stored link as its use needs it.
type accountLink struct {
	id, userID int64
	email      string // the address the link was mailed to
	userEmail  string // the account's address now
}

// useLink finds the live link with the raw token for purpose at now. An
// unknown token is not found; a used or expired one, or one mailed to an
// address the account no longer has (except for a new address, which is
// not the account's until confirmed), is a conflict saying so.
func useLink(ctx context.Context, q querier, purpose, raw string, now time.Time) (accountLink, error) {
	var l accountLink
	var expires int64
	var used sql.NullInt64
	err := q.QueryRowContext(ctx, `SELECT l.id, l.user_id, l.email, u.email, l.expires_at, l.used_at
		FROM account_links l JOIN users u ON u.id = l.user_id WHERE l.token_hash = ? AND l.purpose = ?`,
		hashToken(raw), purpose).Scan(&l.id, &l.userID, &l.email, &l.userEmail, &expires, &used)
	if errors.Is(err, sql.ErrNoRows) || raw == "" {
		return accountLink{}, notFound(msgLinkUnknown)
	}
	if err != nil {
		return accountLink{}, err
	}
	switch {
	case used.Valid:
		return accountLink{}, conflict(msgLinkUsed)
	case !now.Before(fromUnix(expires)):
		return accountLink{}, conflict(expiredLinkMessage(purpose))
	case purpose != linkAddress && l.email != l.userEmail:
		return accountLink{}, conflict(msgLinkOtherAddress)
	}
	return l, nil
}

func expiredLinkMessage(purpose string) string {
	switch purpose {
	case linkReset:
		return fmt.Sprintf("This reset link has expired: links work for %s. Ask for a new one.", ttlText(market.ResetLinkTTL))
	case linkAddress:
		return fmt.Sprintf("This confirmation link has expired: links work for %s. Ask for the change again on your account page.",
			ttlText(market.AddressChangeLinkTTL))
	}
	return fmt.Sprintf("This confirmation link has expired: links work for %s. Log in and ask for a new one.", ttlText(market.VerifyLinkTTL))
}

// ttlText is a link's lifetime in words: "1 hour", "48 hours".
func ttlText(d time.Duration) string {
	if h := int(d.Hours()); h != 1 {
		return fmt.Sprintf("%d hours", h)
	}
	return "1 hour"
}

// markLinkUsed records the single use of link id at now.
func markLinkUsed(ctx context.Context, tx *sql.Tx, id int64, now time.Time) error {
	res, err := tx.ExecContext(ctx, `UPDATE account_links SET used_at = ? WHERE id = ? AND used_at IS NULL`, unix(now), id)
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n != 1 {
		return conflict(msgLinkUsed)
	}
	return nil
}

// AccountCleanup is what taking an account back did: how many sessions it
// ended, API tokens it revoked and half-done two-factor logins it ended,
// the SSH keys it removed, and how many saved cards it left in place
// (their owner is offered to remove them: a card may be the owner's own).
type AccountCleanup struct {
	Sessions   int
	Tokens     int
	HalfLogins int
	SSHKeys    []market.SSHKey
	Cards      int
}

// takeBackAccount is what a password reset and the first confirmation of
// an address do, in the caller's transaction: whoever held the account
// before the address's owner showed up may have left things that act for
// it, so its API tokens are revoked, its SSH keys removed and its half-done
// two-factor logins ended, and every session but keepSessionID (raw; ""
// for none) ends. Saved cards are counted, not removed. The address is
// mailed what was removed (MailAccessRemoved) when anything was.
func takeBackAccount(ctx context.Context, tx *sql.Tx, u market.User, keepSessionID string, now time.Time) (AccountCleanup, error) {
	var c AccountCleanup
	var err error
	if c.Tokens, err = revokeAPITokens(ctx, tx, u.ID, now); err != nil {
		return c, err
	}
	if c.SSHKeys, err = userSSHKeys(ctx, tx, u.ID); err != nil {
		return c, err
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM ssh_keys WHERE user_id = ?`, u.ID); err != nil {
		return c, err
	}
	if c.HalfLogins, err = execCount(ctx, tx, `DELETE FROM login_challenges WHERE user_id = ?`, u.ID); err != nil {
		return c, err
	}
	if c.Sessions, err = execCount(ctx, tx, `DELETE FROM sessions WHERE user_id = ? AND id_hash <> ?`, u.ID, hashSessionID(keepSessionID)); err != nil {
		return c, err
	}
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM payment_methods WHERE user_id = ? AND removed_at IS NULL`, u.ID).Scan(&c.Cards); err != nil {
		return c, err
	}
	if c.Tokens == 0 && len(c.SSHKeys) == 0 && c.HalfLogins == 0 && c.Cards == 0 {
		return c, nil
	}
	body := fmt.Sprintf("Hello %s,\n\nThe password of your gpumarket account was reset, or its address confirmed for the first time, "+
		"on %s UTC. Whoever used the account before may not have been you, so what could act for it without your password was removed:\n\n%s"+
		"\nCreate new API tokens and add your SSH keys again on your account page.", u.DisplayName, now.UTC().Format("2 January 2006 at 15:04"), c.Text())
	return c, queueMail(ctx, tx, OutboxMail{UserID: u.ID, To: u.Email, Kind: MailAccessRemoved, CreatedAt: now,
		Subject: "API tokens and SSH keys of your gpumarket account were removed", Body: body, URLPath: "/account"})
}

// Text says what the cleanup did, a line each, for the mail and the page.
func (c AccountCleanup) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "- API tokens revoked: %d\n", c.Tokens)
	if len(c.SSHKeys) == 0 {
		b.WriteString("- SSH keys removed: none\n")
	}
	for _, k := range c.SSHKeys {
		fmt.Fprintf(&b, "- SSH key removed: %s %s %s\n", k.Type, k.Fingerprint, k.Comment)
	}
	if c.HalfLogins > 0 {
		fmt.Fprintf(&b, "- Half-done two-factor log-ins ended: %d\n", c.HalfLogins)
	}
	if c.Cards > 0 {
		fmt.Fprintf(&b, "\nThe account still has %d saved card(s). If you did not save them, remove them under "+
			"Payment methods on your account page.\n", c.Cards)
	}
	return b.String()
}

// execCount runs a statement and returns how many rows it changed.
func execCount(ctx context.Context, tx *sql.Tx, query string, args ...any) (int, error) {
	res, err := tx.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	n, err := res.RowsAffected()
	return int(n), err
}

// queueVerifyMail mails the link confirming the account's address.
func queueVerifyMail(ctx context.Context, tx *sql.Tx, u market.User, raw string, now time.Time) error {
	return queueMail(ctx, tx, OutboxMail{UserID: u.ID, To: u.Email, Kind: MailVerifyAddress, CreatedAt: now,
		Subject: "Confirm your e-mail address for gpumarket",
		Body: fmt.Sprintf("Hello %s,\n\nConfirm that this is your address by following the link below within %s. "+
			"Until you do, you can browse and get quotes, but not book, list offers or be paid out.\n\n"+
			"If you did not sign up to gpumarket, ignore this message: nothing happens without the link.",
			u.DisplayName, ttlText(market.VerifyLinkTTL)),
		URLPath: VerifyPath + url.QueryEscape(raw)})
}

// SignUp creates the account of a person signing up, with its address not
// yet confirmed, and mails the address a link to confirm it
// (MailVerifyAddress, valid for market.VerifyLinkTTL). When the address
// already has an account nothing is created and its owner is mailed
// instead (MailAccountExists): the answer to a sign-up must be the same
// either way, so that it never tells whether an address has an account.
// existed says which happened; id is the new or the existing account's.
func (db *DB) SignUp(ctx context.Context, u market.User, passwordHash []byte, now time.Time) (id int64, existed bool, err error) {
	const op = "sign up"
	tx, err := db.begin(ctx)
	if err != nil {
		return 0, false, fail(op, err, "")
	}
	defer tx.Rollback()

	now = truncate(now)
	u.Email, u.CreatedAt, u.EmailVerifiedAt = market.NormaliseEmail(u.Email), now, time.Time{}
	err = tx.QueryRowContext(ctx, `SELECT id FROM users WHERE email = ?`, u.Email).Scan(&id)
	switch {
	case err == nil:
		err = queueMail(ctx, tx, OutboxMail{UserID: id, To: u.Email, Kind: MailAccountExists, CreatedAt: now,
			Subject: "You already have a gpumarket account",
			Body: "Someone, probably you, tried to sign up to gpumarket with this address, which already has an account, " +
				"so no new account was made.\n\nTo get into your account, log in; if you have forgotten the password, " +
				"choose \"Forgot your password?\" on the log-in page. If it was not you, you can ignore this message.",
			URLPath: "/login"})
		if err != nil {
			return 0, false, fail(op, err, "")
		}
		return id, true, fail(op, tx.Commit(), "")
	case !errors.Is(err, sql.ErrNoRows):
		return 0, false, fail(op, err, "")
	}
	if u.ID, err = insertUser(ctx, tx, u, passwordHash); err != nil {
		return 0, false, fail(op, err, "")
	}
	raw, err := issueLink(ctx, tx, u.ID, linkVerify, u.Email, now, market.VerifyLinkTTL)
	if err != nil {
		return 0, false, fail(op, err, "")
	}
	if err := queueVerifyMail(ctx, tx, u, raw, now); err != nil {
		return 0, false, fail(op, err, "")
	}
	return u.ID, false, fail(op, tx.Commit(), "")
}

// ResendVerification mails the user a new link to confirm their address;
// the links sent before stop working. An address already confirmed is a
// conflict.
func (db *DB) ResendVerification(ctx context.Context, userID int64, now time.Time) error {
	const op = "resend verification"
	tx, err := db.begin(ctx)
	if err != nil {
		return fail(op, err, "")
	}
	defer tx.Rollback()

	u, err := findUserIn(ctx, tx, userID)
	if err != nil {
		return fail(op, err, "")
	}
	if u.Verified() {
		return conflict("Your e-mail address is already confirmed.")
	}
	if err := retireLinks(ctx, tx, userID, linkVerify, now); err != nil {
		return fail(op, err, "")
	}
	raw, err := issueLink(ctx, tx, userID, linkVerify, u.Email, now, market.VerifyLinkTTL)
	if err != nil {
		return fail(op, err, "")
	}
	if err := queueVerifyMail(ctx, tx, u, raw, now); err != nil {
		return fail(op, err, "")
	}
	return fail(op, tx.Commit(), "")
}

// VerifyAddress confirms the address that the verification link with the
// raw token was mailed to, at now, and returns the account. The link works
// once, until it expires, and only while the address is still the
// account's. The first confirmation takes the account back for the
// address's owner (takeBackAccount): whoever signed up with the address
// before its owner followed the link loses the sessions (but
// keepSessionID, the raw id of the browser following the link if it is
// the account's) and whatever else could act for it.
func (db *DB) VerifyAddress(ctx context.Context, raw, keepSessionID string, now time.Time) (market.User, AccountCleanup, error) {
	const op = "verify address"
	tx, err := db.begin(ctx)
	if err != nil {
		return market.User{}, AccountCleanup{}, fail(op, err, "")
	}
	defer tx.Rollback()

	l, err := useLink(ctx, tx, linkVerify, raw, now)
	if err != nil {
		return market.User{}, AccountCleanup{}, fail(op, err, "")
	}
	if err := markLinkUsed(ctx, tx, l.id, now); err != nil {
		return market.User{}, AccountCleanup{}, fail(op, err, "")
	}
	first, err := execCount(ctx, tx, `UPDATE users SET email_verified_at = ? WHERE id = ? AND email_verified_at IS NULL`, unix(now), l.userID)
	if err != nil {
		return market.User{}, AccountCleanup{}, fail(op, err, "")
	}
	u, err := scanUser(tx.QueryRowContext(ctx, `SELECT `+userColumns+` FROM users WHERE id = ?`, l.userID))
	if err != nil {
		return market.User{}, AccountCleanup{}, fail(op, err, "")
	}
	var c AccountCleanup
	if first == 1 {
		if c, err = takeBackAccount(ctx, tx, u, keepSessionID, now); err != nil {
			return market.User{}, AccountCleanup{}, fail(op, err, "")
		}
	}
	return u, c, fail(op, tx.Commit(), "")
}

// RequestPasswordReset mails a single-use link to set a new password
// (MailPasswordReset, valid for market.ResetLinkTTL) to the account with
// the address, if there is one. An unknown address is not an error, and
// costs the same work (a token is made and hashed either way): the caller
// answers the same whether or not the address has an account.
func (db *DB) RequestPasswordReset(ctx context.Context, email string, now time.Time) error {
	const op = "request password reset"
	email = market.NormaliseEmail(email)
	tx, err := db.begin(ctx)
	if err != nil {
		return fail(op, err, "")
	}
	defer tx.Rollback()

	var id int64
	var name string
	err = tx.QueryRowContext(ctx, `SELECT id, display_name FROM users WHERE email = ?`, email).Scan(&id, &name)
	if errors.Is(err, sql.ErrNoRows) {
		raw, err := randomToken()
		_ = hashToken(raw)
		return fail(op, err, "")
	}
	if err != nil {
		return fail(op, err, "")
	}
	raw, err := issueLink(ctx, tx, id, linkReset, email, now, market.ResetLinkTTL)
	if err != nil {
		return fail(op, err, "")
	}
	err = queueMail(ctx, tx, OutboxMail{UserID: id, To: email, Kind: MailPasswordReset, CreatedAt: now,
		Subject: "Reset your gpumarket password",
		Body: fmt.Sprintf("Hello %s,\n\nSomeone, probably you, asked to reset the password of your gpumarket account. "+
			"Follow the link below within %s to choose a new one; it works once. Setting a new password logs the account out everywhere.\n\n"+
			"If you did not ask, ignore this message: your password stays as it is.", name, ttlText(market.ResetLinkTTL)),
		URLPath: ResetPath + url.QueryEscape(raw)})
	if err != nil {
		return fail(op, err, "")
	}
	return fail(op, tx.Commit(), "")
}

// CheckResetLink reports whether the reset link with the raw token can
// still be used at now, without using it (the page with the form).
func (db *DB) CheckResetLink(ctx context.Context, raw string, now time.Time) error {
	const op = "check reset link"
	tx, err := db.read(ctx)
	if err != nil {
		return fail(op, err, "")
	}
	defer tx.Rollback()
	_, err = useLink(ctx, tx, linkReset, raw, now)
	return fail(op, err, "")
}

// ResetPassword uses the reset link with the raw token at now: it sets the
// password hash, retires the account's other reset links and takes the
// account back for the address's owner (takeBackAccount: every session
// ends, API tokens are revoked, SSH keys removed, half-done two-factor
// logins ended), and returns the account and what was done. Having
// received the link, the address also counts as confirmed.
func (db *DB) ResetPassword(ctx context.Context, raw string, passwordHash []byte, now time.Time) (market.User, AccountCleanup, error) {
	const op = "reset password"
	tx, err := db.begin(ctx)
	if err != nil {
		return market.User{}, AccountCleanup{}, fail(op, err, "")
	}
	defer tx.Rollback()

	l, err := useLink(ctx, tx, linkReset, raw, now)
	if err != nil {
		return market.User{}, AccountCleanup{}, fail(op, err, "")
	}
	if err := retireLinks(ctx, tx, l.userID, linkReset, now); err != nil {
		return market.User{}, AccountCleanup{}, fail(op, err, "")
	}
	if _, err := tx.ExecContext(ctx, `UPDATE users SET password_hash = ?, email_verified_at = COALESCE(email_verified_at, ?) WHERE id = ?`,
		passwordHash, unix(now), l.userID); err != nil {
		return market.User{}, AccountCleanup{}, fail(op, err, "")
	}
	u, err := scanUser(tx.QueryRowContext(ctx, `SELECT `+userColumns+` FROM users WHERE id = ?`, l.userID))
	if err != nil {
		return market.User{}, AccountCleanup{}, fail(op, err, "")
	}
	c, err := takeBackAccount(ctx, tx, u, "", now)
	if err != nil {
		return market.User{}, AccountCleanup{}, fail(op, err, "")
	}
	return u, c, fail(op, tx.Commit(), "")
}

// RequestAddressChange asks to change the user's address to newEmail
// (normalised): it mails newEmail a link to confirm it (MailVerifyAddress,
// valid for market.AddressChangeLinkTTL); the address changes only when
// the link is followed. An earlier request's link stops working. When
// newEmail already has another account, that account's owner is told
// instead (MailAccountExists) and no link is sent, but the answer is the
// same, so that the form never tells whether an address has an account.
// An invalid address, or the current one, is invalid (field "new_email").
func (db *DB) RequestAddressChange(ctx context.Context, userID int64, newEmail string, now time.Time) error {
	const op = "request address change"
	newEmail = market.NormaliseEmail(newEmail)
	if msg := market.EmailProblem(newEmail); msg != "" {
		return &market.Error{Code: market.CodeInvalid, Message: msg, Fields: map[string]string{"new_email": msg}}
	}
	tx, err := db.begin(ctx)
	if err != nil {
		return fail(op, err, "")
	}
	defer tx.Rollback()

	u, err := findUserIn(ctx, tx, userID)
	if err != nil {
		return fail(op, err, "")
	}
	if u.Email == newEmail {
		msg := "That is already your address."
		return &market.Error{Code: market.CodeInvalid, Message: msg, Fields: map[string]string{"new_email": msg}}
	}
	if err := retireLinks(ctx, tx, userID, linkAddress, now); err != nil {
		return fail(op, err, "")
	}
	var other int64
	err = tx.QueryRowContext(ctx, `SELECT id FROM users WHERE email = ?`, newEmail).Scan(&other)
	switch {
	case err == nil:
		err = queueMail(ctx, tx, OutboxMail{UserID: other, To: newEmail, Kind: MailAccountExists, CreatedAt: now,
			Subject: "Your address was given for another gpumarket account",
			Body: "Someone asked to move another gpumarket account to this address. It already has an account (yours), " +
				"so nothing was changed and your account is as it was.\n\nIf you have forgotten your password, " +
				"choose \"Forgot your password?\" on the log-in page.",
			URLPath: "/login"})
	case errors.Is(err, sql.ErrNoRows):
		var raw string
		if raw, err = issueLink(ctx, tx, userID, linkAddress, newEmail, now, market.AddressChangeLinkTTL); err != nil {
			return fail(op, err, "")
		}
		err = queueMail(ctx, tx, OutboxMail{UserID: userID, To: newEmail, Kind: MailVerifyAddress, CreatedAt: now,
			Subject: "Confirm your new e-mail address for gpumarket",
			Body: fmt.Sprintf("Hello %s,\n\nYou asked to use this address for your gpumarket account instead of %s. "+
				"Follow the link below within %s to confirm it; until you do, the account keeps its old address.\n\n"+
				"If you did not ask, ignore this message.", u.DisplayName, u.Email, ttlText(market.AddressChangeLinkTTL)),
			URLPath: AddressChangePath + url.QueryEscape(raw)})
	}
	if err != nil {
		return fail(op, err, "")
	}
	return fail(op, tx.Commit(), "")
}

// ConfirmAddressChange uses the address-change link with the raw token at
// now: the account's address becomes the one the link was mailed to,
// confirmed, and the old address is told (MailAddressChange). It returns
// the account as changed and its old address. An address taken by another
// account meanwhile is a conflict. Every session of the account ends but
// keepSessionID (the raw id of the browser following the link, if it is
// the account's): whoever held the old address's sessions is out.
func (db *DB) ConfirmAddressChange(ctx context.Context, raw, keepSessionID string, now time.Time) (market.User, string, error) {
	const op = "confirm address change"
	tx, err := db.begin(ctx)
	if err != nil {
		return market.User{}, "", fail(op, err, "")
	}
	defer tx.Rollback()

	l, err := useLink(ctx, tx, linkAddress, raw, now)
	if err != nil {
		return market.User{}, "", fail(op, err, "")
	}
	if err := markLinkUsed(ctx, tx, l.id, now); err != nil {
		return market.User{}, "", fail(op, err, "")
	}
	if _, err := tx.ExecContext(ctx, `UPDATE users SET email = ?, email_verified_at = ? WHERE id = ?`,
		l.email, unix(now), l.userID); err != nil {
		return market.User{}, "", fail(op, err, "That address now belongs to another account, so yours was not changed.")
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM sessions WHERE user_id = ? AND id_hash <> ?`, l.userID, hashSessionID(keepSessionID)); err != nil {
		return market.User{}, "", fail(op, err, "")
	}
	u, err := scanUser(tx.QueryRowContext(ctx, `SELECT `+userColumns+` FROM users WHERE id = ?`, l.userID))
	if err != nil {
		return market.User{}, "", fail(op, err, "")
	}
	err = queueMail(ctx, tx, OutboxMail{UserID: u.ID, To: l.userEmail, Kind: MailAddressChange, CreatedAt: now,
		Subject: "The e-mail address of your gpumarket account was changed",
		Body: fmt.Sprintf("Hello %s,\n\nThe e-mail address of your gpumarket account was changed from %s to %s on %s UTC. "+
			"Messages now go to the new address, and this one no longer logs in.\n\n"+
			"If you did not make this change, contact support at once: someone may have your password.",
			u.DisplayName, l.userEmail, u.Email, now.UTC().Format("2 January 2006 at 15:04"))})
	if err != nil {
		return market.User{}, "", fail(op, err, "")
	}
	return u, l.userEmail, fail(op, tx.Commit(), "")
}
