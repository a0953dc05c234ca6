package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// ProviderPiece is a piece of a reservation on one of a provider's offers,
// as the provider's dashboard shows it.
type ProviderPiece struct {
	Piece         market.ReservationPiece
	ReservationID int64
	State         market.ReservationState
	OfferTitle    string
	BuyerName     string
	// ResaleOf is the reservation this one's time was bought from on
	// resale (0 when none); ResoldAt, where this one's time was sold.
	ResaleOf int64
	ResoldAt time.Time
}

// Person-safe messages of the booking path.
const (
	msgReservationNotFound = "That reservation could not be found."
	msgOfferUnavailable    = "This offer is no longer available for those times. Please choose from fresh quotes."
	msgBookedMeanwhile     = "Someone else just booked some of these devices. Please choose from fresh quotes."
	msgHoldExpired         = "The hold on this reservation expired before payment completed, so its devices were released. Please book again."
)

const (
	reservationColumns = `r.id, r.buyer_id, r.state, r.amount_cents, r.hold_expires_at, r.cancel_fee_cents,
		r.request_json, r.created_at, r.updated_at, r.extends_id, COALESCE(r.rejected_at, 0), r.reject_reason,
		COALESCE(r.resale_of, 0), COALESCE(r.resold_at, 0)`
	pieceColumns = `p.id, p.offer_id, p.provider_id, p.devices, p.start_at, p.end_at, p.interruptible,
		p.price_cents, p.amount_cents, p.free_cancel_hours, p.cancel_fee_bp,
		p.billing_basis, p.uptime_bp, p.credit_cap_bp, p.credit_schedule_json, p.gang, p.nodes, p.reject_minutes`
)

// holdsCapacity is the condition, on reservations aliased r, for a piece
// to hold capacity at now (its arguments are holdsCapacityArgs(now)):
// confirmed or active, or held with the hold not yet expired. An expired hold stops counting here the moment it
// lapses, whether or not ExpireHolds has marked it yet. It matches
// market.ReservationState.HoldsCapacity. Time bought on resale
// (resale_of set) holds none: the original reservation's pieces keep
// holding it (market/resale.go).
const holdsCapacity = `(r.resale_of IS NULL AND (r.state IN (?, ?) OR (r.state = ? AND r.hold_expires_at > ?)))`

func holdsCapacityArgs(now time.Time) []any {
	return []any{string(market.ReservationConfirmed), string(market.ReservationActive),
		string(market.ReservationHeld), unix(now)}
}

func scanReservation(s scanner) (market.Reservation, error) {
	var r market.Reservation
	var state string
	var amount, fee, holdExpires, created, updated, rejected, resold int64
	var extends sql.NullInt64
	if err := s.Scan(&r.ID, &r.BuyerID, &state, &amount, &holdExpires, &fee,
		&r.RequestJSON, &created, &updated, &extends, &rejected, &r.RejectReason, &r.ResaleOf, &resold); err != nil {
		return market.Reservation{}, err
	}
	if resold != 0 {
		r.ResoldAt = fromUnix(resold)
	}
	r.ExtendsID = extends.Int64
	if rejected != 0 {
		r.RejectedAt = fromUnix(rejected)
	}
	r.State = market.ReservationState(state)
	r.AmountCents, r.CancelFeeCents = market.Cents(amount), market.Cents(fee)
	r.HoldExpiresAt = fromUnix(holdExpires)
	r.CreatedAt, r.UpdatedAt = fromUnix(created), fromUnix(updated)
	return r, nil
}

func scanPiece(s scanner, extra ...any) (market.ReservationPiece, error) {
	var p market.ReservationPiece
	var start, end, price, amount int64
	var basis, schedule, nodes string
	dest := append([]any{&p.ID, &p.OfferID, &p.ProviderID, &p.Devices, &start, &end, &p.Interruptible,
		&price, &amount, &p.FreeCancelHours, &p.CancelFeeBP,
		&basis, &p.Terms.UptimeBP, &p.Terms.CreditCapBP, &schedule, &p.Gang, &nodes, &p.RejectMinutes}, extra...)
	if err := s.Scan(dest...); err != nil {
		return market.ReservationPiece{}, err
	}
	var err error
	if p.Nodes, err = parseNodes(nodes); err != nil {
		return market.ReservationPiece{}, fmt.Errorf("piece %d: %w", p.ID, err)
	}
	p.Start, p.End = fromUnix(start), fromUnix(end)
	p.PriceCents, p.AmountCents = market.Cents(price), market.Cents(amount)
	p.Terms.BillingBasis = market.BillingBasis(basis)
	tiers, err := decodeCreditSchedule(schedule)
	if err != nil {
		return market.ReservationPiece{}, fmt.Errorf("piece %d: %w", p.ID, err)
	}
	p.Terms.CreditSchedule = tiers
	return p, nil
}

