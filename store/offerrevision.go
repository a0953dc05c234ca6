package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// An edit of a listed offer that changes a claim is held as the offer's
// revision (table offer_revisions) until an admin decides it: the listed
// version stays on the market meanwhile. Approving writes the revision
// over the offer; rejecting or asking for changes drops it.

// putRevision holds o as the pending revision of its offer, replacing an
// earlier one.
func putRevision(ctx context.Context, tx *sql.Tx, o market.Offer, now time.Time) error {
	body, err := json.Marshal(o)
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO offer_revisions (offer_id, body, submitted_at) VALUES (?, ?, ?)
		ON CONFLICT (offer_id) DO UPDATE SET body = excluded.body, submitted_at = excluded.submitted_at`,
		o.ID, string(body), unix(now))
	return err
}

// loadRevision returns the pending revision of an offer, if any, with its
// submission time as UpdatedAt.
func loadRevision(ctx context.Context, q querier, offerID int64) (market.Offer, bool, error) {
	var body string
	var at int64
	err := q.QueryRowContext(ctx, `SELECT body, submitted_at FROM offer_revisions WHERE offer_id = ?`, offerID).Scan(&body, &at)
	if errors.Is(err, sql.ErrNoRows) {
		return market.Offer{}, false, nil
	}
	if err != nil {
		return market.Offer{}, false, err
	}
	var o market.Offer
	if err := json.Unmarshal([]byte(body), &o); err != nil {
		return market.Offer{}, false, err
	}
	o.UpdatedAt = fromUnix(at)
	return o, true, nil
}

// applyRevision writes an offer's pending revision over it, approved, and
// drops the revision. It reports false when there was none.
func applyRevision(ctx context.Context, tx *sql.Tx, offerID int64, now time.Time) (bool, error) {
	rev, ok, err := loadRevision(ctx, tx, offerID)
	if err != nil || !ok {
		return false, err
	}
	cols, args := offerFields(rev)
	set := ""
	for _, c := range cols {
		set += c + " = ?, "
	}
	args = append(args, string(market.ReviewApproved), unix(now), offerID)
	if _, err := tx.ExecContext(ctx, `UPDATE offers SET `+set+`review = ?, review_note = '', updated_at = ? WHERE id = ?`, args...); err != nil {
		return false, err
	}
	if err := writeOfferChildren(ctx, tx, offerID, rev.Figures, rev.CreditSchedule); err != nil {
		return false, err
	}
	return true, dropRevision(ctx, tx, offerID)
}

func dropRevision(ctx context.Context, tx *sql.Tx, offerID int64) error {
	_, err := tx.ExecContext(ctx, `DELETE FROM offer_revisions WHERE offer_id = ?`, offerID)
	return err
}

// FindOfferRevision returns the provider's edit of their listed offer
// that waits for review, if any (another provider's offer: not found).
func (db *DB) FindOfferRevision(ctx context.Context, providerID, offerID int64) (market.Offer, bool, error) {
	const op = "find offer revision"
	tx, err := db.read(ctx)
	if err != nil {
		return market.Offer{}, false, fail(op, err, "")
	}
	defer tx.Rollback()

	if _, err := getOwnOffer(ctx, tx, providerID, offerID); err != nil {
		return market.Offer{}, false, fail(op, err, "")
	}
	rev, ok, err := loadRevision(ctx, tx, offerID)
	if err != nil {
		return market.Offer{}, false, fail(op, err, "")
	}
	return rev, ok, nil
}

// OffersWithRevisions returns which of the provider's offers have an edit
// waiting for review.
func (db *DB) OffersWithRevisions(ctx context.Context, providerID int64) (map[int64]bool, error) {
	const op = "offers with revisions"
	tx, err := db.read(ctx)
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer tx.Rollback()

	ids, err := collect(ctx, tx, func(s scanner) (int64, error) {
		var id int64
		return id, s.Scan(&id)
	}, `SELECT r.offer_id FROM offer_revisions r JOIN offers o ON o.id = r.offer_id WHERE o.provider_id = ?`, providerID)
	if err != nil {
		return nil, fail(op, err, "")
	}
	out := make(map[int64]bool, len(ids))
	for _, id := range ids {
		out[id] = true
	}
	return out, nil
}
