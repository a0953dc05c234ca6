package store

import (
	"context"
	"database/sql"
	"errors"
	"time"
)

// PayoutAccount is a provider's connected account.
type PayoutAccount struct {
	ProviderID       int64
	AccountID        string
	DetailsSubmitted bool
	ChargesEnabled   bool
	PayoutsEnabled   bool
	UpdatedAt        time.Time
}

// Onboarded reports whether the account can take transfers.
func (a PayoutAccount) Onboarded() bool { return a.DetailsSubmitted && a.PayoutsEnabled }

const payoutAccountColumns = `provider_id, account_id, details_submitted, charges_enabled, payouts_enabled, updated_at`

func scanPayoutAccount(s scanner) (PayoutAccount, error) {
	var a PayoutAccount
	var updated int64
	err := s.Scan(&a.ProviderID, &a.AccountID, &a.DetailsSubmitted, &a.ChargesEnabled, &a.PayoutsEnabled, &updated)
	a.UpdatedAt = fromUnix(updated)
	return a, err
}

func getPayoutAccount(ctx context.Context, q querier, providerID int64) (PayoutAccount, error) {
	a, err := scanPayoutAccount(q.QueryRowContext(ctx, `SELECT `+payoutAccountColumns+` FROM payout_accounts WHERE provider_id = ?`, providerID))
	if errors.Is(err, sql.ErrNoRows) {
		return PayoutAccount{}, notFound(msgAccountNotFound)
	}
	return a, err
}

// FindPayoutAccount returns a provider's connected account.
func (db *DB) FindPayoutAccount(ctx context.Context, providerID int64) (PayoutAccount, error) {
	const op = "find payout account"
	tx, err := db.read(ctx)
	if err != nil {
		return PayoutAccount{}, fail(op, err, "")
	}
	defer tx.Rollback()
	a, err := getPayoutAccount(ctx, tx, providerID)
	return a, fail(op, err, "")
}

// CreatePayoutAccount records a provider's new connected account. A
// provider who already has one keeps it, and it is returned.
func (db *DB) CreatePayoutAccount(ctx context.Context, providerID int64, accountID string, now time.Time) (PayoutAccount, error) {
	const op = "create payout account"
	tx, err := db.begin(ctx)
	if err != nil {
		return PayoutAccount{}, fail(op, err, "")
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `INSERT INTO payout_accounts (provider_id, account_id, created_at, updated_at)
		VALUES (?, ?, ?, ?) ON CONFLICT (provider_id) DO NOTHING`, providerID, accountID, unix(now), unix(now)); err != nil {
		return PayoutAccount{}, fail(op, err, "That payout account belongs to someone else.")
	}
	a, err := getPayoutAccount(ctx, tx, providerID)
	if err != nil {
		return PayoutAccount{}, fail(op, err, "")
	}
	return a, fail(op, tx.Commit(), "")
}

// AccountUpdate is the onboarding state of a connected account as the
// processor reported it at At.
type AccountUpdate struct {
	EventID          string // empty when read from the processor directly
	EventType        string
	AccountID        string
	DetailsSubmitted bool
	ChargesEnabled   bool
	PayoutsEnabled   bool
	At               time.Time
}

// UpdatePayoutAccount applies an account's onboarding state, unless a
// newer state was applied already (events may arrive out of order). When
// the account can take transfers, the provider's held payouts are released
// to the settlement retrier in the same transaction. It returns how many
// payouts were released; an unknown account changes nothing.
func (db *DB) UpdatePayoutAccount(ctx context.Context, u AccountUpdate, now time.Time) (int, error) {
	const op = "update payout account"
	tx, err := db.begin(ctx)
	if err != nil {
		return 0, fail(op, err, "")
	}
	defer tx.Rollback()
	fresh, err := markEvent(ctx, tx, u.EventID, u.EventType, now)
	if err != nil || !fresh {
		return 0, fail(op, err, "")
	}
	var providerID int64
	err = tx.QueryRowContext(ctx, `SELECT provider_id FROM payout_accounts WHERE account_id = ?`, u.AccountID).Scan(&providerID)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, fail(op, tx.Commit(), "")
	}
	if err != nil {
		return 0, fail(op, err, "")
	}
	if _, err := tx.ExecContext(ctx, `UPDATE payout_accounts SET details_submitted = ?, charges_enabled = ?, payouts_enabled = ?,
		event_at = ?, updated_at = ? WHERE provider_id = ? AND event_at <= ?`,
		boolInt(u.DetailsSubmitted), boolInt(u.ChargesEnabled), boolInt(u.PayoutsEnabled), unix(u.At), unix(now),
		providerID, unix(u.At)); err != nil {
		return 0, fail(op, err, "")
	}
	a, err := getPayoutAccount(ctx, tx, providerID)
	if err != nil {
		return 0, fail(op, err, "")
	}
	released := 0
	if a.Onboarded() {
		if released, err = releaseHeld(ctx, tx, providerID, now); err != nil {
			return 0, fail(op, err, "")
		}
	}
	return released, fail(op, tx.Commit(), "")
}

// releaseHeld turns a provider's held transfers into pending ones and
// makes their settlements due at now.
func releaseHeld(ctx context.Context, tx *sql.Tx, providerID int64, now time.Time) (int, error) {
	res, err := tx.ExecContext(ctx, `UPDATE settlement_transfers SET state = ? WHERE provider_id = ? AND state = ?`,
		string(TransferPending), providerID, string(TransferHeld))
	if err != nil {
		return 0, err
	}
	n, err := res.RowsAffected()
	if err != nil || n == 0 {
		return 0, err
	}
	_, err = tx.ExecContext(ctx, `UPDATE settlements SET state = ?, next_attempt_at = ?, updated_at = ?
		WHERE state IN (?, ?) AND reservation_id IN (SELECT reservation_id FROM settlement_transfers WHERE provider_id = ? AND state = ?)`,
		string(SettlementPending), unix(now), unix(now), string(SettlementWaiting), string(SettlementPending), providerID, string(TransferPending))
	return int(n), err
}