// decodeCreditSchedule reads a piece's credit_schedule_json; no tiers is
// nil, as on an offer without tiers.
func decodeCreditSchedule(s string) ([]market.CreditTier, error) {
	if s == "[]" {
		return nil, nil
	}
	var tiers []market.CreditTier
	if err := json.Unmarshal([]byte(s), &tiers); err != nil {
		return nil, fmt.Errorf("credit schedule: %w", err)
	}
	if len(tiers) == 0 {
		return nil, nil
	}
	return tiers, nil
}

// queryReservations runs a reservation query and loads the pieces of the
// reservations it returns.
func queryReservations(ctx context.Context, q querier, query string, args ...any) ([]market.Reservation, error) {
	rs, err := collect(ctx, q, scanReservation, query, args...)
	if err != nil {
		return nil, err
	}
	if err := loadPieces(ctx, q, rs); err != nil {
		return nil, err
	}
	return rs, nil
}

// loadPieces fills the pieces of reservations, in booking order.
func loadPieces(ctx context.Context, q querier, rs []market.Reservation) error {
	index := make(map[int64]int, len(rs))
	for i := range rs {
		index[rs[i].ID] = i
	}
	for start := 0; start < len(rs); start += childChunk {
		chunk := rs[start:min(start+childChunk, len(rs))]
		ids := make([]any, len(chunk))
		for i, r := range chunk {
			ids[i] = r.ID
		}
		rows, err := q.QueryContext(ctx, `SELECT `+pieceColumns+`, p.reservation_id FROM reservation_pieces p
			WHERE p.reservation_id IN (`+placeholders(len(ids))+`) ORDER BY p.reservation_id, p.position`, ids...)
		if err != nil {
			return err
		}
		for rows.Next() {
			var resID int64
			p, err := scanPiece(rows, &resID)
			if err != nil {
				rows.Close()
				return err
			}
			r := &rs[index[resID]]
			r.Pieces = append(r.Pieces, p)
		}
		if err := closeRows(rows); err != nil {
			return err
		}
	}
	return nil
}

// getReservation loads one reservation with its pieces.
func getReservation(ctx context.Context, q querier, id int64) (market.Reservation, error) {
	rs, err := queryReservations(ctx, q, `SELECT `+reservationColumns+` FROM reservations r WHERE r.id = ?`, id)
	if err != nil {
		return market.Reservation{}, err
	}
	if len(rs) == 0 {
		return market.Reservation{}, notFound(msgReservationNotFound)
	}
	return rs[0], nil
}

// getBuyerReservation loads a reservation of the buyer; another buyer's
// reservation is not found, exactly as a missing one.
func getBuyerReservation(ctx context.Context, q querier, buyerID, id int64) (market.Reservation, error) {
	r, err := getReservation(ctx, q, id)
	if err != nil {
		return market.Reservation{}, err
	}
	if r.BuyerID != buyerID {
		return market.Reservation{}, notFound(msgReservationNotFound)
	}
	return r, nil
}

const countHeldQuery = `SELECT COUNT(*) FROM reservations WHERE buyer_id = ? AND state = ? AND hold_expires_at > ?`

// countHeld counts the buyer's held reservations whose hold has not expired.
func countHeld(ctx context.Context, q querier, buyerID int64, now time.Time) (int, error) {
	var n int
	err := q.QueryRowContext(ctx, countHeldQuery, buyerID, string(market.ReservationHeld), unix(now)).Scan(&n)
	return n, err
}

