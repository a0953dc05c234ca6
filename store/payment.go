package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// PaymentStatus is where a reservation's payment stands.
type PaymentStatus string

// Payment statuses.
const (
	PaymentOpen PaymentStatus = "open" // checkout created, not paid
	PaymentPaid PaymentStatus = "paid"
	// PaymentFailed: the last attempt failed; the buyer may try again
	// while the hold lasts.
	PaymentFailed PaymentStatus = "failed"
	// PaymentRefundPending: paid after the hold lapsed or the reservation
	// was cancelled; the whole amount goes back (the retrier refunds it).
	PaymentRefundPending PaymentStatus = "refund_pending"
	PaymentRefunded      PaymentStatus = "refunded"
)

// Label says where a payment stands in words.
func (s PaymentStatus) Label() string {
	switch s {
	case PaymentOpen:
		return "checkout started, not paid"
	case PaymentPaid:
		return "paid"
	case PaymentFailed:
		return "failed"
	case PaymentRefundPending:
		return "paid late, to be refunded in full"
	case PaymentRefunded:
		return "refunded in full"
	}
	return "unknown"
}

// Payment is the payment of one reservation.
type Payment struct {
	ReservationID   int64
	CheckoutID      string
	PaymentIntentID string
	ChargeID        string
	Amount          market.Cents
	Status          PaymentStatus
	FailureMessage  string
	RefundedCents   market.Cents // as the processor last reported it
	Attempts        int
	NextAttemptAt   time.Time
	LastError       string
	CreatedAt       time.Time
	UpdatedAt       time.Time
}

// PaymentEvent is a processor notification that a reservation was paid
// (payment succeeded, or a checkout completed as paid).
type PaymentEvent struct {
	EventID         string // deduplicated; empty for a call that is not an event
	EventType       string
	ReservationID   int64
	CheckoutID      string
	PaymentIntentID string
	ChargeID        string
	Amount          market.Cents
	Currency        string
	// ChargeIntentID is the charge intent this payment finishes (a saved
	// card's charge), 0 for none: it is marked done in the same
	// transaction that records the payment.
	ChargeIntentID int64
}

// PaymentOutcome is what recording a payment did.
type PaymentOutcome string

// Payment outcomes.
const (
	PaymentDuplicate PaymentOutcome = "duplicate" // event already processed: nothing changed
	PaymentConfirmed PaymentOutcome = "confirmed" // held → confirmed, charge entries written
	PaymentRecorded  PaymentOutcome = "recorded"  // already confirmed earlier: payment details completed
	// PaymentLate: the reservation can no longer be confirmed (hold
	// lapsed, cancelled); the payment is marked refund_pending.
	PaymentLate    PaymentOutcome = "late"
	PaymentUnknown PaymentOutcome = "unknown" // no such reservation: event recorded and ignored
	// PaymentMismatched: the amount, currency or payment intent is not the
	// checkout's (market.PaymentMismatch); the money is recorded as the
	// buyer's and refunded in full by the retrier, and the reservation is
	// not confirmed by it.
	PaymentMismatched PaymentOutcome = "mismatched"
)

// Person-safe messages of billing.
const (
	msgPaymentNotFound    = "No payment has been started for this reservation."
	msgAccountNotFound    = "No payout account is connected yet."
	msgSettlementNotFound = "This reservation has not been settled yet."
	msgIncidentNotFound   = "That incident could not be found."
)

const paymentColumns = `reservation_id, checkout_id, payment_intent_id, charge_id, amount_cents, status, failure_message,
	refunded_cents, attempts, next_attempt_at, last_error, created_at, updated_at`

func scanPayment(s scanner) (Payment, error) {
	var p Payment
	var status string
	var amount, refunded, next, created, updated int64
	if err := s.Scan(&p.ReservationID, &p.CheckoutID, &p.PaymentIntentID, &p.ChargeID, &amount, &status, &p.FailureMessage,
		&refunded, &p.Attempts, &next, &p.LastError, &created, &updated); err != nil {
		return Payment{}, err
	}
	p.Amount, p.RefundedCents, p.Status = market.Cents(amount), market.Cents(refunded), PaymentStatus(status)
	p.NextAttemptAt, p.CreatedAt, p.UpdatedAt = fromUnix(next), fromUnix(created), fromUnix(updated)
	return p, nil
}

