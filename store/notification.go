package store

import (
	"context"
	"database/sql"
	"time"
)

// Notification is one in-app message to one user.
type Notification struct {
	ID        int64
	UserID    int64
	Kind      string // one of the Notify* kinds
	Message   string
	URL       string // where to look, e.g. "/provider/offers"; may be ""
	CreatedAt time.Time
	ReadAt    time.Time // zero while unread
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
)

// insertNotification adds n inside the caller's transaction, and queues
// its e-mail in the same transaction (queueNotificationMail), so the
// message goes out exactly when the event commits.
func insertNotification(ctx context.Context, tx querier, n Notification) error {
	if _, err := tx.ExecContext(ctx, `INSERT INTO notifications (user_id, kind, message, url, created_at) VALUES (?, ?, ?, ?, ?)`,
		n.UserID, n.Kind, n.Message, n.URL, unix(n.CreatedAt)); err != nil {
		return err
	}
	return queueNotificationMail(ctx, tx, n)
}

// Notify adds one notification in its own transaction, for events whose
// store method does not add it itself.
func (db *DB) Notify(ctx context.Context, n Notification) error {
	const op = "notify"
	if n.UserID == 0 || n.Message == "" {
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
	rows, err := db.reader.QueryContext(ctx, `SELECT id, user_id, kind, message, url, created_at, read_at
		FROM notifications WHERE user_id = ? ORDER BY created_at DESC, id DESC LIMIT ?`, userID, limit)
	if err != nil {
		return nil, fail(op, err, "")
	}
	var out []Notification
	for rows.Next() {
		var n Notification
		var created int64
		var read sql.NullInt64
		if err := rows.Scan(&n.ID, &n.UserID, &n.Kind, &n.Message, &n.URL, &created, &read); err != nil {
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