// The statements of the booking transaction, prepared once per handle.
const (
	// bookableOfferQuery reads only what booking needs of the offer (see
	// scanBookableOffer): reading and converting all of scanOffer's columns
	// was a tenth of the booking's time.
	bookableOfferQuery = `SELECT o.id, o.provider_id, o.devices_per_node, o.nodes, o.placement_group,
			o.available_from, o.available_until, o.min_rental_hours, o.max_rental_hours,
			o.free_cancel_hours, o.cancel_fee_bp, o.review, o.state, u.suspended
		FROM offers o JOIN users u ON u.id = o.provider_id WHERE o.id = ?`
	// bookingCommitmentsWhere selects the pieces of an offer overlapping
	// [from, to); (offer_id, end_at) is indexed, and past pieces, which
	// pile up, are skipped by the index.
	bookingCommitmentsWhere = `p.offer_id = ? AND p.end_at > ? AND p.start_at < ?`
	insertReservationQuery  = `INSERT INTO reservations (buyer_id, state, amount_cents, hold_expires_at, cancel_fee_cents,
			request_json, starts_at, ends_at, created_at, updated_at, extends_id)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULLIF(?, 0))
		RETURNING id`
	// insertPieceQuery freezes the offer's settlement terms on the piece
	// from the offer row as it stands in the inserting transaction (the
	// booking's), whoever inserts it; the credit schedule is encoded as
	// JSON of market.CreditTier (the view of 0019_credit_schedules.sql; an
	// offer without tiers has none).
	insertPieceQuery = `INSERT INTO reservation_pieces (reservation_id, position, offer_id, provider_id, devices,
			start_at, end_at, interruptible, price_cents, amount_cents, free_cancel_hours, cancel_fee_bp, gang, nodes,
			billing_basis, uptime_bp, credit_cap_bp, credit_schedule_json, reject_minutes)
		SELECT ?, ?, o.id, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?,
			o.billing_basis, o.uptime_bp, o.credit_cap_bp,
			COALESCE((SELECT s.schedule_json FROM offer_credit_schedules s WHERE s.offer_id = o.id), '[]'), o.reject_minutes
		FROM offers o WHERE o.id = ?
		RETURNING id, billing_basis, uptime_bp, credit_cap_bp, credit_schedule_json, reject_minutes`
)

var bookingQueries = []string{countHeldQuery, bookableOfferQuery, commitmentsQuery(bookingCommitmentsWhere),
	insertReservationQuery, insertPieceQuery, savepointQuery, rollbackToSavepointQuery, releaseSavepointQuery}

// newHold is a held reservation of the pieces, not yet stored: their times
// truncated as stored, the amount their sum, with the offers in first-seen
// order and each offer's piece indexes, for the booking transaction.
func newHold(buyerID int64, pieces []market.ReservationPiece, now time.Time, hold time.Duration) (market.Reservation, []int64, map[int64][]int) {
	r := market.Reservation{
		BuyerID: buyerID, State: market.ReservationHeld, Pieces: make([]market.ReservationPiece, len(pieces)),
		HoldExpiresAt: truncate(now.Add(hold)), CreatedAt: truncate(now), UpdatedAt: truncate(now),
	}
	var offerIDs []int64
	byOffer := map[int64][]int{}
	for i, p := range pieces {
		p.ID = 0
		p.Start, p.End = truncate(p.Start), truncate(p.End)
		r.Pieces[i] = p
		r.AmountCents += p.AmountCents
		if _, seen := byOffer[p.OfferID]; !seen {
			offerIDs = append(offerIDs, p.OfferID)
		}
		byOffer[p.OfferID] = append(byOffer[p.OfferID], i)
	}
	return r, offerIDs, byOffer
}

// CreateReservation books pieces for the buyer, all or nothing, in one
// immediate write transaction, so the capacity check and the insert see
// and change the same state whatever other bookers (in this process or
// another replica) do. It refuses with a conflict when the buyer already
// has market.MaxUnpaidHolds unexpired holds; when an offer is not listed,
// its provider is suspended or a piece lies outside its availability
// window; when a piece does not fit the offer on its own (too many
// devices, rental limits, a gang over nodes without a placement group);
// and when, with the commitments holding capacity at now, a piece does not
// fit the free devices of the offer's nodes at some instant. Each piece is
// placed on nodes by market.PlaceCommitments (a gang on one node, or whole
// nodes; a split piece anywhere; best fit) — or checked on the nodes it
// names — and returned with them. The reservation is
// stored held until now+hold, for the sum of the pieces' amounts. Piece
// times are kept to the second; each piece's provider and cancellation
// policy and settlement terms are taken from the offer as it stands at
// booking (the caller's Terms are replaced); its price and amount are the
// caller's (the quote).
func (db *DB) CreateReservation(ctx context.Context, buyerID int64, pieces []market.ReservationPiece, requestJSON string, now time.Time, hold time.Duration) (market.Reservation, error) {
	const op = "create reservation"
	if hold <= 0 {
		return market.Reservation{}, fmt.Errorf("store: %s: hold %s must be positive", op, hold)
	}
	if len(pieces) == 0 {
		return market.Reservation{}, invalid("Choose a quote to reserve.")
	}
	r, offerIDs, byOffer := newHold(buyerID, pieces, now, hold)
	r.RequestJSON = requestJSON

	// The booking runs in a transaction shared with concurrent bookings,
	// inside its own savepoint (see groupcommit.go); it returns after the
	// commit, so r is stored when err is nil.
	err := db.book(ctx, bookingLocks{offers: offerIDs, buyers: []int64{buyerID}}, func(ctx context.Context, tx preparedTx) error {
		if err := holdReservation(ctx, tx, &r, offerIDs, byOffer, now); err != nil {
			return err
		}
		return notifyHeld(ctx, tx, r, now)
	})
	if err != nil {
		return market.Reservation{}, fail(op, err, "")
	}
	return r, nil
}