func getPayment(ctx context.Context, q querier, reservationID int64) (Payment, error) {
	p, err := scanPayment(q.QueryRowContext(ctx, `SELECT `+paymentColumns+` FROM payments WHERE reservation_id = ?`, reservationID))
	if errors.Is(err, sql.ErrNoRows) {
		return Payment{}, notFound(msgPaymentNotFound)
	}
	return p, err
}

// markEvent records an event id as processed; it reports false when the
// event was processed before (the caller then changes nothing). An empty id
// (not an event) is never a duplicate.
func markEvent(ctx context.Context, tx *sql.Tx, eventID, eventType string, now time.Time) (bool, error) {
	if eventID == "" {
		return true, nil
	}
	res, err := tx.ExecContext(ctx, `INSERT INTO processed_events (event_id, type, processed_at) VALUES (?, ?, ?)
		ON CONFLICT (event_id) DO NOTHING`, eventID, eventType, unix(now))
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// MarkEventProcessed records an event the marketplace does not act on, so
// a replay is recognised; it reports false for a replay.
func (db *DB) MarkEventProcessed(ctx context.Context, eventID, eventType string, now time.Time) (bool, error) {
	const op = "mark event processed"
	tx, err := db.begin(ctx)
	if err != nil {
		return false, fail(op, err, "")
	}
	defer tx.Rollback()
	fresh, err := markEvent(ctx, tx, eventID, eventType, now)
	if err != nil {
		return false, fail(op, err, "")
	}
	return fresh, fail(op, tx.Commit(), "")
}

// RecordCheckout remembers the checkout started for a buyer's held
// reservation. The reservation must be the buyer's and held with an
// unexpired hold; a reservation already paid is a conflict.
func (db *DB) RecordCheckout(ctx context.Context, buyerID, reservationID int64, checkoutID string, amount market.Cents, now time.Time) error {
	const op = "record checkout"
	tx, err := db.begin(ctx)
	if err != nil {
		return fail(op, err, "")
	}
	defer tx.Rollback()
	r, err := getBuyerReservation(ctx, tx, buyerID, reservationID)
	if err != nil {
		return fail(op, err, "")
	}
	if err := market.Payable(r, now); err != nil {
		return err
	}
	p, err := getPayment(ctx, tx, reservationID)
	switch {
	case market.ErrorCode(err) == market.CodeNotFound:
		_, err = tx.ExecContext(ctx, `INSERT INTO payments (reservation_id, checkout_id, amount_cents, status, created_at, updated_at)
			VALUES (?, ?, ?, ?, ?, ?)`, reservationID, checkoutID, int64(amount), string(PaymentOpen), unix(now), unix(now))
	case err != nil:
	case p.Status == PaymentOpen || p.Status == PaymentFailed:
		_, err = tx.ExecContext(ctx, `UPDATE payments SET checkout_id = ?, updated_at = ? WHERE reservation_id = ?`,
			checkoutID, unix(now), reservationID)
	default:
		return conflict("This reservation has already been paid.")
	}
	if err != nil {
		return fail(op, err, "")
	}
	return fail(op, tx.Commit(), "")
}

// FindPayment returns the payment of a reservation.
func (db *DB) FindPayment(ctx context.Context, reservationID int64) (Payment, error) {
	const op = "find payment"
	tx, err := db.read(ctx)
	if err != nil {
		return Payment{}, fail(op, err, "")
	}
	defer tx.Rollback()
	p, err := getPayment(ctx, tx, reservationID)
	return p, fail(op, err, "")
}

// ListPayments returns every payment, oldest first, for reconciliation.
func (db *DB) ListPayments(ctx context.Context) ([]Payment, error) {
	const op = "list payments"
	tx, err := db.read(ctx)
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer tx.Rollback()
	ps, err := queryPayments(ctx, tx, `SELECT `+paymentColumns+` FROM payments ORDER BY reservation_id`)
	return ps, fail(op, err, "")
}

func queryPayments(ctx context.Context, q querier, query string, args ...any) ([]Payment, error) {
	return collect(ctx, q, scanPayment, query, args...)
}

// RecordPayment records that a reservation was paid, in one transaction:
// the event is deduplicated; a held reservation whose hold has not lapsed
// is confirmed (as ConfirmReservation does) and the charge entries are
// written to the ledger; one that was already confirmed only gets the
// payment details the event adds (checkout completed and payment succeeded
// both arrive, in either order). A payment for a reservation that can no
// longer be confirmed (the hold lapsed, it was cancelled) is charged to the
// ledger and credited back to the buyer at once, and the payment is marked
// refund_pending for the retrier to refund in full.
func (db *DB) RecordPayment(ctx context.Context, ev PaymentEvent, now time.Time) (PaymentOutcome, error) {
	const op = "record payment"
	tx, err := db.begin(ctx)
	if err != nil {
		return "", fail(op, err, "")
	}
	defer tx.Rollback()
	fresh, err := markEvent(ctx, tx, ev.EventID, ev.EventType, now)
	if err != nil {
		return "", fail(op, err, "")
	}
	if !fresh {
		return PaymentDuplicate, nil
	}
	r, err := getReservation(ctx, tx, ev.ReservationID)
	if market.ErrorCode(err) == market.CodeNotFound {
		return PaymentUnknown, fail(op, tx.Commit(), "")
	}
	if err != nil {
		return "", fail(op, err, "")
	}
	p, err := getPayment(ctx, tx, r.ID)
	if market.ErrorCode(err) == market.CodeNotFound {
		p = Payment{ReservationID: r.ID, Amount: r.AmountCents, Status: PaymentOpen}
		if _, err := tx.ExecContext(ctx, `INSERT INTO payments (reservation_id, amount_cents, status, created_at, updated_at)
			VALUES (?, ?, ?, ?, ?)`, r.ID, int64(r.AmountCents), string(PaymentOpen), unix(now), unix(now)); err != nil {
			return "", fail(op, err, "")
		}
	} else if err != nil {
		return "", fail(op, err, "")
	}
	if why := market.PaymentMismatch(p.Amount, paidIntent(p), ev.Amount, ev.Currency, ev.PaymentIntentID); why != "" {
		if err := recordPaymentException(ctx, tx, r, ev, why, now); err != nil {
			return "", fail(op, err, "")
		}
		if err := finishChargeIntent(ctx, tx, ev.ChargeIntentID, ev.PaymentIntentID, market.ChargeOutcomeMismatched, now); err != nil {
			return "", fail(op, err, "")
		}
		return PaymentMismatched, fail(op, tx.Commit(), "")
	}
	// Keep what each event adds; never blank out what an earlier one said.
	p.CheckoutID = firstNonEmpty(ev.CheckoutID, p.CheckoutID)
	p.PaymentIntentID = firstNonEmpty(ev.PaymentIntentID, p.PaymentIntentID)
	p.ChargeID = firstNonEmpty(ev.ChargeID, p.ChargeID)

	outcome := PaymentRecorded
	switch {
	case p.Status == PaymentPaid || p.Status == PaymentRefundPending || p.Status == PaymentRefunded:
		// A second notice of the same payment.
	case r.State == market.ReservationHeld && now.Before(r.HoldExpiresAt):
		if err := setState(ctx, tx, &r, market.ReservationConfirmed, now); err != nil {
			return "", fail(op, err, "")
		}
		p.Status, p.FailureMessage, outcome = PaymentPaid, "", PaymentConfirmed
	case r.State == market.ReservationHeld || r.State == market.ReservationExpired || r.State == market.ReservationCancelled:
		p.Status, outcome = PaymentRefundPending, PaymentLate
		p.NextAttemptAt = now
	default:
		// Confirmed by other means (or moved on since): the payment stands.
		p.Status = PaymentPaid
	}
	if p.Status == PaymentPaid || p.Status == PaymentRefundPending {
		entries, err := market.ChargeEntries(r, p.PaymentIntentID, now)
		if err != nil {
			return "", fail(op, err, "")
		}
		if p.Status == PaymentRefundPending {
			entries = append(entries, market.LateCredits(r, now)...)
		}
		if err := insertEntries(ctx, tx, entries); err != nil {
			return "", fail(op, err, "")
		}
	}
	if _, err := tx.ExecContext(ctx, `UPDATE payments SET checkout_id = ?, payment_intent_id = ?, charge_id = ?, status = ?,
		failure_message = ?, next_attempt_at = ?, updated_at = ? WHERE reservation_id = ?`,
		p.CheckoutID, p.PaymentIntentID, p.ChargeID, string(p.Status), p.FailureMessage, unix(p.NextAttemptAt), unix(now), r.ID); err != nil {
		return "", fail(op, err, "")
	}
	ended := market.ChargeOutcomePaid
	if outcome == PaymentLate {
		ended = market.ChargeOutcomeLate
	}
	if err := finishChargeIntent(ctx, tx, ev.ChargeIntentID, ev.PaymentIntentID, ended, now); err != nil {
		return "", fail(op, err, "")
	}
	return outcome, fail(op, tx.Commit(), "")
}

// paidIntent is the payment intent recorded as the reservation's payment,
// "" while it is not paid.
func paidIntent(p Payment) string {
	switch p.Status {
	case PaymentPaid, PaymentRefundPending, PaymentRefunded:
		return p.PaymentIntentID
	}
	return ""
}

// recordPaymentException records money received that is not the
// reservation's payment: the exception, for the retrier to refund in full,
// and the money as the buyer's in the ledger. Without a payment intent
// nothing can be refunded; the event is only logged by the caller.
func recordPaymentException(ctx context.Context, tx *sql.Tx, r market.Reservation, ev PaymentEvent, why string, now time.Time) error {
	if ev.PaymentIntentID == "" {
		return nil
	}
	res, err := tx.ExecContext(ctx, `INSERT INTO payment_exceptions (reservation_id, payment_intent_id, amount_cents, currency, reason, state,
		next_attempt_at, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (payment_intent_id) DO NOTHING`,
		r.ID, ev.PaymentIntentID, int64(ev.Amount), ev.Currency, why, PaymentRefundPending, unix(now), unix(now), unix(now))
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 || ev.Currency != market.Currency {
		// Known already; or money in another currency, which the ledger
		// (in Currency's cents) cannot hold: refunded all the same.
		return nil
	}
	return insertEntries(ctx, tx, market.PaymentExceptionEntries(r.ID, r.BuyerID, ev.PaymentIntentID, ev.Amount, now))
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// RecordPaymentFailed records a failed payment attempt. The reservation
// stays held, so the buyer may try again until the hold lapses; a failure
// reported after a success changes nothing. It reports false for a replay.
func (db *DB) RecordPaymentFailed(ctx context.Context, eventID, eventType string, reservationID int64, paymentIntentID, message string, now time.Time) (bool, error) {
	const op = "record payment failure"
	tx, err := db.begin(ctx)
	if err != nil {
		return false, fail(op, err, "")
	}
	defer tx.Rollback()
	fresh, err := markEvent(ctx, tx, eventID, eventType, now)
	if err != nil || !fresh {
		return false, fail(op, err, "")
	}
	if err := recordPaymentFailed(ctx, tx, reservationID, paymentIntentID, message, now); err != nil {
		return false, fail(op, err, "")
	}
	return true, fail(op, tx.Commit(), "")
}

// recordPaymentFailed is RecordPaymentFailed's work inside the caller's
// transaction.
func recordPaymentFailed(ctx context.Context, tx *sql.Tx, reservationID int64, paymentIntentID, message string, now time.Time) error {
	if message == "" {
		message = "The payment did not go through."
	}
	// The same intent's failure told twice — a saved card's decline
	// recorded at once (workflow.PayWithSavedMethod), then the processor's
	// event for it — notifies the buyer once.
	var before, beforeIntent string
	noPayment := false
	err := tx.QueryRowContext(ctx, `SELECT status, payment_intent_id FROM payments WHERE reservation_id = ?`, reservationID).Scan(&before, &beforeIntent)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		noPayment = true
	case err != nil:
		return err
	}
	told := paymentIntentID != "" && PaymentStatus(before) == PaymentFailed && beforeIntent == paymentIntentID
	if _, err := tx.ExecContext(ctx, `UPDATE payments SET status = ?, failure_message = ?,
		payment_intent_id = CASE WHEN payment_intent_id = '' THEN ? ELSE payment_intent_id END, updated_at = ?
		WHERE reservation_id = ? AND status IN (?, ?)`,
		string(PaymentFailed), message, paymentIntentID, unix(now), reservationID, string(PaymentOpen), string(PaymentFailed)); err != nil {
		return err
	}
	var buyer, holdEnds, amount int64
	err = tx.QueryRowContext(ctx, `SELECT buyer_id, hold_expires_at, amount_cents FROM reservations WHERE id = ? AND state = ?`,
		reservationID, string(market.ReservationHeld)).Scan(&buyer, &holdEnds, &amount)
	if err == nil && noPayment {
		// A failure without a checkout (a saved card declined) is kept
		// all the same, for the reservation page to show.
		_, err = tx.ExecContext(ctx, `INSERT INTO payments (reservation_id, payment_intent_id, amount_cents, status, failure_message, created_at, updated_at)
			VALUES (?, ?, ?, ?, ?, ?, ?)`, reservationID, paymentIntentID, amount, string(PaymentFailed), message, unix(now), unix(now))
	}
	if err == nil && !told {
		err = insertNotification(ctx, tx, Notification{UserID: buyer, Kind: NotifyPaymentFailed, CreatedAt: now,
			URL: fmt.Sprintf("/reservations/%d", reservationID),
			Notice: market.Notice{Kind: market.NoticePaymentFailed, Params: market.NoticeParams{Reservation: reservationID, Text: message,
				Until: fromUnix(holdEnds)}}})
	} else if errors.Is(err, sql.ErrNoRows) {
		err = nil // no longer held: nothing to try again
	}
	return err
}

// RecordChargeRefunded keeps the processor's total refunded for a payment,
// for reconciliation. It reports false for a replay.
func (db *DB) RecordChargeRefunded(ctx context.Context, eventID, eventType string, reservationID int64, paymentIntentID string, refundedTotal market.Cents, now time.Time) (bool, error) {
	const op = "record charge refunded"
	tx, err := db.begin(ctx)
	if err != nil {
		return false, fail(op, err, "")
	}
	defer tx.Rollback()
	fresh, err := markEvent(ctx, tx, eventID, eventType, now)
	if err != nil || !fresh {
		return false, fail(op, err, "")
	}
	// Totals only grow: an older event delivered late cannot lower it.
	if _, err := tx.ExecContext(ctx, `UPDATE payments SET refunded_cents = CASE WHEN refunded_cents > ? THEN refunded_cents ELSE ? END, updated_at = ?
		WHERE (reservation_id = ? OR (payment_intent_id = ? AND payment_intent_id <> ''))`,
		int64(refundedTotal), int64(refundedTotal), unix(now), reservationID, paymentIntentID); err != nil {
		return false, fail(op, err, "")
	}
	return true, fail(op, tx.Commit(), "")
}

// ListDuePaymentRefunds returns late payments whose full refund is due at now.
func (db *DB) ListDuePaymentRefunds(ctx context.Context, now time.Time) ([]Payment, error) {
	const op = "list due payment refunds"
	tx, err := db.read(ctx)
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer tx.Rollback()
	ps, err := queryPayments(ctx, tx, `SELECT `+paymentColumns+` FROM payments WHERE status = ? AND next_attempt_at <= ?
		ORDER BY reservation_id`, string(PaymentRefundPending), unix(now))
	return ps, fail(op, err, "")
}

// RecordPaymentRefund records the full refund of a late payment: the
// refund ledger entry and the payment marked refunded.
func (db *DB) RecordPaymentRefund(ctx context.Context, reservationID int64, refundID string, now time.Time) error {
	const op = "record payment refund"
	tx, err := db.begin(ctx)
	if err != nil {
		return fail(op, err, "")
	}
	defer tx.Rollback()
	r, err := getReservation(ctx, tx, reservationID)
	if err != nil {
		return fail(op, err, "")
	}
	p, err := getPayment(ctx, tx, reservationID)
	if err != nil {
		return fail(op, err, "")
	}
	if p.Status != PaymentRefundPending {
		return nil
	}
	e := market.BuyerRefund(r.ID, r.BuyerID, r.AmountCents, refundID, market.EntryKey(r.ID, market.EntryRefund, 0), now)
	if err := insertEntries(ctx, tx, []market.LedgerEntry{e}); err != nil {
		return fail(op, err, "")
	}
	if _, err := tx.ExecContext(ctx, `UPDATE payments SET status = ?, last_error = '', updated_at = ? WHERE reservation_id = ?`,
		string(PaymentRefunded), unix(now), reservationID); err != nil {
		return fail(op, err, "")
	}
	return fail(op, tx.Commit(), "")
}

// RecordPaymentRefundFailure records a failed attempt to refund a late
// payment: the next attempt is at next.
func (db *DB) RecordPaymentRefundFailure(ctx context.Context, reservationID int64, msg string, next, now time.Time) error {
	const op = "record payment refund failure"
	tx, err := db.begin(ctx)
	if err != nil {
		return fail(op, err, "")
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `UPDATE payments SET attempts = attempts + 1, last_error = ?, next_attempt_at = ?, updated_at = ?
		WHERE reservation_id = ? AND status = ?`, msg, unix(next), unix(now), reservationID, string(PaymentRefundPending)); err != nil {
		return fail(op, err, "")
	}
	return fail(op, tx.Commit(), "")
}
