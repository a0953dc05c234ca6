package store

import (
	"context"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// findFreeOffers is FindOffers for a search with a free window
// (market.OfferSearch.Free): the window and rental limits narrow the
// offers in SQL, then each offer's commitments in the window decide, node
// by node (market.OfferSearch.FreeAdmits), before the page is cut. cond
// and args are FindOffers' WHERE clause and its arguments, order its
// ORDER BY.
func findFreeOffers(ctx context.Context, tx querier, f OfferFilter, cond string, args []any, order string) ([]OfferListing, int, error) {
	from := f.Free.From
	if from.Before(f.Now) {
		from = f.Now
	}
	// An offer must be available from the start and rent for the hours:
	// the offer's shortest rental when none are asked.
	cond += ` AND o.available_from <= ?`
	args = append(args[:len(args):len(args)], unix(from))
	if h := f.Free.Hours; h > 0 {
		cond += ` AND o.available_until >= ? AND o.min_rental_hours <= ? AND (o.max_rental_hours = 0 OR o.max_rental_hours >= ?)`
		args = append(args, unix(from.Add(time.Duration(h)*time.Hour)), h, h)
	} else {
		cond += ` AND o.available_until >= ? + CASE WHEN o.min_rental_hours > 1 THEN o.min_rental_hours ELSE 1 END * 3600`
		args = append(args, unix(from))
	}

	rows, err := tx.QueryContext(ctx, `SELECT o.id, o.devices_per_node, o.nodes, o.placement_group,
			o.available_from, o.available_until, o.min_rental_hours, o.max_rental_hours
		FROM offers o`+cond+` ORDER BY `+order, args...)
	if err != nil {
		return nil, 0, err
	}
	var offers []market.Offer
	longest := max(f.Free.Hours, 1)
	for rows.Next() {
		var o market.Offer
		var af, au int64
		if err := rows.Scan(&o.ID, &o.DevicesPerNode, &o.Nodes, &o.PlacementGroup, &af, &au, &o.MinRentalHours, &o.MaxRentalHours); err != nil {
			rows.Close()
			return nil, 0, err
		}
		// Only the fields FreeAdmits reads, and listed (cond says so).
		o.AvailableFrom, o.AvailableUntil = fromUnix(af), fromUnix(au)
		o.Review, o.State = market.ReviewApproved, market.OfferActive
		longest = max(longest, o.MinRentalHours)
		offers = append(offers, o)
	}
	if err := closeRows(rows); err != nil {
		return nil, 0, err
	}
	if len(offers) == 0 {
		return nil, 0, nil
	}

	cs, err := queryCommitments(ctx, tx, f.Now, `p.offer_id IN (SELECT o.id FROM offers o`+cond+`) AND p.end_at > ? AND p.start_at < ?`,
		append(args[:len(args):len(args)], unix(from), unix(from.Add(time.Duration(longest)*time.Hour)))...)
	if err != nil {
		return nil, 0, err
	}
	byOffer := map[int64][]market.Commitment{}
	for _, c := range cs {
		byOffer[c.OfferID] = append(byOffer[c.OfferID], c)
	}
	var ids []any
	for _, o := range offers {
		if f.FreeAdmits(o, byOffer[o.ID], f.Now) {
			ids = append(ids, o.ID)
		}
	}
	total := len(ids)
	if f.Offset > 0 {
		ids = ids[min(f.Offset, len(ids)):]
	}
	if f.Limit > 0 {
		ids = ids[:min(f.Limit, len(ids))]
	}
	if len(ids) == 0 {
		return nil, total, nil
	}
	ls, err := queryListings(ctx, tx, `SELECT `+listingColumns+listingFrom+` WHERE o.id IN (`+placeholders(len(ids))+`) ORDER BY `+order, ids...)
	if err != nil {
		return nil, 0, err
	}
	return ls, total, nil
}

// ListCommitmentsOfOffers returns, by offer, the pieces on the offers that
// hold capacity at now and have not ended by now, soonest start first, for
// what the catalogue's cards show free. Each commitment's ID is the
// piece's id; an offer without any has no entry.
func (db *DB) ListCommitmentsOfOffers(ctx context.Context, offerIDs []int64, now time.Time) (map[int64][]market.Commitment, error) {
	const op = "list commitments of offers"
	tx, err := db.read(ctx)
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer tx.Rollback()
	out, err := commitmentsOfOffers(ctx, tx, offerIDs, now)
	return out, fail(op, err, "")
}

// commitmentsOfOffers is ListCommitmentsOfOffers inside the caller's
// transaction.
func commitmentsOfOffers(ctx context.Context, q querier, offerIDs []int64, now time.Time) (map[int64][]market.Commitment, error) {
	out := map[int64][]market.Commitment{}
	for start := 0; start < len(offerIDs); start += childChunk {
		chunk := offerIDs[start:min(start+childChunk, len(offerIDs))]
		args := make([]any, 0, len(chunk)+1)
		for _, id := range chunk {
			args = append(args, id)
		}
		args = append(args, unix(now))
		cs, err := queryCommitments(ctx, q, now, `p.offer_id IN (`+placeholders(len(chunk))+`) AND p.end_at > ?`, args...)
		if err != nil {
			return nil, err
		}
		for _, c := range cs {
			out[c.OfferID] = append(out[c.OfferID], c)
		}
	}
	return out, nil
}