// notifyHeld tells the buyer a booking is held for them until it is paid.
func notifyHeld(ctx context.Context, tx querier, r market.Reservation, now time.Time) error {
	return insertNotification(ctx, tx, Notification{UserID: r.BuyerID, Kind: NotifyBookingHeld, CreatedAt: now,
		URL: fmt.Sprintf("/reservations/%d", r.ID),
		Notice: market.Notice{Kind: market.NoticeBookingHeld, Params: market.NoticeParams{Reservation: r.ID, Start: r.Start(), End: r.End(),
			Until: r.HoldExpiresAt}}})
}

// holdReservation is the booking inside the caller's booking transaction
// (db.book): the buyer's unpaid holds are counted, each offer's pieces are
// checked and placed (reserveOnOffer), the reservation r (from newHold) is
// inserted and its id set. CreateReservation and a standing order's fill
// (FillStandingOrder) both book through it, and each tells the buyer in
// its own words.
func holdReservation(ctx context.Context, tx querier, r *market.Reservation, offerIDs []int64, byOffer map[int64][]int, now time.Time) error {
	held, err := countHeld(ctx, tx, r.BuyerID, now)
	if err != nil {
		return err
	}
	if held >= market.MaxUnpaidHolds {
		return conflict(fmt.Sprintf(
			"You already have %d unpaid reservations. Pay for or cancel one before booking more.", held))
	}
	for _, offerID := range offerIDs {
		if err := reserveOnOffer(ctx, tx, offerID, r.Pieces, byOffer[offerID], now); err != nil {
			return err
		}
	}
	r.ID, err = insertReservation(ctx, tx, *r)
	return err
}

// reserveOnOffer checks, inside the booking transaction, that the pieces
// at idx (all on offerID) can be booked, places them on the offer's nodes
// (market.PlaceCommitments, node by node beside the commitments holding
// capacity; a piece that names its nodes is checked there), and fills in
// their nodes, provider and cancellation policy from the offer.
func reserveOnOffer(ctx context.Context, tx querier, offerID int64, pieces []market.ReservationPiece, idx []int, now time.Time) error {
	o, suspended, err := scanBookableOffer(tx.QueryRowContext(ctx, bookableOfferQuery, offerID))
	if errors.Is(err, sql.ErrNoRows) {
		return conflict(msgOfferUnavailable)
	}
	if err != nil {
		return err
	}
	if !o.Listed() || suspended {
		return conflict(msgOfferUnavailable)
	}
	return placeOnOffer(ctx, tx, o, pieces, idx, now)
}

// placeOnOffer is reserveOnOffer once the offer o (its bookable fields) is
// loaded and found listed: the booking's capacity check and placement,
// shared by every path that books (a quote's booking, a spot clearing).
func placeOnOffer(ctx context.Context, tx querier, o market.Offer, pieces []market.ReservationPiece, idx []int, now time.Time) error {
	offerID := o.ID
	add := make([]market.Commitment, len(idx))
	from, to := pieces[idx[0]].Start, pieces[idx[0]].End
	for k, i := range idx {
		p := &pieces[i]
		if p.Start.Before(o.AvailableFrom) || p.End.After(o.AvailableUntil) {
			return conflict(msgOfferUnavailable)
		}
		p.ProviderID, p.FreeCancelHours, p.CancelFeeBP = o.ProviderID, o.FreeCancelHours, o.CancelFeeBP
		add[k] = p.Commitment()
		if p.Start.Before(from) {
			from = p.Start
		}
		if p.End.After(to) {
			to = p.End
		}
	}
	// First on an empty offer, so a piece that could never fit (too many
	// devices, rental limits, a gang over nodes without a placement group,
	// malformed) keeps the market's own message; a conflict after that can
	// only come from other bookings.
	if err := market.FitsCapacity(o, nil, add); err != nil {
		return err
	}
	existing, err := queryCommitments(ctx, tx, now, bookingCommitmentsWhere, offerID, unix(from), unix(to))
	if err != nil {
		return err
	}
	placed, err := market.PlaceCommitments(o, existing, add)
	if err != nil {
		if market.ErrorCode(err) == market.CodeConflict {
			return conflict(msgBookedMeanwhile)
		}
		return err
	}
	for k, i := range idx {
		pieces[i].Nodes = placed[k].Nodes
	}
	return nil
}

