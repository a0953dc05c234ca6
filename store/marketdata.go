package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// tradedStates are the reservation states whose pieces count as trades in
// the price index: paid for, whether or not they have run yet.
var tradedStates = []any{string(market.ReservationConfirmed), string(market.ReservationActive),
	string(market.ReservationCompleted), string(market.ReservationSettled)}

// ListTrades returns the pieces of reservations booked in [from, to) that
// were paid for (confirmed, active, completed or settled), with their
// buyer and provider, their offer's accelerator, region and the price class
// they were booked in, by booking time.
func (db *DB) ListTrades(ctx context.Context, from, to time.Time) ([]market.Trade, error) {
	const op = "list trades"
	tx, err := db.read(ctx)
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer tx.Rollback()
	args := append([]any{unix(from), unix(to)}, tradedStates...)
	rows, err := tx.QueryContext(ctx, `SELECT r.created_at, r.buyer_id, p.provider_id, o.accelerator_id, o.region_id, p.interruptible,
			p.devices, p.start_at, p.end_at, p.price_cents
		FROM reservations r
		JOIN reservation_pieces p ON p.reservation_id = r.id
		JOIN offers o ON o.id = p.offer_id
		WHERE r.created_at >= ? AND r.created_at < ? AND r.resale_of IS NULL AND r.state IN (`+placeholders(len(tradedStates))+`)
		ORDER BY r.created_at, p.id`, args...)
	if err != nil {
		return nil, fail(op, err, "")
	}
	var out []market.Trade
	for rows.Next() {
		var t market.Trade
		var booked, start, end, price int64
		if err := rows.Scan(&booked, &t.BuyerID, &t.ProviderID, &t.AcceleratorID, &t.RegionID, &t.Interruptible, &t.Devices, &start, &end, &price); err != nil {
			rows.Close()
			return nil, fail(op, err, "")
		}
		t.BookedAt, t.Start, t.End, t.PriceCents = fromUnix(booked), fromUnix(start), fromUnix(end), market.Cents(price)
		out = append(out, t)
	}
	if err := closeRows(rows); err != nil {
		return nil, fail(op, err, "")
	}
	return out, nil
}

// ImportPastReservations inserts reservations that lie wholly in the past
// (demo history, migrations from elsewhere) as they are, in one
// transaction: no capacity check, since every piece ended before now and
// a completed or settled reservation holds no capacity. Each piece's
// provider and cancellation policy are taken from its offer; a piece that
// names no nodes is placed beside the earlier pieces of the import on its
// offer as a booking would have placed it (placeRecorded). It refuses
// anything else with an invalid error.
func (db *DB) ImportPastReservations(ctx context.Context, rs []market.Reservation, now time.Time) error {
	const op = "import past reservations"
	tx, err := db.begin(ctx)
	if err != nil {
		return fail(op, err, "")
	}
	defer tx.Rollback()
	policy := map[int64][3]int64{}
	shapes := map[int64]market.Offer{}
	earlier := map[int64][]market.Commitment{} // imported pieces by offer, for placing the next
	for _, r := range rs {
		if r.State != market.ReservationCompleted && r.State != market.ReservationSettled {
			return invalid("Only completed or settled reservations can be imported.")
		}
		if len(r.Pieces) == 0 || r.End().After(now) || r.CreatedAt.After(r.Start()) {
			return invalid("An imported reservation must have pieces, be booked before it starts and end in the past.")
		}
		r.AmountCents = 0
		for i := range r.Pieces {
			p := &r.Pieces[i]
			pol, ok := policy[p.OfferID]
			if !ok {
				var prov, free, fee int64
				var o market.Offer
				err := tx.QueryRowContext(ctx, `SELECT provider_id, free_cancel_hours, cancel_fee_bp, devices_per_node, nodes, placement_group
					FROM offers WHERE id = ?`, p.OfferID).Scan(&prov, &free, &fee, &o.DevicesPerNode, &o.Nodes, &o.PlacementGroup)
				if errors.Is(err, sql.ErrNoRows) {
					return notFound(msgOfferNotFound)
				}
				if err != nil {
					return fail(op, err, "")
				}
				pol = [3]int64{prov, free, fee}
				policy[p.OfferID] = pol
				o.ID = p.OfferID
				shapes[p.OfferID] = o
			}
			p.ProviderID, p.FreeCancelHours, p.CancelFeeBP = pol[0], int(pol[1]), int(pol[2])
			p.Start, p.End = truncate(p.Start), truncate(p.End)
			if len(p.Nodes) == 0 {
				p.Nodes = placeRecorded(shapes[p.OfferID], earlier[p.OfferID], p.Commitment())
			}
			earlier[p.OfferID] = append(earlier[p.OfferID], p.Commitment())
			r.AmountCents += p.AmountCents
		}
		r.HoldExpiresAt = r.CreatedAt
		if _, err := insertReservation(ctx, tx, r); err != nil {
			return fail(op, err, "")
		}
	}
	return fail(op, tx.Commit(), "")
}

