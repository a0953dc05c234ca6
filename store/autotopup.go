package store

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// TopUpAuto is the method of an automatic top-up: the buyer's saved card,
// charged by the background work when the balance is below the buyer's
// threshold (at most one pending per buyer: balance_topups_one_auto).
const TopUpAuto = "auto"

// AutoTopUp is a buyer's automatic top-up setting.
type AutoTopUp struct {
	BuyerID           int64
	Threshold, Amount market.Cents
	PausedReason      string // the decline that paused it, until the buyer changes it or tops up by hand
	UpdatedAt         time.Time
}

const msgAutoTopUpNotFound = "No automatic top-up is set."

func getAutoTopUp(ctx context.Context, q querier, buyerID int64) (AutoTopUp, error) {
	a := AutoTopUp{BuyerID: buyerID}
	var threshold, amount, updated int64
	err := q.QueryRowContext(ctx, `SELECT threshold_cents, amount_cents, paused_reason, updated_at FROM balance_auto_topup WHERE buyer_id = ?`,
		buyerID).Scan(&threshold, &amount, &a.PausedReason, &updated)
	if errors.Is(err, sql.ErrNoRows) {
		return AutoTopUp{}, notFound(msgAutoTopUpNotFound)
	}
	a.Threshold, a.Amount, a.UpdatedAt = market.Cents(threshold), market.Cents(amount), fromUnix(updated)
	return a, err
}

// FindAutoTopUp returns the buyer's automatic top-up; not found when unset.
func (db *DB) FindAutoTopUp(ctx context.Context, buyerID int64) (AutoTopUp, error) {
	a, err := getAutoTopUp(ctx, db.reader, buyerID)
	return a, fail("find auto top-up", err, "")
}

// SetAutoTopUp sets the buyer's automatic top-up (market.ValidateAutoTopUp;
// both zero clears it). Setting it again un-pauses it.
func (db *DB) SetAutoTopUp(ctx context.Context, buyerID int64, threshold, amount market.Cents, now time.Time) error {
	const op = "set auto top-up"
	if err := market.ValidateAutoTopUp(threshold, amount); err != nil {
		return err
	}
	tx, err := db.begin(ctx)
	if err != nil {
		return fail(op, err, "")
	}
	defer tx.Rollback()
	if threshold == 0 {
		_, err = tx.ExecContext(ctx, `DELETE FROM balance_auto_topup WHERE buyer_id = ?`, buyerID)
	} else {
		_, err = tx.ExecContext(ctx, `INSERT INTO balance_auto_topup (buyer_id, threshold_cents, amount_cents, paused_reason, updated_at)
			VALUES (?, ?, ?, '', ?) ON CONFLICT (buyer_id) DO UPDATE SET threshold_cents = excluded.threshold_cents,
			amount_cents = excluded.amount_cents, paused_reason = '', updated_at = excluded.updated_at`,
			buyerID, int64(threshold), int64(amount), unix(now))
	}
	if err != nil {
		return fail(op, err, "")
	}
	return fail(op, tx.Commit(), "")
}

// ListAutoTopUpBuyers returns the buyers whose automatic top-up is set and
// not paused.
func (db *DB) ListAutoTopUpBuyers(ctx context.Context) ([]int64, error) {
	ids, err := collect(ctx, db.reader, func(s scanner) (int64, error) {
		var id int64
		return id, s.Scan(&id)
	}, `SELECT buyer_id FROM balance_auto_topup WHERE paused_reason = '' ORDER BY buyer_id`)
	return ids, fail("list auto top-up buyers", err, "")
}

// StartAutoTopUp records the buyer's automatic top-up as pending, in one
// transaction, when it is set and not paused, the balance is below its
// threshold and no automatic top-up of the buyer is pending; ok is false
// when none is due. The pending row is recorded before the processor is
// asked (key market.TopUpKey of its id); the unique index refuses a second
// pending one however many replicas or restarts ask.
func (db *DB) StartAutoTopUp(ctx context.Context, buyerID int64, now time.Time) (t TopUp, ok bool, err error) {
	const op = "start auto top-up"
	tx, err := db.begin(ctx)
	if err != nil {
		return TopUp{}, false, fail(op, err, "")
	}
	defer tx.Rollback()
	a, err := getAutoTopUp(ctx, tx, buyerID)
	if market.ErrorCode(err) == market.CodeNotFound {
		return TopUp{}, false, nil
	}
	if err != nil {
		return TopUp{}, false, fail(op, err, "")
	}
	if a.PausedReason != "" {
		return TopUp{}, false, nil
	}
	var pending int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM balance_topups WHERE buyer_id = ? AND method = ? AND state = ?`,
		buyerID, TopUpAuto, TopUpPending).Scan(&pending); err != nil {
		return TopUp{}, false, fail(op, err, "")
	}
	if pending > 0 {
		return TopUp{}, false, nil
	}
	bal, err := balanceOf(ctx, tx, buyerID)
	if err != nil {
		return TopUp{}, false, fail(op, err, "")
	}
	if !market.AutoTopUpDue(bal, a.Threshold) {
		return TopUp{}, false, nil
	}
	var id int64
	if err := tx.QueryRowContext(ctx, `INSERT INTO balance_topups (buyer_id, amount_cents, method, state, created_at, updated_at)
		VALUES (?, ?, ?, ?, ?, ?) RETURNING id`, buyerID, int64(a.Amount), TopUpAuto, TopUpPending, unix(now), unix(now)).Scan(&id); err != nil {
		if isUniqueViolation(err) || isPgUniqueViolation(err) {
			return TopUp{}, false, nil // another replica recorded it first
		}
		return TopUp{}, false, fail(op, err, "")
	}
	if t, err = getTopUp(ctx, tx, id); err != nil {
		return TopUp{}, false, fail(op, err, "")
	}
	return t, true, fail(op, tx.Commit(), "")
}

// pauseAutoTopUp pauses the buyer's automatic top-up after a declined
// card and notifies the buyer, once (only when it was not paused yet).
func pauseAutoTopUp(ctx context.Context, tx querier, buyerID int64, msg string, now time.Time) error {
	res, err := tx.ExecContext(ctx, `UPDATE balance_auto_topup SET paused_reason = ?, updated_at = ? WHERE buyer_id = ? AND paused_reason = ''`,
		msg, unix(now), buyerID)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return err
	}
	return insertNotification(ctx, tx, Notification{UserID: buyerID, Kind: NotifyMeteredRental, CreatedAt: now, URL: "/balance",
		Message: "Your automatic top-up was declined and is paused until you change it or top up by hand: " + msg})
}