// scanBookableOffer scans a row of bookableOfferQuery: the offer's fields
// that market.FitsCapacity, Listed and the pieces need, and whether its
// provider is suspended.
func scanBookableOffer(s scanner) (o market.Offer, suspended bool, err error) {
	var from, until int64
	var review, state string
	if err := s.Scan(&o.ID, &o.ProviderID, &o.DevicesPerNode, &o.Nodes, &o.PlacementGroup, &from, &until,
		&o.MinRentalHours, &o.MaxRentalHours, &o.FreeCancelHours, &o.CancelFeeBP, &review, &state, &suspended); err != nil {
		return market.Offer{}, false, err
	}
	o.AvailableFrom, o.AvailableUntil = fromUnix(from), fromUnix(until)
	o.Review, o.State = market.ReviewState(review), market.OfferState(state)
	return o, suspended, nil
}

// insertReservation inserts r and its pieces, setting the pieces' ids and
// their settlement terms, frozen from their offers, in place, and returns
// the reservation's id.
func insertReservation(ctx context.Context, tx querier, r market.Reservation) (int64, error) {
	var id int64
	err := tx.QueryRowContext(ctx, insertReservationQuery,
		r.BuyerID, string(r.State), int64(r.AmountCents), unix(r.HoldExpiresAt), int64(r.CancelFeeCents), r.RequestJSON,
		unix(r.Start()), unix(r.End()), unix(r.CreatedAt), unix(r.UpdatedAt), r.ExtendsID).Scan(&id)
	if err != nil {
		return 0, err
	}
	for i := range r.Pieces {
		p := &r.Pieces[i]
		var basis, schedule string
		err := tx.QueryRowContext(ctx, insertPieceQuery,
			id, i, p.ProviderID, p.Devices, unix(p.Start), unix(p.End),
			boolInt(p.Interruptible), int64(p.PriceCents), int64(p.AmountCents), p.FreeCancelHours, p.CancelFeeBP,
			boolInt(p.Gang), formatNodes(p.Nodes), p.OfferID,
		).Scan(&p.ID, &basis, &p.Terms.UptimeBP, &p.Terms.CreditCapBP, &schedule, &p.RejectMinutes)
		if errors.Is(err, sql.ErrNoRows) {
			return 0, notFound(msgOfferNotFound)
		}
		if err != nil {
			return 0, err
		}
		p.Terms.BillingBasis = market.BillingBasis(basis)
		if p.Terms.CreditSchedule, err = decodeCreditSchedule(schedule); err != nil {
			return 0, err
		}
	}
	return id, nil
}

func commitmentsQuery(where string) string {
	return `SELECT p.id, p.offer_id, p.devices, p.start_at, p.end_at, p.gang, p.nodes
		FROM reservation_pieces p JOIN reservations r ON r.id = p.reservation_id
		WHERE ` + where + ` AND ` + holdsCapacity + ` ORDER BY p.offer_id, p.start_at, p.id`
}

// queryCommitments returns the pieces matching where (on reservation_pieces
// aliased p, with args) that hold capacity at now, as commitments whose ID
// is the piece's id, with their nodes, by offer and start.
func queryCommitments(ctx context.Context, q querier, now time.Time, where string, args ...any) ([]market.Commitment, error) {
	args = append(args[:len(args):len(args)], holdsCapacityArgs(now)...)
	rows, err := q.QueryContext(ctx, commitmentsQuery(where), args...)
	if err != nil {
		return nil, err
	}
	var cs []market.Commitment
	for rows.Next() {
		var c market.Commitment
		var start, end int64
		var nodes string
		if err := rows.Scan(&c.ID, &c.OfferID, &c.Devices, &start, &end, &c.Gang, &nodes); err != nil {
			rows.Close()
			return nil, err
		}
		var err error
		if c.Nodes, err = parseNodes(nodes); err != nil {
			rows.Close()
			return nil, fmt.Errorf("piece %d: %w", c.ID, err)
		}
		c.Start, c.End = fromUnix(start), fromUnix(end)
		cs = append(cs, c)
	}
	return cs, closeRows(rows)
}

// FindReservation returns any reservation with its pieces. Callers decide
// who may see it; a buyer's own view uses FindBuyerReservation.
func (db *DB) FindReservation(ctx context.Context, id int64) (market.Reservation, error) {
	const op = "find reservation"
	tx, err := db.read(ctx)
	if err != nil {
		return market.Reservation{}, fail(op, err, "")
	}
	defer tx.Rollback()

	r, err := getReservation(ctx, tx, id)
	if err != nil {
		return market.Reservation{}, fail(op, err, "")
	}
	return r, nil
}

// FindBuyerReservation returns a reservation of the buyer with its pieces;
// another buyer's reservation is not found.
func (db *DB) FindBuyerReservation(ctx context.Context, buyerID, id int64) (market.Reservation, error) {
	const op = "find buyer reservation"
	tx, err := db.read(ctx)
	if err != nil {
		return market.Reservation{}, fail(op, err, "")
	}
	defer tx.Rollback()

	r, err := getBuyerReservation(ctx, tx, buyerID, id)
	if err != nil {
		return market.Reservation{}, fail(op, err, "")
	}
	return r, nil
}

