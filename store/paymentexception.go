package store

import (
	"context"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// PaymentException is money received for a reservation that was not taken
// as its payment (market.PaymentMismatch): refunded in full by the retrier.
type PaymentException struct {
	ID              int64
	ReservationID   int64
	BuyerID         int64
	PaymentIntentID string
	Amount          market.Cents
	Currency        string
	Reason          string
	State           PaymentStatus // PaymentRefundPending, then PaymentRefunded
	RefundRef       string
	Attempts        int
	LastError       string
	NextAttemptAt   time.Time
	CreatedAt       time.Time
}

const paymentExceptionColumns = `e.id, e.reservation_id, r.buyer_id, e.payment_intent_id, e.amount_cents, e.currency, e.reason, e.state,
	e.refund_ref, e.attempts, e.last_error, e.next_attempt_at, e.created_at`

const paymentExceptionFrom = ` FROM payment_exceptions e JOIN reservations r ON r.id = e.reservation_id `

func scanPaymentException(s scanner) (PaymentException, error) {
	var e PaymentException
	var amount, next, created int64
	var state string
	err := s.Scan(&e.ID, &e.ReservationID, &e.BuyerID, &e.PaymentIntentID, &amount, &e.Currency, &e.Reason, &state,
		&e.RefundRef, &e.Attempts, &e.LastError, &next, &created)
	e.Amount, e.State, e.NextAttemptAt, e.CreatedAt = market.Cents(amount), PaymentStatus(state), fromUnix(next), fromUnix(created)
	return e, err
}

// ListPaymentExceptions returns every mismatched payment, oldest first.
func (db *DB) ListPaymentExceptions(ctx context.Context) ([]PaymentException, error) {
	const op = "list payment exceptions"
	tx, err := db.read(ctx)
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer tx.Rollback()
	es, err := collect(ctx, tx, scanPaymentException, `SELECT `+paymentExceptionColumns+paymentExceptionFrom+`ORDER BY e.id`)
	return es, fail(op, err, "")
}

// ListDuePaymentExceptions returns the mismatched payments whose refund is
// due at now.
func (db *DB) ListDuePaymentExceptions(ctx context.Context, now time.Time) ([]PaymentException, error) {
	const op = "list due payment exceptions"
	tx, err := db.read(ctx)
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer tx.Rollback()
	es, err := collect(ctx, tx, scanPaymentException, `SELECT `+paymentExceptionColumns+paymentExceptionFrom+
		`WHERE e.state = ? AND e.next_attempt_at <= ? ORDER BY e.id`, string(PaymentRefundPending), unix(now))
	return es, fail(op, err, "")
}

// RecordPaymentExceptionRefund records the full refund of a mismatched
// payment: the refund ledger entry (for money in the ledger's currency) and
// the exception marked refunded. Recording it again changes nothing.
func (db *DB) RecordPaymentExceptionRefund(ctx context.Context, id int64, refundRef string, now time.Time) error {
	const op = "record payment exception refund"
	tx, err := db.begin(ctx)
	if err != nil {
		return fail(op, err, "")
	}
	defer tx.Rollback()
	e, err := scanPaymentException(tx.QueryRowContext(ctx, `SELECT `+paymentExceptionColumns+paymentExceptionFrom+`WHERE e.id = ?`, id))
	if err != nil {
		return fail(op, err, "")
	}
	if e.State != PaymentRefundPending {
		return nil
	}
	if e.Currency == market.Currency {
		if err := insertEntries(ctx, tx, []market.LedgerEntry{market.BuyerRefund(e.ReservationID, e.BuyerID, e.Amount, refundRef,
			market.PaymentExceptionKey(e.PaymentIntentID, market.EntryRefund), now)}); err != nil {
			return fail(op, err, "")
		}
	}
	if _, err := tx.ExecContext(ctx, `UPDATE payment_exceptions SET state = ?, refund_ref = ?, last_error = '', updated_at = ? WHERE id = ?`,
		string(PaymentRefunded), refundRef, unix(now), id); err != nil {
		return fail(op, err, "")
	}
	return fail(op, tx.Commit(), "")
}

// RecordPaymentExceptionFailure records a failed refund attempt of a
// mismatched payment: the next attempt is at next.
func (db *DB) RecordPaymentExceptionFailure(ctx context.Context, id int64, msg string, next, now time.Time) error {
	const op = "record payment exception failure"
	tx, err := db.begin(ctx)
	if err != nil {
		return fail(op, err, "")
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `UPDATE payment_exceptions SET attempts = attempts + 1, last_error = ?, next_attempt_at = ?, updated_at = ?
		WHERE id = ? AND state = ?`, msg, unix(next), unix(now), id, string(PaymentRefundPending)); err != nil {
		return fail(op, err, "")
	}
	return fail(op, tx.Commit(), "")
}

// ListPendingDisputeRefunds returns the granted dispute credits whose
// refund the processor has not yet confirmed.
func (db *DB) ListPendingDisputeRefunds(ctx context.Context) ([]DisputeCase, error) {
	const op = "list pending dispute refunds"
	tx, err := db.read(ctx)
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer tx.Rollback()
	ds, err := queryDisputeCases(ctx, tx, `WHERE d.refund_state = ? ORDER BY d.id`, DisputeRefundPending)
	return ds, fail(op, err, "")
}
