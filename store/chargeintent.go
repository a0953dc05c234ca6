package store

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// Charge intents (market.ChargeIntent): every off-session charge of a saved
// card is recorded here before it is made, in the transaction that decides
// it, and finished in the transaction that records its outcome.

const chargeIntentColumns = `c.id, c.purpose, c.buyer_id, c.reservation_id, COALESCE(c.listing_id, 0), c.payment_method_id,
	m.customer_id, m.processor_method_id, m.label, c.amount_cents, c.state, c.payment_intent_id, c.outcome, c.attempts,
	c.next_attempt_at, c.last_error, c.created_at, c.authorized`

const chargeIntentFrom = ` FROM charge_intents c JOIN payment_methods m ON m.id = c.payment_method_id `

func scanChargeIntent(s scanner) (market.ChargeIntent, error) {
	var ci market.ChargeIntent
	var purpose, state string
	var amount, next, created int64
	var authorized int
	err := s.Scan(&ci.ID, &purpose, &ci.BuyerID, &ci.ReservationID, &ci.ListingID, &ci.PaymentMethodID,
		&ci.Customer, &ci.ProcessorMethodID, &ci.CardLabel, &amount, &state, &ci.PaymentIntentID, &ci.Outcome, &ci.Attempts,
		&next, &ci.LastError, &created, &authorized)
	ci.Authorized = authorized != 0
	ci.Purpose, ci.State, ci.Amount = market.ChargePurpose(purpose), market.ChargeState(state), market.Cents(amount)
	ci.NextAttemptAt, ci.CreatedAt = fromUnix(next), fromUnix(created)
	return ci, err
}