// ListBuyerReservations returns all reservations of the buyer, newest
// first, each with its pieces, whatever their state.
func (db *DB) ListBuyerReservations(ctx context.Context, buyerID int64) ([]market.Reservation, error) {
	const op = "list buyer reservations"
	tx, err := db.read(ctx)
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer tx.Rollback()

	rs, err := queryReservations(ctx, tx, `SELECT `+reservationColumns+` FROM reservations r
		WHERE r.buyer_id = ? ORDER BY r.created_at DESC, r.id DESC`, buyerID)
	if err != nil {
		return nil, fail(op, err, "")
	}
	return rs, nil
}

// ListProviderPieces returns every piece booked on the provider's offers,
// in any state (the caller picks upcoming, active or past by State),
// soonest start first, with the offer's title and the buyer's name.
func (db *DB) ListProviderPieces(ctx context.Context, providerID int64) ([]ProviderPiece, error) {
	const op = "list provider pieces"
	tx, err := db.read(ctx)
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer tx.Rollback()

	// Through the provider's offers (offers_provider, then
	// reservation_pieces_offer): a piece's provider is its offer's, and an
	// index on the pieces' provider would be one more write per booking.
	rows, err := tx.QueryContext(ctx, `SELECT `+pieceColumns+`, p.reservation_id, r.state, o.title, u.display_name,
		COALESCE(r.resale_of, 0), COALESCE(r.resold_at, 0)
		FROM offers o
		JOIN reservation_pieces p ON p.offer_id = o.id
		JOIN reservations r ON r.id = p.reservation_id
		JOIN users u ON u.id = r.buyer_id
		WHERE o.provider_id = ? ORDER BY p.start_at, p.id`, providerID)
	if err != nil {
		return nil, fail(op, err, "")
	}
	var out []ProviderPiece
	for rows.Next() {
		var pp ProviderPiece
		var state string
		var resold int64
		p, err := scanPiece(rows, &pp.ReservationID, &state, &pp.OfferTitle, &pp.BuyerName, &pp.ResaleOf, &resold)
		if err != nil {
			rows.Close()
			return nil, fail(op, err, "")
		}
		pp.Piece, pp.State = p, market.ReservationState(state)
		if resold != 0 {
			pp.ResoldAt = fromUnix(resold)
		}
		out = append(out, pp)
	}
	if err := closeRows(rows); err != nil {
		return nil, fail(op, err, "")
	}
	return out, nil
}

// ListOfferCommitments returns the pieces on the offer that hold capacity
// at now and have not ended by now (confirmed, active, or held with an
// unexpired hold), soonest start first, for a utilisation timeline. Each
// commitment's ID is the piece's id.
func (db *DB) ListOfferCommitments(ctx context.Context, offerID int64, now time.Time) ([]market.Commitment, error) {
	const op = "list offer commitments"
	tx, err := db.read(ctx)
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer tx.Rollback()

	cs, err := queryCommitments(ctx, tx, now, `p.offer_id = ? AND p.end_at > ?`, offerID, unix(now))
	if err != nil {
		return nil, fail(op, err, "")
	}
	return cs, nil
}

// ListAllCommitments returns, for every offer, the pieces that hold
// capacity at now and have not ended by now, by offer and start, for
// building the matcher's index. Each commitment's ID is the piece's id.
func (db *DB) ListAllCommitments(ctx context.Context, now time.Time) ([]market.Commitment, error) {
	const op = "list all commitments"
	tx, err := db.read(ctx)
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer tx.Rollback()

	cs, err := queryCommitments(ctx, tx, now, `p.end_at > ?`, unix(now))
	if err != nil {
		return nil, fail(op, err, "")
	}
	return cs, nil
}

// setState moves reservation r to state at now, in the row and in r.
func setState(ctx context.Context, tx *sql.Tx, r *market.Reservation, state market.ReservationState, now time.Time) error {
	if _, err := tx.ExecContext(ctx, `UPDATE reservations SET state = ?, cancel_fee_cents = ?, updated_at = ? WHERE id = ?`,
		string(state), int64(r.CancelFeeCents), unix(now), r.ID); err != nil {
		return err
	}
	r.State, r.UpdatedAt = state, truncate(now)
	return nil
}

