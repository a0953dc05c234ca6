package store

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// OutboxMail is one e-mail message in the outbox (0022_mail_outbox.sql).
type OutboxMail struct {
	ID      int64
	UserID  int64 // 0 when the message is to an address with no account
	To      string
	Kind    string // a Notify* kind, or a Mail* security kind
	Subject string
	// Notice is what a notification's mail says (workflow.MailMessage
	// writes its words when it is sent or shown); for mail composed as
	// text (security mail, and a notification given as text) it is a
	// market.NoticeText of Body.
	Notice market.Notice
	Body   string // plain text, for mail composed as text; the sender adds the link and the HTML part
	// URLPath is the message's link relative to the server's base URL
	// (e.g. "/reservations/7"); may be "".
	URLPath       string
	CreatedAt     time.Time
	NextAttemptAt time.Time
	Attempts      int
	LastError     string
	SentAt        time.Time // zero while unsent
	// FailedAt is when the sender gave up on the message (GiveUpMail);
	// zero while it is sent or still being tried.
	FailedAt time.Time
}

// Sent reports whether the message has gone out.
func (m OutboxMail) Sent() bool { return !m.SentAt.IsZero() }

// Failed reports whether the sender gave up on the message.
func (m OutboxMail) Failed() bool { return !m.FailedAt.IsZero() }

// Security mail kinds: sent whatever the person's preferences.
const (
	MailVerifyAddress = "verify_address"  // the link confirming an address
	MailPasswordReset = "password_reset"  // the single-use reset link
	MailAddressChange = "address_changed" // to the old address when it changes
	MailAccountExists = "account_exists"  // a sign-up with an address that has an account
	MailSignInMethod  = "sign_in_method"  // two-factor sign-in turned on or off, reset
	MailAccessRemoved = "access_removed"  // tokens and SSH keys removed when the account was taken back
)

// SecretLinkMail reports whether mail of kind carries a link that is a
// secret of its addressee: following it confirms an address or sets a
// password. Such a link is shown only to the addressee (web redacts it on
// the admin's outbox and on another account's view of the demo mailbox).
func SecretLinkMail(kind string) bool {
	return kind == MailVerifyAddress || kind == MailPasswordReset
}

// SecurityMail reports whether kind is security mail, which cannot be
// turned off.
func SecurityMail(kind string) bool {
	switch kind {
	case MailVerifyAddress, MailPasswordReset, MailAddressChange, MailAccountExists, MailSignInMethod, MailAccessRemoved:
		return true
	}
	return false
}

// notificationSubjects is the subject of the e-mail sent with each kind of
// notification; a kind missing here is not mailed.
var notificationSubjects = map[string]string{
	NotifyListingApproved:   "Your offer was approved",
	NotifyListingRejected:   "Your offer was rejected",
	NotifyListingChanges:    "Changes requested on your offer",
	NotifyBookingMade:       "New booking on your offer",
	NotifyIncidentReported:  "Incident on a rental",
	NotifyDisputeOpened:     "A dispute was opened",
	NotifyDisputeAnswered:   "A dispute was answered",
	NotifyDisputeDecided:    "A dispute was decided",
	NotifyPayoutSent:        "Payout sent",
	NotifyBookingCancelled:  "Booking cancelled",
	NotifyRefundSent:        "Refund sent",
	NotifyAccountSuspended:  "Your account was suspended",
	NotifyAccountReinstated: "Your account was reinstated",

	NotifyBookingHeld:          "Your reservation is held: pay to confirm it",
	NotifyBookingConfirmed:     "Your reservation is confirmed",
	NotifyBookingExpired:       "Your reservation's hold ended unpaid",
	NotifyPaymentFailed:        "Your payment did not go through",
	NotifyReservationStarting:  "Your reservation is starting",
	NotifyStatementReady:       "Your statement is ready",
	NotifyPayoutHeld:           "A payout is held",
	NotifyIncidentAcknowledged: "An incident was acknowledged",
	NotifyReservationMessage:   "New message about a reservation",

	NotifyOrderFilled:    "Your standing order filled",
	NotifyOrderExpired:   "Your standing order expired",
	NotifyOrderCancelled: "Your standing order was cancelled",
	NotifyOrderNote:      "Your standing order needs you",

	NotifyRentalReplaced:      "Your rental was moved after a host failure",
	NotifyReplacementOffered:  "A host failed: confirm the replacement",
	NotifyReplacementUnfilled: "A host failed: no replacement was booked",

	NotifyMeteredRental: "Your metered rental",
}