// Person-safe messages of market data.
const (
	msgCarbonProfileNotFound = "This offer has no carbon profile of its own."
	msgNotYourReservation    = "That reservation could not be found."
	msgReportTooEarly        = "Measurements can be reported once the reservation has started."
	msgPieceNotInReservation = "Choose an offer that is part of this reservation."
)

// SetOfferCarbonProfile stores the provider's own hourly carbon profile
// for one of their offers, replacing any earlier one. Another provider's
// offer is not found.
func (db *DB) SetOfferCarbonProfile(ctx context.Context, providerID, offerID int64, p market.CarbonProfile, source string, now time.Time) error {
	const op = "set offer carbon profile"
	tx, err := db.begin(ctx)
	if err != nil {
		return fail(op, err, "")
	}
	defer tx.Rollback()
	if err := checkOwnOffer(ctx, tx, providerID, offerID); err != nil {
		return fail(op, err, "")
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO offer_carbon_profiles (offer_id, hourly_g, source, updated_at)
		VALUES (?, ?, ?, ?)
		ON CONFLICT (offer_id) DO UPDATE SET hourly_g = excluded.hourly_g, source = excluded.source, updated_at = excluded.updated_at`,
		offerID, p.String(), source, unix(now)); err != nil {
		return fail(op, err, "")
	}
	return fail(op, tx.Commit(), "")
}

// DeleteOfferCarbonProfile removes a provider's own profile, so the offer
// falls back to its region's. Deleting one that does not exist is not an
// error; another provider's offer is not found.
func (db *DB) DeleteOfferCarbonProfile(ctx context.Context, providerID, offerID int64) error {
	const op = "delete offer carbon profile"
	tx, err := db.begin(ctx)
	if err != nil {
		return fail(op, err, "")
	}
	defer tx.Rollback()
	if err := checkOwnOffer(ctx, tx, providerID, offerID); err != nil {
		return fail(op, err, "")
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM offer_carbon_profiles WHERE offer_id = ?`, offerID); err != nil {
		return fail(op, err, "")
	}
	return fail(op, tx.Commit(), "")
}

// OfferCarbonProfile is a provider's own profile for an offer.
type OfferCarbonProfile struct {
	OfferID   int64
	Profile   market.CarbonProfile
	Source    string
	UpdatedAt time.Time
}

// FindOfferCarbonProfile returns an offer's own profile, or a not-found
// error when it uses its region's.
func (db *DB) FindOfferCarbonProfile(ctx context.Context, offerID int64) (OfferCarbonProfile, error) {
	ps, err := db.listCarbonProfiles(ctx, "find offer carbon profile", `WHERE offer_id = ?`, offerID)
	if err != nil {
		return OfferCarbonProfile{}, err
	}
	if len(ps) == 0 {
		return OfferCarbonProfile{}, notFound(msgCarbonProfileNotFound)
	}
	return ps[0], nil
}

// ListOfferCarbonProfiles returns every provider-set profile by offer id.
func (db *DB) ListOfferCarbonProfiles(ctx context.Context) (map[int64]market.CarbonProfile, error) {
	ps, err := db.listCarbonProfiles(ctx, "list offer carbon profiles", "")
	if err != nil {
		return nil, err
	}
	out := make(map[int64]market.CarbonProfile, len(ps))
	for _, p := range ps {
		out[p.OfferID] = p.Profile
	}
	return out, nil
}

