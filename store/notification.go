package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// Notification is one in-app message to one user. The store keeps what it
// says, not its words: Notice is a market notice kind with its values, and
// whoever shows it writes the words (Notice.Text) — web on the
// notifications page, workflow in the e-mail.
type Notification struct {
	ID     int64
	UserID int64
	Kind   string // one of the Notify* kinds: what it is about, which the mail preferences choose by
	Notice market.Notice
	// Message is words given as they are: a notification written with
	// Message and no Notice is stored as market.NoticeText, as were all
	// those written before migration 0038; it is read back in both
	// Message and Notice. "" for any other kind.
	Message   string
	URL       string // where to look, e.g. "/provider/offers"; may be ""
	CreatedAt time.Time
	ReadAt    time.Time // zero while unread
}

// notice is what n says, its stored words made a NoticeText when it has
// no kind.
func (n Notification) notice() market.Notice {
	if n.Notice.Kind == "" {
		return market.TextNotice(n.Message)
	}
	return n.Notice
}

// noticeColumns are a notice as the notifications and the outbox keep it:
// its kind, its values as JSON, and its words for NoticeText only.
func noticeColumns(n market.Notice) (kind, params, words string, err error) {
	if n.Kind == market.NoticeText {
		return string(n.Kind), "{}", n.Params.Text, nil
	}
	b, err := json.Marshal(n.Params)
	if err != nil {
		return "", "", "", fmt.Errorf("notice %s: %w", n.Kind, err)
	}
	return string(n.Kind), string(b), "", nil
}

// scanNotice is the inverse of noticeColumns.
func scanNotice(kind, params, words string) (market.Notice, error) {
	if kind == string(market.NoticeText) {
		return market.TextNotice(words), nil
	}
	n := market.Notice{Kind: market.NoticeKind(kind)}
	if err := json.Unmarshal([]byte(params), &n.Params); err != nil {
		return market.Notice{}, fmt.Errorf("notice %s: %w", kind, err)
	}
	return n, nil
}

// Notification kinds.
const (
	NotifyListingApproved   = "listing_approved"
	NotifyListingRejected   = "listing_rejected"
	NotifyListingChanges    = "listing_changes_requested"
	NotifyBookingMade       = "booking_made"
	NotifyIncidentReported  = "incident_reported"
	NotifyDisputeOpened     = "dispute_opened"
	NotifyDisputeAnswered   = "dispute_answered"
	NotifyDisputeDecided    = "dispute_decided"
	NotifyPayoutSent        = "payout_sent"
	NotifyBookingCancelled  = "booking_cancelled"
	NotifyRefundSent        = "refund_sent"
	NotifyAccountSuspended  = "account_suspended"
	NotifyAccountReinstated = "account_reinstated"

	NotifyBookingHeld          = "booking_held"          // to the buyer: pay before the hold ends
	NotifyBookingConfirmed     = "booking_confirmed"     // to the buyer: paid
	NotifyBookingExpired       = "booking_expired"       // to the buyer: the hold ended unpaid
	NotifyPaymentFailed        = "payment_failed"        // to the buyer: try again while held
	NotifyReservationStarting  = "reservation_starting"  // to the buyer: how to connect
	NotifyStatementReady       = "statement_ready"       // to the buyer and the providers
	NotifyPayoutHeld           = "payout_held"           // to the provider: finish payout onboarding
	NotifyIncidentAcknowledged = "incident_acknowledged" // to the buyer
	NotifyReservationMessage   = "reservation_message"   // to the other side of a reservation's messages
)

// insertNotification adds n inside the caller's transaction, and queues
// its e-mail in the same transaction (queueNotificationMail), so the
// message goes out exactly when the event commits.
func insertNotification(ctx context.Context, tx querier, n Notification) error {
	n.Notice = n.notice()
	notice, params, words, err := noticeColumns(n.Notice)
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO notifications (user_id, kind, notice, params, message, url, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)`,
		n.UserID, n.Kind, notice, params, words, n.URL, unix(n.CreatedAt)); err != nil {
		return err
	}
	return queueNotificationMail(ctx, tx, n)
}

// Notify adds one notification in its own transaction, for events whose
// store method does not add it itself.
func (db *DB) Notify(ctx context.Context, n Notification) error {
	const op = "notify"
	if n.UserID == 0 || n.notice().Text() == "" {
		return invalid("A notification needs a recipient and a message.")
	}
	tx, err := db.begin(ctx)
	if err != nil {
		return fail(op, err, "")
	}
	defer tx.Rollback()
	if err := insertNotification(ctx, tx, n); err != nil {
		return fail(op, err, "")
	}
	return fail(op, tx.Commit(), "")
}

// ListNotifications returns the user's latest notifications, newest first.
func (db *DB) ListNotifications(ctx context.Context, userID int64, limit int) ([]Notification, error) {
	const op = "list notifications"
	if limit <= 0 {
		limit = 100
	}
	rows, err := db.reader.QueryContext(ctx, `SELECT id, user_id, kind, notice, params, message, url, created_at, read_at
		FROM notifications WHERE user_id = ? ORDER BY created_at DESC, id DESC LIMIT ?`, userID, limit)
	if err != nil {
		return nil, fail(op, err, "")
	}
	var out []Notification
	for rows.Next() {
		var n Notification
		var notice, params string
		var created int64
		var read sql.NullInt64
		if err := rows.Scan(&n.ID, &n.UserID, &n.Kind, &notice, &params, &n.Message, &n.URL, &created, &read); err != nil {
			rows.Close()
			return nil, fail(op, err, "")
		}
		var err error
		if n.Notice, err = scanNotice(notice, params, n.Message); err != nil {
			rows.Close()
			return nil, fail(op, err, "")
		}
		n.CreatedAt = fromUnix(created)
		if read.Valid {
			n.ReadAt = fromUnix(read.Int64)
		}
		out = append(out, n)
	}
	if err := closeRows(rows); err != nil {
		return nil, fail(op, err, "")
	}
	return out, nil
}

// CountUnreadNotifications returns how many of the user's notifications are
// unread: one indexed COUNT, cheap enough for every page view.
func (db *DB) CountUnreadNotifications(ctx context.Context, userID int64) (int, error) {
	var n int
	if err := db.reader.QueryRowContext(ctx, `SELECT COUNT(*) FROM notifications WHERE user_id = ? AND read_at IS NULL`,
		userID).Scan(&n); err != nil {
		return 0, fail("count unread notifications", err, "")
	}
	return n, nil
}

// MarkNotificationsRead marks every unread notification of the user read.
func (db *DB) MarkNotificationsRead(ctx context.Context, userID int64, now time.Time) error {
	const op = "mark notifications read"
	tx, err := db.begin(ctx)
	if err != nil {
		return fail(op, err, "")
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `UPDATE notifications SET read_at = ? WHERE user_id = ? AND read_at IS NULL`,
		unix(now), userID); err != nil {
		return fail(op, err, "")
	}
	return fail(op, tx.Commit(), "")
}
