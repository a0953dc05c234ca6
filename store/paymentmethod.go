package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// Person-safe messages of saved payment methods.
const (
	msgPaymentMethodNotFound = "That card could not be found among your saved cards."
	msgNoPaymentMethod       = "You have no saved card. Add one on your account page first."
	msgNoPaymentCustomer     = "You have not saved a card with the payment processor yet."
	msgPaymentMethodRemoved  = "You removed this card, so it is not saved again. Choose “Add a card” to add it anew."
)

const paymentMethodColumns = `id, user_id, customer_id, processor_method_id, label, created_at, last_charged_at`

func scanPaymentMethod(s scanner) (market.PaymentMethod, error) {
	var m market.PaymentMethod
	var created int64
	var charged sql.NullInt64
	if err := s.Scan(&m.ID, &m.UserID, &m.Customer, &m.ProcessorMethodID, &m.Label, &created, &charged); err != nil {
		return market.PaymentMethod{}, err
	}
	m.CreatedAt = fromUnix(created)
	if charged.Valid {
		m.LastChargedAt = fromUnix(charged.Int64)
	}
	return m, nil
}

// SavePaymentMethod keeps a card the user saved with the processor; it
// becomes the user's default (the most recent). Saving the same card again
// (the return page followed twice, the processor's event after it) keeps
// one row and returns it; a card the user has removed is not saved again
// (a late event must not bring it back): a conflict. More than
// market.MaxPaymentMethods saved cards is invalid.
func (db *DB) SavePaymentMethod(ctx context.Context, userID int64, m market.PaymentMethod, now time.Time) (market.PaymentMethod, error) {
	const op = "save payment method"
	if m.Customer == "" || m.ProcessorMethodID == "" {
		return market.PaymentMethod{}, fmt.Errorf("store: %s: needs the processor's customer and method ids", op)
	}
	if m.Label == "" {
		m.Label = "Card"
	}
	if err := badText("label", m.Label, false); err != nil {
		return market.PaymentMethod{}, err
	}
	tx, err := db.begin(ctx)
	if err != nil {
		return market.PaymentMethod{}, fail(op, err, "")
	}
	defer tx.Rollback()
	if err := mayAct(ctx, tx, userID); err != nil {
		return market.PaymentMethod{}, fail(op, err, "")
	}
	var id int64
	var removed sql.NullInt64
	err = tx.QueryRowContext(ctx, `SELECT id, removed_at FROM payment_methods WHERE user_id = ? AND processor_method_id = ?`,
		userID, m.ProcessorMethodID).Scan(&id, &removed)
	switch {
	case err == nil && removed.Valid:
		return market.PaymentMethod{}, conflict(msgPaymentMethodRemoved)
	case err == nil: // the same card saved twice
		old, err := scanPaymentMethod(tx.QueryRowContext(ctx, `SELECT `+paymentMethodColumns+` FROM payment_methods WHERE id = ?`, id))
		return old, fail(op, err, "")
	case !errors.Is(err, sql.ErrNoRows):
		return market.PaymentMethod{}, fail(op, err, "")
	}
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM payment_methods WHERE user_id = ? AND removed_at IS NULL`, userID).Scan(&n); err != nil {
		return market.PaymentMethod{}, fail(op, err, "")
	}
	if n >= market.MaxPaymentMethods {
		return market.PaymentMethod{}, invalid(fmt.Sprintf("You have %d saved cards, the most an account keeps; remove one you no longer use first.", n))
	}
	m.UserID, m.CreatedAt = userID, truncate(now)
	err = tx.QueryRowContext(ctx, `INSERT INTO payment_methods (user_id, customer_id, processor_method_id, label, created_at)
		VALUES (?, ?, ?, ?, ?) RETURNING id`, userID, m.Customer, m.ProcessorMethodID, m.Label, unix(now)).Scan(&m.ID)
	if err != nil {
		return market.PaymentMethod{}, fail(op, err, "")
	}
	return m, fail(op, tx.Commit(), "")
}

// ListPaymentMethods returns the user's saved cards, the default (most
// recent) first.
func (db *DB) ListPaymentMethods(ctx context.Context, userID int64) ([]market.PaymentMethod, error) {
	const op = "list payment methods"
	tx, err := db.read(ctx)
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer tx.Rollback()
	ms, err := collect(ctx, tx, scanPaymentMethod, `SELECT `+paymentMethodColumns+` FROM payment_methods
		WHERE user_id = ? AND removed_at IS NULL ORDER BY created_at DESC, id DESC`, userID)
	return ms, fail(op, err, "")
}

// DefaultPaymentMethod returns the card the user saved most recently and
// has not removed; a market CodeNotFound error when there is none.
func (db *DB) DefaultPaymentMethod(ctx context.Context, userID int64) (market.PaymentMethod, error) {
	const op = "default payment method"
	tx, err := db.read(ctx)
	if err != nil {
		return market.PaymentMethod{}, fail(op, err, "")
	}
	defer tx.Rollback()
	m, err := scanPaymentMethod(tx.QueryRowContext(ctx, `SELECT `+paymentMethodColumns+` FROM payment_methods
		WHERE user_id = ? AND removed_at IS NULL ORDER BY created_at DESC, id DESC LIMIT 1`, userID))
	if errors.Is(err, sql.ErrNoRows) {
		return market.PaymentMethod{}, notFound(msgNoPaymentMethod)
	}
	return m, fail(op, err, "")
}

// FindPaymentCustomer returns the processor's customer of the user: the
// one every card the user saved (also a removed one) is attached to; a
// market CodeNotFound error when the user never saved a card.
func (db *DB) FindPaymentCustomer(ctx context.Context, userID int64) (string, error) {
	const op = "find payment customer"
	tx, err := db.read(ctx)
	if err != nil {
		return "", fail(op, err, "")
	}
	defer tx.Rollback()
	var customer string
	err = tx.QueryRowContext(ctx, `SELECT customer_id FROM payment_methods WHERE user_id = ?
		ORDER BY created_at DESC, id DESC LIMIT 1`, userID).Scan(&customer)
	if errors.Is(err, sql.ErrNoRows) {
		return "", notFound(msgNoPaymentCustomer)
	}
	return customer, fail(op, err, "")
}

// RemovePaymentMethod removes a saved card of the user, so it is never
// charged again; another user's card, or one already removed, is not
// found.
func (db *DB) RemovePaymentMethod(ctx context.Context, userID, methodID int64, now time.Time) error {
	const op = "remove payment method"
	tx, err := db.begin(ctx)
	if err != nil {
		return fail(op, err, "")
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, `UPDATE payment_methods SET removed_at = ? WHERE id = ? AND user_id = ? AND removed_at IS NULL`,
		unix(now), methodID, userID)
	if err != nil {
		return fail(op, err, "")
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		if err != nil {
			return fail(op, err, "")
		}
		return notFound(msgPaymentMethodNotFound)
	}
	return fail(op, tx.Commit(), "")
}