func (db *DB) listCarbonProfiles(ctx context.Context, op, where string, args ...any) ([]OfferCarbonProfile, error) {
	tx, err := db.read(ctx)
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx, `SELECT offer_id, hourly_g, source, updated_at FROM offer_carbon_profiles `+where+` ORDER BY offer_id`, args...)
	if err != nil {
		return nil, fail(op, err, "")
	}
	var out []OfferCarbonProfile
	for rows.Next() {
		var p OfferCarbonProfile
		var hourly string
		var updated int64
		if err := rows.Scan(&p.OfferID, &hourly, &p.Source, &updated); err != nil {
			rows.Close()
			return nil, fail(op, err, "")
		}
		prof, err := market.ParseCarbonProfile(hourly)
		if err != nil {
			rows.Close()
			return nil, fmt.Errorf("store: %s: offer %d: stored profile unreadable: %w", op, p.OfferID, err)
		}
		p.Profile, p.UpdatedAt = prof, fromUnix(updated)
		out = append(out, p)
	}
	return out, fail(op, closeRows(rows), "")
}

// CreateWorkReport records a buyer's measurement on one offer of their
// reservation, once the reservation has started (active, completed or
// settled). The piece's devices and the offer's accelerator are taken
// inside the transaction; the report is validated with them.
func (db *DB) CreateWorkReport(ctx context.Context, r market.WorkReport, now time.Time) (market.WorkReport, error) {
	const op = "create work report"
	tx, err := db.begin(ctx)
	if err != nil {
		return r, fail(op, err, "")
	}
	defer tx.Rollback()
	var buyer int64
	var state string
	err = tx.QueryRowContext(ctx, `SELECT buyer_id, state FROM reservations WHERE id = ?`, r.ReservationID).Scan(&buyer, &state)
	if errors.Is(err, sql.ErrNoRows) || (err == nil && buyer != r.ReporterID) {
		return r, notFound(msgNotYourReservation)
	}
	if err != nil {
		return r, fail(op, err, "")
	}
	switch market.ReservationState(state) {
	case market.ReservationActive, market.ReservationCompleted, market.ReservationSettled:
	default:
		return r, conflict(msgReportTooEarly)
	}
	r.Devices, r.AcceleratorID = 0, ""
	err = tx.QueryRowContext(ctx, `SELECT SUM(p.devices), o.accelerator_id FROM reservation_pieces p JOIN offers o ON o.id = p.offer_id
		WHERE p.reservation_id = ? AND p.offer_id = ? GROUP BY o.accelerator_id`, r.ReservationID, r.OfferID).Scan(&r.Devices, &r.AcceleratorID)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return r, fail(op, err, "")
	}
	if err := market.ValidateWorkReport(&r); err != nil {
		if r.Devices == 0 {
			return r, &market.Error{Code: market.CodeInvalid, Message: msgPieceNotInReservation, Fields: map[string]string{"offer": msgPieceNotInReservation}}
		}
		return r, err
	}
	r.CreatedAt = truncate(now)
	if err := tx.QueryRowContext(ctx, `INSERT INTO work_reports (reservation_id, offer_id, reporter_id, accelerator_id, devices,
			metric, latency_percentile, workload, value, observed_minutes, lost_minutes, note, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id`,
		r.ReservationID, r.OfferID, r.ReporterID, r.AcceleratorID, r.Devices, string(r.Metric), r.LatencyPercentile,
		r.Workload, r.Value, r.ObservedMinutes, r.LostMinutes, r.Note, unix(r.CreatedAt)).Scan(&r.ID); err != nil {
		return r, fail(op, err, "")
	}
	return r, fail(op, tx.Commit(), "")
}

// WorkReportFilter selects work reports; zero fields match everything.
type WorkReportFilter struct {
	OfferIDs      []int64
	AcceleratorID string
	ReservationID int64
}