func getChargeIntent(ctx context.Context, q querier, id int64) (market.ChargeIntent, error) {
	ci, err := scanChargeIntent(q.QueryRowContext(ctx, `SELECT `+chargeIntentColumns+chargeIntentFrom+`WHERE c.id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return market.ChargeIntent{}, notFound("No such charge.")
	}
	return ci, err
}

// pendingChargeIntent returns the pending intent for the same thing and
// buyer as ci, if any (found false otherwise).
func pendingChargeIntent(ctx context.Context, q querier, ci market.ChargeIntent) (market.ChargeIntent, bool, error) {
	got, err := scanChargeIntent(q.QueryRowContext(ctx, `SELECT `+chargeIntentColumns+chargeIntentFrom+`
		WHERE c.purpose = ? AND c.reservation_id = ? AND COALESCE(c.listing_id, 0) = ? AND c.buyer_id = ? AND c.state = ?`,
		string(ci.Purpose), ci.ReservationID, ci.ListingID, ci.BuyerID, string(market.ChargePending)))
	if errors.Is(err, sql.ErrNoRows) {
		return market.ChargeIntent{}, false, nil
	}
	return got, err == nil, err
}

// insertChargeIntent records a pending charge of ci.Amount to the buyer's
// default saved card, inside the caller's transaction, and returns it
// with its id and card; a pending intent for the same thing and buyer is
// returned instead (a repeated press charges once). No saved card is a
// market CodeNotFound error. An intent that captures an authorisation
// (ci.Authorized) names its card and payment itself.
func insertChargeIntent(ctx context.Context, q querier, ci market.ChargeIntent, now time.Time) (market.ChargeIntent, error) {
	if old, ok, err := pendingChargeIntent(ctx, q, ci); err != nil || ok {
		return old, err
	}
	methodID := ci.PaymentMethodID
	if !ci.Authorized {
		err := q.QueryRowContext(ctx, `SELECT id FROM payment_methods WHERE user_id = ? AND removed_at IS NULL
			ORDER BY created_at DESC, id DESC LIMIT 1`, ci.BuyerID).Scan(&methodID)
		if errors.Is(err, sql.ErrNoRows) {
			return market.ChargeIntent{}, notFound(msgNoPaymentMethod)
		}
		if err != nil {
			return market.ChargeIntent{}, err
		}
	}
	if ci.Amount <= 0 {
		return market.ChargeIntent{}, invalid("There is nothing to charge.")
	}
	var listing any
	if ci.ListingID != 0 {
		listing = ci.ListingID
	}
	var id int64
	if err := q.QueryRowContext(ctx, `INSERT INTO charge_intents (purpose, buyer_id, reservation_id, listing_id, payment_method_id,
		amount_cents, state, payment_intent_id, authorized, next_attempt_at, created_at, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id`,
		string(ci.Purpose), ci.BuyerID, ci.ReservationID, listing, methodID, int64(ci.Amount), string(market.ChargePending),
		ci.PaymentIntentID, boolInt(ci.Authorized), unix(now.Add(market.ChargeRetryGrace)), unix(now), unix(now)).Scan(&id); err != nil {
		return market.ChargeIntent{}, err
	}
	return getChargeIntent(ctx, q, id)
}

// finishChargeIntent marks a pending intent done with the processor's
// payment and how it ended, inside the transaction that records that
// outcome, and notes the card's successful charge on it. An intent already finished is left as it is (a second notice
// of the same payment); id 0 does nothing.
func finishChargeIntent(ctx context.Context, q querier, id int64, paymentIntentID, outcome string, now time.Time) error {
	if id == 0 {
		return nil
	}
	res, err := q.ExecContext(ctx, `UPDATE charge_intents SET state = ?, payment_intent_id = ?, outcome = ?, last_error = '', updated_at = ?
		WHERE id = ? AND state = ?`, string(market.ChargeDone), paymentIntentID, outcome, unix(now), id, string(market.ChargePending))
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return err
	}
	// The card was charged: it stays good for spot bids (market.SpotCardRecency).
	_, err = q.ExecContext(ctx, `UPDATE payment_methods SET last_charged_at = ?
		WHERE id = (SELECT payment_method_id FROM charge_intents WHERE id = ?) AND (last_charged_at IS NULL OR last_charged_at < ?)`,
		unix(now), id, unix(now))
	return err
}

// CreateReservationCharge records, in one transaction, a pending charge of
// the buyer's held reservation to the buyer's default saved card: the
// reservation must be the buyer's and payable at now (market.Payable), and
// not paid yet. A pending charge of it is returned instead of a second.
func (db *DB) CreateReservationCharge(ctx context.Context, buyerID, reservationID int64, now time.Time) (market.ChargeIntent, error) {
	const op = "create reservation charge"
	tx, err := db.begin(ctx)
	if err != nil {
		return market.ChargeIntent{}, fail(op, err, "")
	}
	defer tx.Rollback()
	if err := mayAct(ctx, tx, buyerID); err != nil {
		return market.ChargeIntent{}, fail(op, err, "")
	}
	r, err := getReservation(ctx, tx, reservationID)
	if err != nil || r.BuyerID != buyerID {
		return market.ChargeIntent{}, fail(op, notFound(msgReservationNotFound), "")
	}
	if err := market.Payable(r, now); err != nil {
		return market.ChargeIntent{}, err
	}
	var paid int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM payments WHERE reservation_id = ? AND status IN (?, ?, ?)`,
		r.ID, string(PaymentPaid), string(PaymentRefundPending), string(PaymentRefunded)).Scan(&paid); err != nil {
		return market.ChargeIntent{}, fail(op, err, "")
	}
	if paid > 0 {
		return market.ChargeIntent{}, conflict("This reservation is already paid.")
	}
	ci, err := insertChargeIntent(ctx, tx, market.ChargeIntent{Purpose: market.PurposeReservation, BuyerID: buyerID,
		ReservationID: r.ID, Amount: r.AmountCents}, now)
	if err != nil {
		return market.ChargeIntent{}, fail(op, err, "")
	}
	return ci, fail(op, tx.Commit(), "")
}

// CreateResaleCharge records, in one transaction, a pending charge of a
// resale listing's price to the buyer's default saved card: the listing
// must be for sale at now and not the buyer's own. A pending charge of the
// same listing by the same buyer is returned instead of a second.
func (db *DB) CreateResaleCharge(ctx context.Context, buyerID, listingID int64, now time.Time) (market.ChargeIntent, error) {
	const op = "create resale charge"
	tx, err := db.begin(ctx)
	if err != nil {
		return market.ChargeIntent{}, fail(op, err, "")
	}
	defer tx.Rollback()
	if err := mayAct(ctx, tx, buyerID); err != nil {
		return market.ChargeIntent{}, fail(op, err, "")
	}
	l, err := getResale(ctx, tx, listingID)
	if err != nil {
		return market.ChargeIntent{}, fail(op, err, "")
	}
	orig, err := getReservation(ctx, tx, l.ReservationID)
	if err != nil {
		return market.ChargeIntent{}, fail(op, err, "")
	}
	if l.SellerID == buyerID {
		return market.ChargeIntent{}, invalid("You cannot buy your own listing; withdraw it instead.")
	}
	if !l.Live(orig, now) {
		return market.ChargeIntent{}, conflict(msgListingGone)
	}
	ci, err := insertChargeIntent(ctx, tx, market.ChargeIntent{Purpose: market.PurposeResale, BuyerID: buyerID,
		ReservationID: l.ReservationID, ListingID: l.ID, Amount: l.Price}, now)
	if err != nil {
		return market.ChargeIntent{}, fail(op, err, "")
	}
	return ci, fail(op, tx.Commit(), "")
}

// FindChargeIntent returns a charge intent by id.
func (db *DB) FindChargeIntent(ctx context.Context, id int64) (market.ChargeIntent, error) {
	ci, err := getChargeIntent(ctx, db.reader, id)
	return ci, fail("find charge intent", err, "")
}

// FindPendingReservationCharge returns the pending charge of a reservation,
// or a market CodeNotFound error when none is in flight.
func (db *DB) FindPendingReservationCharge(ctx context.Context, reservationID int64) (market.ChargeIntent, error) {
	ci, err := scanChargeIntent(db.reader.QueryRowContext(ctx, `SELECT `+chargeIntentColumns+chargeIntentFrom+`
		WHERE c.purpose = ? AND c.reservation_id = ? AND c.state = ? ORDER BY c.id LIMIT 1`,
		string(market.PurposeReservation), reservationID, string(market.ChargePending)))
	if errors.Is(err, sql.ErrNoRows) {
		return market.ChargeIntent{}, notFound("No charge of this reservation is in flight.")
	}
	return ci, fail("find pending reservation charge", err, "")
}

// ListDueChargeIntents returns the pending charge intents whose next
// attempt is due at now (every pending one when now is zero), oldest first.
func (db *DB) ListDueChargeIntents(ctx context.Context, now time.Time) ([]market.ChargeIntent, error) {
	q := `SELECT ` + chargeIntentColumns + chargeIntentFrom + `WHERE c.state = ?`
	args := []any{string(market.ChargePending)}
	if !now.IsZero() {
		q += ` AND c.next_attempt_at <= ?`
		args = append(args, unix(now))
	}
	out, err := collect(ctx, db.reader, scanChargeIntent, q+` ORDER BY c.id`, args...)
	return out, fail("list due charge intents", err, "")
}

// RecordChargeAttempt records a charge attempt that did not finish (the
// processor failed, or the payment is still processing): the payment's id
// when known, the error for admins, and the next attempt at next.
func (db *DB) RecordChargeAttempt(ctx context.Context, id int64, paymentIntentID, msg string, next, now time.Time) error {
	const op = "record charge attempt"
	tx, err := db.begin(ctx)
	if err != nil {
		return fail(op, err, "")
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `UPDATE charge_intents SET attempts = attempts + 1, last_error = ?, next_attempt_at = ?,
		payment_intent_id = CASE WHEN ? = '' THEN payment_intent_id ELSE ? END, updated_at = ? WHERE id = ? AND state = ?`,
		msg, unix(next), paymentIntentID, paymentIntentID, unix(now), id, string(market.ChargePending)); err != nil {
		return fail(op, err, "")
	}
	return fail(op, tx.Commit(), "")
}

// RecordChargeDeclined records, in one transaction, that the bank refused
// a pending charge (nothing was charged): the intent declined and, for a
// reservation's payment, the failed payment with message for the buyer
// (as RecordPaymentFailed), the reservation staying held until its hold
// ends; for a replacement's share, the replacement unfilled and the buyer
// told. It reports whether the intent was still pending.
func (db *DB) RecordChargeDeclined(ctx context.Context, id int64, paymentIntentID, message string, now time.Time) (bool, error) {
	const op = "record charge declined"
	tx, err := db.begin(ctx)
	if err != nil {
		return false, fail(op, err, "")
	}
	defer tx.Rollback()
	ci, err := getChargeIntent(ctx, tx, id)
	if err != nil {
		return false, fail(op, err, "")
	}
	if ci.State != market.ChargePending {
		return false, nil
	}
	if _, err := tx.ExecContext(ctx, `UPDATE charge_intents SET state = ?, outcome = ?, payment_intent_id = ?, last_error = ?, updated_at = ?
		WHERE id = ?`, string(market.ChargeDeclined), market.ChargeOutcomeDeclined, paymentIntentID, message, unix(now), id); err != nil {
		return false, fail(op, err, "")
	}
	switch ci.Purpose {
	case market.PurposeReservation:
		if err := recordPaymentFailed(ctx, tx, ci.ReservationID, paymentIntentID, message, now); err != nil {
			return false, fail(op, err, "")
		}
	case market.PurposeReplacement:
		if err := declineReplacementCharge(ctx, tx, ci.ID, message, now); err != nil {
			return false, fail(op, err, "")
		}
	}
	return true, fail(op, tx.Commit(), "")
}