// ConfirmReservation records that a held reservation has been paid: held
// becomes confirmed. A hold that expired at or before now is a conflict
// (its devices may have been booked since; the caller refunds) and is left
// for ExpireHolds to mark. Confirming a reservation that is already
// confirmed, or has moved on from confirmed (active, completed, settled),
// returns it unchanged without error, so a repeated payment notification
// is harmless; a cancelled or expired one is a conflict.
func (db *DB) ConfirmReservation(ctx context.Context, id int64, now time.Time) (market.Reservation, error) {
	const op = "confirm reservation"
	tx, err := db.begin(ctx)
	if err != nil {
		return market.Reservation{}, fail(op, err, "")
	}
	defer tx.Rollback()

	r, err := getReservation(ctx, tx, id)
	if err != nil {
		return market.Reservation{}, fail(op, err, "")
	}
	switch r.State {
	case market.ReservationConfirmed, market.ReservationActive, market.ReservationCompleted, market.ReservationSettled:
		return r, nil
	case market.ReservationHeld:
		if !now.Before(r.HoldExpiresAt) {
			return market.Reservation{}, conflict(msgHoldExpired)
		}
	case market.ReservationExpired:
		return market.Reservation{}, conflict(msgHoldExpired)
	default:
		return market.Reservation{}, conflict(fmt.Sprintf("%s reservation cannot be confirmed.", r.State.LabelWithArticle()))
	}
	if err := setState(ctx, tx, &r, market.ReservationConfirmed, now); err != nil {
		return market.Reservation{}, fail(op, err, "")
	}
	if err := tx.Commit(); err != nil {
		return market.Reservation{}, fail(op, err, "")
	}
	return r, nil
}

// CancelReservation cancels a reservation of the buyer at now, keeping the
// fee market.CancellationFee sets (nothing for an unpaid hold). Another
// buyer's reservation is not found; one that has started, ended or was
// already cancelled or expired is a conflict.
//
// A paid reservation is settled in the same transaction
// (market.CancellationStatement with the platform fee feeBP): the buyer's
// refund of what was paid less the fee and each provider's payout of their
// share of the fee become settlement steps that the retrier carries out
// through the processor, so a crash after the cancellation loses nothing.
// The providers are told.
func (db *DB) CancelReservation(ctx context.Context, buyerID, id int64, feeBP int, now time.Time) (market.Reservation, error) {
	const op = "cancel reservation"
	tx, err := db.begin(ctx)
	if err != nil {
		return market.Reservation{}, fail(op, err, "")
	}
	defer tx.Rollback()

	r, err := getBuyerReservation(ctx, tx, buyerID, id)
	if err != nil {
		return market.Reservation{}, fail(op, err, "")
	}
	if !market.CanTransition(r.State, market.ReservationCancelled) {
		return market.Reservation{}, conflict(fmt.Sprintf("%s reservation cannot be cancelled.", r.State.LabelWithArticle()))
	}
	if err := market.ResaleLocked(r); err != nil {
		return market.Reservation{}, fail(op, err, "")
	}
	fee, err := market.CancellationFee(r, now)
	if err != nil {
		return market.Reservation{}, fail(op, err, "")
	}
	pay, err := getPayment(ctx, tx, r.ID)
	paid := err == nil && pay.Status == PaymentPaid
	if err != nil && market.ErrorCode(err) != market.CodeNotFound {
		return market.Reservation{}, fail(op, err, "")
	}
	var st market.Statement
	if paid {
		if st, err = market.CancellationStatement(r, now, feeBP); err != nil {
			return market.Reservation{}, fail(op, err, "")
		}
	}
	r.CancelFeeCents = fee
	if err := setState(ctx, tx, &r, market.ReservationCancelled, now); err != nil {
		return market.Reservation{}, fail(op, err, "")
	}
	buyerMsg := market.Notice{Kind: market.NoticeCancelledUnpaid, Params: market.NoticeParams{Reservation: r.ID}}
	if paid {
		buyerMsg = market.Notice{Kind: market.NoticeCancelledPaid, Params: market.NoticeParams{Reservation: r.ID, Refund: st.Refund, Paid: st.Paid,
			Fee: st.Paid - st.Refund}}
	}
	if err := insertNotification(ctx, tx, Notification{UserID: r.BuyerID, Kind: NotifyBookingCancelled, CreatedAt: now,
		URL: fmt.Sprintf("/reservations/%d", r.ID), Notice: buyerMsg}); err != nil {
		return market.Reservation{}, fail(op, err, "")
	}
	if paid {
		if err := insertSettlement(ctx, tx, st, now); err != nil {
			return market.Reservation{}, fail(op, err, "")
		}
		for _, pp := range st.Payouts() {
			msg := market.Notice{Kind: market.NoticeCancelledFree, Params: market.NoticeParams{Reservation: r.ID}}
			if pp.Kept > 0 {
				msg = market.Notice{Kind: market.NoticeCancelledFeeKept, Params: market.NoticeParams{Reservation: r.ID, Kept: pp.Kept, Payout: pp.Payout}}
			}
			if err := insertNotification(ctx, tx, Notification{UserID: pp.ProviderID, Kind: NotifyBookingCancelled, CreatedAt: now,
				URL: fmt.Sprintf("/provider/bookings/%d", r.ID), Notice: msg}); err != nil {
				return market.Reservation{}, fail(op, err, "")
			}
		}
	}
	if err := tx.Commit(); err != nil {
		return market.Reservation{}, fail(op, err, "")
	}
	return r, nil
}

