package store

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

const spotAuthColumns = `a.id, a.bid_id, a.offer_id, a.buyer_id, a.hour, COALESCE(a.payment_method_id, 0), COALESCE(m.customer_id, ''),
	COALESCE(m.processor_method_id, ''), COALESCE(m.label, ''), a.amount_cents, a.state, a.payment_intent_id, a.created_at`

const spotAuthFrom = ` FROM spot_authorizations a LEFT JOIN payment_methods m ON m.id = a.payment_method_id `

func scanSpotAuth(s scanner) (market.SpotAuthorization, error) {
	var a market.SpotAuthorization
	var hour, amount, created int64
	var state string
	err := s.Scan(&a.ID, &a.BidID, &a.OfferID, &a.BuyerID, &hour, &a.PaymentMethodID, &a.Customer, &a.ProcessorMethodID,
		&a.CardLabel, &amount, &state, &a.PaymentIntentID, &created)
	a.Hour, a.Amount, a.State, a.CreatedAt = fromUnix(hour), market.Cents(amount), market.SpotAuthState(state), fromUnix(created)
	return a, err
}

// PrepareSpotAuthorizations records, in one transaction, a pending hold
// for the offer-hour of every live bid that competes for it and has none
// yet: its maximum for the hour (market.SpotAuthorizationAmount) on the
// buyer's default saved card, or declined at once when the buyer has none.
// It returns the hour's holds still pending, for the caller to place; none
// once the hour is cleared.
func (db *DB) PrepareSpotAuthorizations(ctx context.Context, offerID int64, hour, now time.Time) ([]market.SpotAuthorization, error) {
	const op = "prepare spot authorizations"
	hour = hour.UTC().Truncate(time.Hour)
	tx, err := db.begin(ctx)
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer tx.Rollback()
	var done int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM spot_clearings WHERE offer_id = ? AND hour = ?`, offerID, unix(hour)).Scan(&done); err != nil {
		return nil, fail(op, err, "")
	}
	if done > 0 {
		return nil, nil
	}
	live, err := collect(ctx, tx, scanSpotBid, `SELECT `+spotBidColumns+` FROM spot_bids b
		WHERE b.offer_id = ? AND b.state = ? AND b.first_hour <= ? AND b.last_hour >= ?
		AND NOT EXISTS (SELECT 1 FROM spot_authorizations a WHERE a.bid_id = b.id AND a.hour = ?) ORDER BY b.id`,
		offerID, string(market.SpotBidLive), unix(hour), unix(hour), unix(hour))
	if err != nil {
		return nil, fail(op, err, "")
	}
	for _, b := range live {
		var method any
		state := market.SpotAuthPending
		var id int64
		err := tx.QueryRowContext(ctx, `SELECT id FROM payment_methods WHERE user_id = ? AND removed_at IS NULL
			ORDER BY created_at DESC, id DESC LIMIT 1`, b.BuyerID).Scan(&id)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			state = market.SpotAuthDeclined
		case err != nil:
			return nil, fail(op, err, "")
		default:
			method = id
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO spot_authorizations (bid_id, offer_id, hour, buyer_id, payment_method_id,
			amount_cents, state, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			b.ID, offerID, unix(hour), b.BuyerID, method, int64(market.SpotAuthorizationAmount(b)), string(state), unix(now), unix(now)); err != nil {
			return nil, fail(op, err, "")
		}
	}
	pending, err := collect(ctx, tx, scanSpotAuth, `SELECT `+spotAuthColumns+spotAuthFrom+`WHERE a.offer_id = ? AND a.hour = ? AND a.state = ?
		ORDER BY a.id`, offerID, unix(hour), string(market.SpotAuthPending))
	if err != nil {
		return nil, fail(op, err, "")
	}
	return pending, fail(op, tx.Commit(), "")
}

// RecordSpotAuthorization records the processor's answer to a pending
// hold: authorized (with its payment), declined, or released. A hold that
// has moved on already is left as it is (false).
func (db *DB) RecordSpotAuthorization(ctx context.Context, id int64, from, to market.SpotAuthState, paymentIntentID string, now time.Time) (bool, error) {
	const op = "record spot authorization"
	tx, err := db.begin(ctx)
	if err != nil {
		return false, fail(op, err, "")
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, `UPDATE spot_authorizations SET state = ?,
		payment_intent_id = CASE WHEN ? = '' THEN payment_intent_id ELSE ? END, updated_at = ? WHERE id = ? AND state = ?`,
		string(to), paymentIntentID, paymentIntentID, unix(now), id, string(from))
	if err != nil {
		return false, fail(op, err, "")
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fail(op, err, "")
	}
	return n > 0, fail(op, tx.Commit(), "")
}

// ListSpotAuthorizationsToRelease returns the holds no clearing will
// capture: those of hours already cleared that did not win (authorized,
// or pending with an unanswered call), oldest first.
func (db *DB) ListSpotAuthorizationsToRelease(ctx context.Context) ([]market.SpotAuthorization, error) {
	const op = "list spot authorizations to release"
	tx, err := db.read(ctx)
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer tx.Rollback()
	out, err := collect(ctx, tx, scanSpotAuth, `SELECT `+spotAuthColumns+spotAuthFrom+`WHERE a.state IN (?, ?)
		AND EXISTS (SELECT 1 FROM spot_clearings c WHERE c.offer_id = a.offer_id AND c.hour = a.hour) ORDER BY a.id`,
		string(market.SpotAuthAuthorized), string(market.SpotAuthPending))
	return out, fail(op, err, "")
}

// spotAuthsForHour returns the offer-hour's holds by bid, inside the
// clearing's transaction.
func spotAuthsForHour(ctx context.Context, q querier, offerID int64, hour time.Time) (map[int64]market.SpotAuthorization, error) {
	rows, err := collect(ctx, q, scanSpotAuth, `SELECT `+spotAuthColumns+spotAuthFrom+`WHERE a.offer_id = ? AND a.hour = ?`, offerID, unix(hour))
	if err != nil {
		return nil, err
	}
	out := make(map[int64]market.SpotAuthorization, len(rows))
	for _, a := range rows {
		out[a.BidID] = a
	}
	return out, nil
}