// ListWorkReports returns the reports matching f, oldest first.
func (db *DB) ListWorkReports(ctx context.Context, f WorkReportFilter) ([]market.WorkReport, error) {
	const op = "list work reports"
	where, args := "1 = 1", []any{}
	if len(f.OfferIDs) > 0 {
		where += ` AND offer_id IN (` + placeholders(len(f.OfferIDs)) + `)`
		for _, id := range f.OfferIDs {
			args = append(args, id)
		}
	}
	if f.AcceleratorID != "" {
		where += ` AND accelerator_id = ?`
		args = append(args, f.AcceleratorID)
	}
	if f.ReservationID != 0 {
		where += ` AND reservation_id = ?`
		args = append(args, f.ReservationID)
	}
	tx, err := db.read(ctx)
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx, `SELECT id, reservation_id, offer_id, reporter_id, accelerator_id, devices, metric,
			latency_percentile, workload, value, observed_minutes, lost_minutes, note, created_at
		FROM work_reports WHERE `+where+` ORDER BY created_at, id`, args...)
	if err != nil {
		return nil, fail(op, err, "")
	}
	var out []market.WorkReport
	for rows.Next() {
		var r market.WorkReport
		var metric string
		var created int64
		if err := rows.Scan(&r.ID, &r.ReservationID, &r.OfferID, &r.ReporterID, &r.AcceleratorID, &r.Devices, &metric,
			&r.LatencyPercentile, &r.Workload, &r.Value, &r.ObservedMinutes, &r.LostMinutes, &r.Note, &created); err != nil {
			rows.Close()
			return nil, fail(op, err, "")
		}
		r.Metric, r.CreatedAt = market.WorkMetric(metric), fromUnix(created)
		out = append(out, r)
	}
	return out, fail(op, closeRows(rows), "")
}

// ListForwardMarket returns what the forward curve at now needs, read in
// one transaction: every offer listed at now, and the paid-for pieces
// (confirmed, active, completed or settled reservations, as ListTrades)
// that start in the market.ForwardWeeks weeks from market.WeekStart(now),
// by start.
func (db *DB) ListForwardMarket(ctx context.Context, now time.Time) ([]market.Offer, []market.Trade, error) {
	const op = "list forward market"
	tx, err := db.read(ctx)
	if err != nil {
		return nil, nil, fail(op, err, "")
	}
	defer tx.Rollback()
	ls, err := queryListings(ctx, tx, `SELECT `+listingColumns+listingFrom+` WHERE `+listedWhere+` ORDER BY o.id`, listedArgs(now)...)
	if err != nil {
		return nil, nil, fail(op, err, "")
	}
	offers := make([]market.Offer, len(ls))
	for i, l := range ls {
		offers[i] = l.Offer
	}
	first := market.WeekStart(now)
	args := append([]any{unix(first), unix(first.AddDate(0, 0, 7*market.ForwardWeeks))}, tradedStates...)
	rows, err := tx.QueryContext(ctx, `SELECT r.created_at, r.buyer_id, p.provider_id, o.accelerator_id, o.region_id, p.interruptible,
			p.devices, p.start_at, p.end_at, p.price_cents
		FROM reservations r
		JOIN reservation_pieces p ON p.reservation_id = r.id
		JOIN offers o ON o.id = p.offer_id
		WHERE p.start_at >= ? AND p.start_at < ? AND r.resale_of IS NULL AND r.state IN (`+placeholders(len(tradedStates))+`)
		ORDER BY p.start_at, p.id`, args...)
	if err != nil {
		return nil, nil, fail(op, err, "")
	}
	var trades []market.Trade
	for rows.Next() {
		var t market.Trade
		var booked, start, end, price int64
		if err := rows.Scan(&booked, &t.BuyerID, &t.ProviderID, &t.AcceleratorID, &t.RegionID, &t.Interruptible, &t.Devices, &start, &end, &price); err != nil {
			rows.Close()
			return nil, nil, fail(op, err, "")
		}
		t.BookedAt, t.Start, t.End, t.PriceCents = fromUnix(booked), fromUnix(start), fromUnix(end), market.Cents(price)
		trades = append(trades, t)
	}
	if err := closeRows(rows); err != nil {
		return nil, nil, fail(op, err, "")
	}
	return offers, trades, nil
}