// ExpireHolds marks every held reservation whose hold expired at or before
// now as expired and returns those it changed, with their pieces, by id.
// Capacity does not wait for this sweep (see holdsCapacity); it keeps the
// recorded state, the buyer's dashboard and the matcher's index in line.
func (db *DB) ExpireHolds(ctx context.Context, now time.Time) ([]market.Reservation, error) {
	const op = "expire holds"
	tx, err := db.begin(ctx)
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer tx.Rollback()

	rs, err := transition(ctx, tx, `r.state = ? AND r.hold_expires_at <= ?`,
		[]any{string(market.ReservationHeld), unix(now)}, market.ReservationExpired, now)
	if err != nil {
		return nil, fail(op, err, "")
	}
	for _, r := range rs {
		if err := insertNotification(ctx, tx, Notification{UserID: r.BuyerID, Kind: NotifyBookingExpired, CreatedAt: now,
			URL:    fmt.Sprintf("/reservations/%d", r.ID),
			Notice: market.Notice{Kind: market.NoticeBookingExpired, Params: market.NoticeParams{Reservation: r.ID, Until: r.HoldExpiresAt}}}); err != nil {
			return nil, fail(op, err, "")
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, fail(op, err, "")
	}
	return rs, nil
}

// AdvanceReservations moves reservations along with time: confirmed ones
// whose earliest piece has started by now become active, and confirmed or
// active ones whose latest piece has ended by now become completed (a
// confirmed one that has already ended goes straight to completed). It
// returns those it changed, with their pieces and new state, by id.
func (db *DB) AdvanceReservations(ctx context.Context, now time.Time) ([]market.Reservation, error) {
	const op = "advance reservations"
	tx, err := db.begin(ctx)
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer tx.Rollback()

	completed, err := transition(ctx, tx, `r.state IN (?, ?) AND r.ends_at <= ?`,
		[]any{string(market.ReservationConfirmed), string(market.ReservationActive), unix(now)},
		market.ReservationCompleted, now)
	if err != nil {
		return nil, fail(op, err, "")
	}
	active, err := transition(ctx, tx, `r.state = ? AND r.starts_at <= ?`,
		[]any{string(market.ReservationConfirmed), unix(now)}, market.ReservationActive, now)
	if err != nil {
		return nil, fail(op, err, "")
	}
	for _, r := range active {
		if !r.ResoldAt.IsZero() && !r.ResoldAt.After(r.Start()) {
			continue // sold whole before it started: nothing to connect to
		}
		if err := insertNotification(ctx, tx, Notification{UserID: r.BuyerID, Kind: NotifyReservationStarting, CreatedAt: now,
			URL:    fmt.Sprintf("/reservations/%d", r.ID),
			Notice: market.Notice{Kind: market.NoticeReservationStarting, Params: market.NoticeParams{Reservation: r.ID, Start: r.Start(), End: r.End()}}}); err != nil {
			return nil, fail(op, err, "")
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, fail(op, err, "")
	}
	rs := append(completed, active...)
	sort.Slice(rs, func(i, j int) bool { return rs[i].ID < rs[j].ID })
	return rs, nil
}

// transition moves every reservation matching where (on reservations
// aliased r) to state at now and returns them, with pieces, by id.
func transition(ctx context.Context, tx *sql.Tx, where string, args []any, state market.ReservationState, now time.Time) ([]market.Reservation, error) {
	rs, err := queryReservations(ctx, tx, `SELECT `+reservationColumns+` FROM reservations r WHERE `+where+` ORDER BY r.id`, args...)
	if err != nil || len(rs) == 0 {
		return nil, err
	}
	updateArgs := append([]any{string(state), unix(now)}, args...)
	if _, err := tx.ExecContext(ctx, `UPDATE reservations SET state = ?, updated_at = ? WHERE id IN (
		SELECT r.id FROM reservations r WHERE `+where+`)`, updateArgs...); err != nil {
		return nil, err
	}
	for i := range rs {
		rs[i].State, rs[i].UpdatedAt = state, truncate(now)
	}
	return rs, nil
}
