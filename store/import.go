package store

import (
	"context"
	"strings"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// ImportOffers stores offers as given — their provider, review state and
// offer state included — in one transaction, and returns their ids in
// order. It is for bulk loading (load tests, moving a catalogue in), not
// for providers: nothing is reviewed, so validate each offer with
// market.ValidateOffer first and set Review yourself.
func (db *DB) ImportOffers(ctx context.Context, offers []market.Offer, now time.Time) ([]int64, error) {
	const op = "import offers"
	tx, err := db.begin(ctx)
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer tx.Rollback()

	ids := make([]int64, len(offers))
	for i, o := range offers {
		cols, args := offerFields(o)
		cols = append(cols, "provider_id", "review", "review_note", "state", "created_at", "updated_at")
		args = append(args, o.ProviderID, string(o.Review), o.ReviewNote, string(o.State), unix(now), unix(now))
		if err := tx.QueryRowContext(ctx, `INSERT INTO offers (`+strings.Join(cols, ", ")+`) VALUES (`+
			placeholders(len(cols))+`) RETURNING id`, args...).Scan(&ids[i]); err != nil {
			return nil, fail(op, err, "")
		}
		if err := writeOfferChildren(ctx, tx, ids[i], o.Figures, o.CreditSchedule); err != nil {
			return nil, fail(op, err, msgDuplicateFigure)
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, fail(op, err, "")
	}
	return ids, nil
}