// MailedNotificationKinds lists the notification kinds that are mailed, in
// a stable order, for the preferences form.
func MailedNotificationKinds() []string {
	return []string{
		NotifyBookingHeld, NotifyBookingConfirmed, NotifyBookingExpired, NotifyPaymentFailed, NotifyReservationStarting,
		NotifyBookingMade, NotifyBookingCancelled, NotifyStatementReady, NotifyRefundSent, NotifyPayoutSent, NotifyPayoutHeld,
		NotifyReservationMessage, NotifyIncidentReported, NotifyIncidentAcknowledged, NotifyDisputeOpened, NotifyDisputeAnswered, NotifyDisputeDecided,
		NotifyListingApproved, NotifyListingRejected, NotifyListingChanges,
		NotifyAccountSuspended, NotifyAccountReinstated,
		NotifyOrderFilled, NotifyOrderNote, NotifyOrderExpired, NotifyOrderCancelled,
		NotifyRentalReplaced, NotifyReplacementOffered, NotifyReplacementUnfilled,
		NotifyMeteredRental,
	}
}

// MailSubject is the subject mailed with a notification kind ("" when the
// kind is not mailed).
func MailSubject(kind string) string { return notificationSubjects[kind] }

// queueMail adds m to the outbox inside the caller's transaction, due at
// once.
func queueMail(ctx context.Context, q querier, m OutboxMail) error {
	if m.To == "" || m.Kind == "" || m.Subject == "" {
		return errors.New("store: queue mail: a message needs an address, a kind and a subject")
	}
	var user any
	if m.UserID != 0 {
		user = m.UserID
	}
	if m.Notice.Kind == "" {
		m.Notice = market.TextNotice(m.Body)
	}
	notice, params, body, err := noticeColumns(m.Notice)
	if err != nil {
		return err
	}
	_, err = q.ExecContext(ctx, `INSERT INTO mail_outbox (user_id, to_addr, kind, subject, notice, params, body, url_path, created_at, next_attempt_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, user, m.To, m.Kind, m.Subject, notice, params, body, m.URLPath, unix(m.CreatedAt), unix(m.CreatedAt))
	return err
}

// queueNotificationMail mails n to its user inside the caller's
// transaction, unless its kind is not mailed or the user turned it off.
func queueNotificationMail(ctx context.Context, q querier, n Notification) error {
	subject := MailSubject(n.Kind)
	if subject == "" {
		return nil
	}
	var email string
	var off int
	err := q.QueryRowContext(ctx, `SELECT u.email, (SELECT COUNT(*) FROM mail_opt_outs m WHERE m.user_id = u.id AND m.kind = ?)
		FROM users u WHERE u.id = ?`, n.Kind, n.UserID).Scan(&email, &off)
	if errors.Is(err, sql.ErrNoRows) || off > 0 {
		return nil
	}
	if err != nil {
		return err
	}
	return queueMail(ctx, q, OutboxMail{UserID: n.UserID, To: email, Kind: n.Kind, Subject: subject, Notice: n.notice(),
		URLPath: n.URL, CreatedAt: n.CreatedAt})
}

// QueueMail adds m to the outbox in its own transaction.
func (db *DB) QueueMail(ctx context.Context, m OutboxMail) error {
	const op = "queue mail"
	tx, err := db.begin(ctx)
	if err != nil {
		return fail(op, err, "")
	}
	defer tx.Rollback()
	if err := queueMail(ctx, tx, m); err != nil {
		return fail(op, err, "")
	}
	return fail(op, tx.Commit(), "")
}

const outboxColumns = `id, COALESCE(user_id, 0), to_addr, kind, subject, notice, params, body, url_path, created_at, next_attempt_at, attempts, last_error, sent_at, failed_at`

func scanOutbox(rows *sql.Rows) ([]OutboxMail, error) {
	var out []OutboxMail
	for rows.Next() {
		var m OutboxMail
		var notice, params string
		var created, next int64
		var sent, failed sql.NullInt64
		if err := rows.Scan(&m.ID, &m.UserID, &m.To, &m.Kind, &m.Subject, &notice, &params, &m.Body, &m.URLPath, &created, &next,
			&m.Attempts, &m.LastError, &sent, &failed); err != nil {
			rows.Close()
			return nil, err
		}
		var err error
		if m.Notice, err = scanNotice(notice, params, m.Body); err != nil {
			rows.Close()
			return nil, err
		}
		m.CreatedAt, m.NextAttemptAt = fromUnix(created), fromUnix(next)
		if sent.Valid {
			m.SentAt = fromUnix(sent.Int64)
		}
		if failed.Valid {
			m.FailedAt = fromUnix(failed.Int64)
		}
		out = append(out, m)
	}
	return out, closeRows(rows)
}

// DueMail returns up to limit unsent messages due at now, oldest first
// (not those given up on).
func (db *DB) DueMail(ctx context.Context, now time.Time, limit int) ([]OutboxMail, error) {
	rows, err := db.reader.QueryContext(ctx, `SELECT `+outboxColumns+` FROM mail_outbox
		WHERE sent_at IS NULL AND failed_at IS NULL AND next_attempt_at <= ? ORDER BY next_attempt_at, id LIMIT ?`, unix(now), limit)
	if err != nil {
		return nil, fail("list due mail", err, "")
	}
	out, err := scanOutbox(rows)
	return out, fail("list due mail", err, "")
}

// ListMail returns the newest messages, to one user (userID > 0) or to
// anyone (0), for the mailbox pages.
func (db *DB) ListMail(ctx context.Context, userID int64, limit int) ([]OutboxMail, error) {
	q, args := `SELECT `+outboxColumns+` FROM mail_outbox`, []any{}
	if userID > 0 {
		q += ` WHERE user_id = ?`
		args = append(args, userID)
	}
	rows, err := db.reader.QueryContext(ctx, q+` ORDER BY created_at DESC, id DESC LIMIT ?`, append(args, limit)...)
	if err != nil {
		return nil, fail("list mail", err, "")
	}
	out, err := scanOutbox(rows)
	return out, fail("list mail", err, "")
}

// FindMail returns outbox message id.
func (db *DB) FindMail(ctx context.Context, id int64) (OutboxMail, error) {
	rows, err := db.reader.QueryContext(ctx, `SELECT `+outboxColumns+` FROM mail_outbox WHERE id = ?`, id)
	if err != nil {
		return OutboxMail{}, fail("find mail", err, "")
	}
	out, err := scanOutbox(rows)
	if err != nil {
		return OutboxMail{}, fail("find mail", err, "")
	}
	if len(out) == 0 {
		return OutboxMail{}, notFound("No such message.")
	}
	return out[0], nil
}

// MailCounts is how many messages of the outbox are in each state.
type MailCounts struct {
	Sent, Waiting, Failed int
}

// CountMail counts the outbox's messages by state, for the admin page.
func (db *DB) CountMail(ctx context.Context) (MailCounts, error) {
	var c MailCounts
	err := db.reader.QueryRowContext(ctx, `SELECT
		COALESCE(SUM(CASE WHEN sent_at IS NOT NULL THEN 1 ELSE 0 END), 0),
		COALESCE(SUM(CASE WHEN sent_at IS NULL AND failed_at IS NULL THEN 1 ELSE 0 END), 0),
		COALESCE(SUM(CASE WHEN failed_at IS NOT NULL THEN 1 ELSE 0 END), 0)
		FROM mail_outbox`).Scan(&c.Sent, &c.Waiting, &c.Failed)
	return c, fail("count mail", err, "")
}

// MarkMailSent records that message id went out at now. A message already
// marked keeps its first time.
func (db *DB) MarkMailSent(ctx context.Context, id int64, now time.Time) error {
	return db.updateMail(ctx, "mark mail sent", `UPDATE mail_outbox SET sent_at = ?, attempts = attempts + 1, last_error = ''
		WHERE id = ? AND sent_at IS NULL`, unix(now), id)
}

// MarkMailFailed records a failed attempt to send message id and when to
// try again.
func (db *DB) MarkMailFailed(ctx context.Context, id int64, reason string, next time.Time) error {
	return db.updateMail(ctx, "mark mail failed", `UPDATE mail_outbox SET attempts = attempts + 1, last_error = ?, next_attempt_at = ?
		WHERE id = ? AND sent_at IS NULL`, reason, unix(next), id)
}

// GiveUpMail records a last failed attempt (counted when attempted) and
// that message id will not be tried again, at now.
func (db *DB) GiveUpMail(ctx context.Context, id int64, reason string, attempted bool, now time.Time) error {
	return db.updateMail(ctx, "give up mail", `UPDATE mail_outbox SET attempts = attempts + ?, last_error = ?, failed_at = ?
		WHERE id = ? AND sent_at IS NULL AND failed_at IS NULL`, boolInt(attempted), reason, unix(now), id)
}

// RetryMail makes a message that was given up on due again at now (an
// admin's decision), with its attempts counted afresh.
func (db *DB) RetryMail(ctx context.Context, id int64, now time.Time) error {
	const op = "retry mail"
	tx, err := db.begin(ctx)
	if err != nil {
		return fail(op, err, "")
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, `UPDATE mail_outbox SET failed_at = NULL, attempts = 0, next_attempt_at = ?
		WHERE id = ? AND sent_at IS NULL AND failed_at IS NOT NULL`, unix(now), id)
	if err != nil {
		return fail(op, err, "")
	}
	if n, err := res.RowsAffected(); err != nil {
		return fail(op, err, "")
	} else if n == 0 {
		return conflict("Only a message that was given up on can be tried again.")
	}
	return fail(op, tx.Commit(), "")
}

func (db *DB) updateMail(ctx context.Context, op, query string, args ...any) error {
	tx, err := db.begin(ctx)
	if err != nil {
		return fail(op, err, "")
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, query, args...); err != nil {
		return fail(op, err, "")
	}
	return fail(op, tx.Commit(), "")
}

// MailOptOuts returns the notification kinds the user turned off by
// e-mail.
func (db *DB) MailOptOuts(ctx context.Context, userID int64) (map[string]bool, error) {
	rows, err := db.reader.QueryContext(ctx, `SELECT kind FROM mail_opt_outs WHERE user_id = ?`, userID)
	if err != nil {
		return nil, fail("list mail opt-outs", err, "")
	}
	defer rows.Close()
	off := map[string]bool{}
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return nil, fail("list mail opt-outs", err, "")
		}
		off[k] = true
	}
	return off, fail("list mail opt-outs", rows.Err(), "")
}

// SetMailOptOuts replaces the user's opt-outs with the mailed notification
// kinds in off; security kinds and unknown kinds are refused.
func (db *DB) SetMailOptOuts(ctx context.Context, userID int64, off map[string]bool) error {
	const op = "set mail opt-outs"
	for k, v := range off {
		if v && MailSubject(k) == "" {
			return invalid("That kind of message cannot be turned off.")
		}
	}
	tx, err := db.begin(ctx)
	if err != nil {
		return fail(op, err, "")
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `DELETE FROM mail_opt_outs WHERE user_id = ?`, userID); err != nil {
		return fail(op, err, "")
	}
	for _, k := range MailedNotificationKinds() {
		if off[k] {
			if _, err := tx.ExecContext(ctx, `INSERT INTO mail_opt_outs (user_id, kind) VALUES (?, ?)`, userID, k); err != nil {
				return fail(op, err, "")
			}
		}
	}
	return fail(op, tx.Commit(), "")
}
