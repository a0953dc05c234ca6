package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// Notification kinds of standing orders, to the buyer.
const (
	NotifyOrderFilled    = "order_filled"
	NotifyOrderExpired   = "order_expired"
	NotifyOrderCancelled = "order_cancelled"
	NotifyOrderNote      = "order_note" // after a fill: a declined payment
)

// StandingOrderRow is a standing order with the state of its fill's
// reservation (empty until filled), so a fill left unpaid shows as lapsed.
type StandingOrderRow struct {
	market.StandingOrder
	ReservationState market.ReservationState
}

// Lapsed reports whether the order filled and its hold ended unpaid.
func (r StandingOrderRow) Lapsed() bool {
	return r.State == market.OrderFilled && r.ReservationState == market.ReservationExpired
}

const standingOrderColumns = `s.id, s.buyer_id, s.request_json, s.limit_kind, s.limit_cents, s.fill_by, s.on_fill,
	s.state, COALESCE(s.reservation_id, 0), s.note, s.created_at, s.updated_at, COALESCE(r.state, '')`

const standingOrderFrom = ` FROM standing_orders s LEFT JOIN reservations r ON r.id = s.reservation_id `

func scanStandingOrder(s scanner) (StandingOrderRow, error) {
	var o StandingOrderRow
	var kind, onFill, state, resState string
	var limit, fillBy, created, updated int64
	if err := s.Scan(&o.ID, &o.BuyerID, &o.RequestJSON, &kind, &limit, &fillBy, &onFill, &state,
		&o.ReservationID, &o.Note, &created, &updated, &resState); err != nil {
		return StandingOrderRow{}, err
	}
	req, err := market.DecodeRequestJSON([]byte(o.RequestJSON))
	if err != nil {
		return StandingOrderRow{}, fmt.Errorf("standing order %d: request: %w", o.ID, err)
	}
	o.Request = req
	o.LimitKind, o.LimitCents = market.OrderLimitKind(kind), market.Cents(limit)
	o.FillBy, o.OnFill, o.State = fromUnix(fillBy), market.OnFill(onFill), market.StandingOrderState(state)
	o.CreatedAt, o.UpdatedAt = fromUnix(created), fromUnix(updated)
	o.ReservationState = market.ReservationState(resState)
	return o, nil
}

func queryStandingOrders(ctx context.Context, q querier, where string, args ...any) ([]StandingOrderRow, error) {
	rows, err := q.QueryContext(ctx, `SELECT `+standingOrderColumns+standingOrderFrom+where, args...)
	if err != nil {
		return nil, err
	}
	var out []StandingOrderRow
	for rows.Next() {
		o, err := scanStandingOrder(rows)
		if err != nil {
			rows.Close()
			return nil, err
		}
		out = append(out, o)
	}
	return out, closeRows(rows)
}

// CreateStandingOrder stores a new open order for o.BuyerID, created at
// now, after market.ValidateStandingOrder and the anti-speculation rules
// (checked in the same transaction, so two orders placed at once cannot
// both pass): at most market.MaxOpenStandingOrders open orders, and none
// while the lapse rule blocks the buyer (market.StandingOrdersBlockedUntil
// over the times their fills' holds ended unpaid).
func (db *DB) CreateStandingOrder(ctx context.Context, o market.StandingOrder, now time.Time) (market.StandingOrder, error) {
	const op = "create standing order"
	if err := market.ValidateStandingOrder(&o, now); err != nil {
		return market.StandingOrder{}, err
	}
	doc, err := market.EncodeRequestJSON(o.Request)
	if err != nil {
		return market.StandingOrder{}, err
	}
	o.RequestJSON, o.State, o.ReservationID, o.Note = string(doc), market.OrderOpen, 0, ""
	o.FillBy, o.CreatedAt, o.UpdatedAt = truncate(o.FillBy), truncate(now), truncate(now)
	tx, err := db.begin(ctx)
	if err != nil {
		return market.StandingOrder{}, fail(op, err, "")
	}
	defer tx.Rollback()
	if err := mayAct(ctx, tx, o.BuyerID); err != nil {
		return market.StandingOrder{}, fail(op, err, "")
	}
	var open int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM standing_orders WHERE buyer_id = ? AND state = ?`,
		o.BuyerID, string(market.OrderOpen)).Scan(&open); err != nil {
		return market.StandingOrder{}, fail(op, err, "")
	}
	if open >= market.MaxOpenStandingOrders {
		return market.StandingOrder{}, conflict(fmt.Sprintf(
			"You already have %d open standing orders, the most allowed. Cancel one before placing another.", open))
	}
	lapses, err := buyerLapses(ctx, tx, o.BuyerID)
	if err != nil {
		return market.StandingOrder{}, fail(op, err, "")
	}
	if until, blocked := market.StandingOrdersBlockedUntil(lapses, now); blocked {
		return market.StandingOrder{}, conflict(fmt.Sprintf(
			"%d of your filled orders or won spot hours lapsed unpaid within %d days, so you cannot place standing orders until %s.",
			market.LapsesBeforeBlock, int(market.LapseWindow/(24*time.Hour)), market.FormatTime(until)))
	}
	if err := tx.QueryRowContext(ctx, `INSERT INTO standing_orders (buyer_id, request_json, limit_kind, limit_cents,
			fill_by, on_fill, state, note, created_at, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, '', ?, ?) RETURNING id`,
		o.BuyerID, o.RequestJSON, string(o.LimitKind), int64(o.LimitCents), unix(o.FillBy), string(o.OnFill),
		string(o.State), unix(o.CreatedAt), unix(o.UpdatedAt)).Scan(&o.ID); err != nil {
		return market.StandingOrder{}, fail(op, err, "")
	}
	if !o.Request.Runtime.IsZero() {
		rt, err := market.EncodeRuntimeStored(o.Request.Runtime)
		if err != nil {
			return market.StandingOrder{}, fail(op, err, "")
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO standing_order_runtimes (order_id, runtime_json) VALUES (?, ?)`, o.ID, string(rt)); err != nil {
			return market.StandingOrder{}, fail(op, err, "")
		}
	}
	return o, fail(op, tx.Commit(), "")
}

// standingOrderLapses returns when the buyer's fills lapsed: the hold
// expiry of each fill's reservation that expired unpaid.
func standingOrderLapses(ctx context.Context, q querier, buyerID int64) ([]time.Time, error) {
	rows, err := q.QueryContext(ctx, `SELECT r.hold_expires_at FROM standing_orders s
		JOIN reservations r ON r.id = s.reservation_id
		WHERE s.buyer_id = ? AND s.state = ? AND r.state = ?`,
		buyerID, string(market.OrderFilled), string(market.ReservationExpired))
	if err != nil {
		return nil, err
	}
	var out []time.Time
	for rows.Next() {
		var at int64
		if err := rows.Scan(&at); err != nil {
			rows.Close()
			return nil, err
		}
		out = append(out, fromUnix(at))
	}
	return out, closeRows(rows)
}

// StandingOrderBlock says until when the lapse rule blocks the buyer's new
// standing orders, and whether it does at now.
func (db *DB) StandingOrderBlock(ctx context.Context, buyerID int64, now time.Time) (time.Time, bool, error) {
	lapses, err := buyerLapses(ctx, db.reader, buyerID)
	if err != nil {
		return time.Time{}, false, fail("standing order block", err, "")
	}
	until, blocked := market.StandingOrdersBlockedUntil(lapses, now)
	return until, blocked, nil
}

// ListStandingOrders returns the buyer's standing orders, newest first.
func (db *DB) ListStandingOrders(ctx context.Context, buyerID int64) ([]StandingOrderRow, error) {
	out, err := queryStandingOrders(ctx, db.reader, `WHERE s.buyer_id = ? ORDER BY s.created_at DESC, s.id DESC`, buyerID)
	if err != nil {
		return nil, fail("list standing orders", err, "")
	}
	return out, nil
}

// FindStandingOrder returns the buyer's own standing order id; another
// buyer's is not found.
func (db *DB) FindStandingOrder(ctx context.Context, buyerID, id int64) (StandingOrderRow, error) {
	out, err := queryStandingOrders(ctx, db.reader, `WHERE s.id = ? AND s.buyer_id = ?`, id, buyerID)
	if err != nil {
		return StandingOrderRow{}, fail("find standing order", err, "")
	}
	if len(out) == 0 {
		return StandingOrderRow{}, notFound("No such standing order.")
	}
	return out[0], nil
}

// ListOpenStandingOrders returns every open order whose fill-by date is
// after now, in fill priority (market.OrderBefore).
func (db *DB) ListOpenStandingOrders(ctx context.Context, now time.Time) ([]market.StandingOrder, error) {
	rows, err := queryStandingOrders(ctx, db.reader, `WHERE s.state = ? AND s.fill_by > ?`, string(market.OrderOpen), unix(now))
	if err != nil {
		return nil, fail("list open standing orders", err, "")
	}
	out := make([]market.StandingOrder, len(rows))
	for i, r := range rows {
		out[i] = r.StandingOrder
	}
	market.SortByPriority(out)
	return out, nil
}

// CancelStandingOrder cancels the buyer's own open order and notifies them.
// Another buyer's order is not found; one no longer open is a conflict.
func (db *DB) CancelStandingOrder(ctx context.Context, buyerID, id int64, now time.Time) (market.StandingOrder, error) {
	const op = "cancel standing order"
	tx, err := db.begin(ctx)
	if err != nil {
		return market.StandingOrder{}, fail(op, err, "")
	}
	defer tx.Rollback()
	rows, err := queryStandingOrders(ctx, tx, `WHERE s.id = ? AND s.buyer_id = ?`, id, buyerID)
	if err != nil {
		return market.StandingOrder{}, fail(op, err, "")
	}
	if len(rows) == 0 {
		return market.StandingOrder{}, notFound("No such standing order.")
	}
	o := rows[0].StandingOrder
	if o.State != market.OrderOpen {
		return market.StandingOrder{}, conflict(fmt.Sprintf("This standing order is %s and can no longer be cancelled.", o.State))
	}
	if err := setOrderState(ctx, tx, o.ID, market.OrderCancelled, 0, now); err != nil {
		return market.StandingOrder{}, fail(op, err, "")
	}
	o.State, o.UpdatedAt = market.OrderCancelled, truncate(now)
	if err := insertNotification(ctx, tx, Notification{UserID: o.BuyerID, Kind: NotifyOrderCancelled, CreatedAt: now,
		URL: "/orders", Notice: market.Notice{Kind: market.NoticeOrderCancelled, Params: market.NoticeParams{Order: o.ID, Limit: o.LimitCents, LimitKind: o.LimitKind}}}); err != nil {
		return market.StandingOrder{}, fail(op, err, "")
	}
	return o, fail(op, tx.Commit(), "")
}

// errOrderNotOpen is returned inside a transaction by setOrderState when
// the order left the open state meanwhile.
var errOrderNotOpen = errors.New("standing order no longer open")

// setOrderState moves an open order to state (with its reservation, when
// filled) by a conditional update: only an order still open changes, so
// two replicas cannot both fill, or fill and expire, the same order.
func setOrderState(ctx context.Context, tx querier, id int64, state market.StandingOrderState, reservationID int64, now time.Time) error {
	res, err := tx.ExecContext(ctx, `UPDATE standing_orders SET state = ?, reservation_id = NULLIF(?, 0), updated_at = ?
		WHERE id = ? AND state = ?`, string(state), reservationID, unix(now), id, string(market.OrderOpen))
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n != 1 {
		return errOrderNotOpen
	}
	return nil
}

// ExpireStandingOrders marks every open order whose fill-by date is at or
// before now expired, notifies each buyer, and returns them.
func (db *DB) ExpireStandingOrders(ctx context.Context, now time.Time) ([]market.StandingOrder, error) {
	const op = "expire standing orders"
	tx, err := db.begin(ctx)
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer tx.Rollback()
	rows, err := queryStandingOrders(ctx, tx, `WHERE s.state = ? AND s.fill_by <= ?`, string(market.OrderOpen), unix(now))
	if err != nil {
		return nil, fail(op, err, "")
	}
	var out []market.StandingOrder
	for _, r := range rows {
		o := r.StandingOrder
		if err := setOrderState(ctx, tx, o.ID, market.OrderExpired, 0, now); err != nil {
			return nil, fail(op, err, "")
		}
		o.State, o.UpdatedAt = market.OrderExpired, truncate(now)
		if err := insertNotification(ctx, tx, Notification{UserID: o.BuyerID, Kind: NotifyOrderExpired, CreatedAt: now,
			URL: "/orders", Notice: market.Notice{Kind: market.NoticeOrderExpired, Params: market.NoticeParams{Order: o.ID, Limit: o.LimitCents, LimitKind: o.LimitKind,
				Until: o.FillBy}}}); err != nil {
			return nil, fail(op, err, "")
		}
		out = append(out, o)
	}
	return out, fail(op, tx.Commit(), "")
}

// FillStandingOrder books pieces for the open order orderID at now, held
// for hold, in one transaction: the order is re-checked open and before
// its fill-by date, the reservation is booked exactly as CreateReservation
// books a quote (holdReservation: the buyer's unpaid holds counted, the
// capacity re-checked on every offer, the pieces placed), the order moves
// to filled with its reservation by a conditional update, and the buyer is
// notified. An order no longer open or past its fill-by date is a
// conflict; so is capacity taken meanwhile (nothing is stored then).
func (db *DB) FillStandingOrder(ctx context.Context, orderID int64, pieces []market.ReservationPiece, now time.Time, hold time.Duration) (market.StandingOrder, market.Reservation, error) {
	const op = "fill standing order"
	if hold <= 0 {
		return market.StandingOrder{}, market.Reservation{}, fmt.Errorf("store: %s: hold %s must be positive", op, hold)
	}
	if len(pieces) == 0 {
		return market.StandingOrder{}, market.Reservation{}, invalid("A fill needs a quote.")
	}
	var o market.StandingOrder
	var r market.Reservation
	// The whole lock (bookingLocks{}): the order's buyer is known only
	// once it is read, and a fill may record a charge.
	err := db.book(ctx, bookingLocks{}, func(ctx context.Context, tx preparedTx) error {
		rows, err := queryStandingOrders(ctx, tx, `WHERE s.id = ?`, orderID)
		if err != nil {
			return err
		}
		if len(rows) == 0 {
			return notFound("No such standing order.")
		}
		o = rows[0].StandingOrder
		if !o.Fillable(now) {
			return conflict("This standing order is no longer open.")
		}
		var offerIDs []int64
		var byOffer map[int64][]int
		r, offerIDs, byOffer = newHold(o.BuyerID, pieces, now, hold)
		r.RequestJSON = o.RequestJSON
		if err := holdReservation(ctx, tx, &r, offerIDs, byOffer, now); err != nil {
			return err
		}
		if err := fillRuntime(ctx, tx, o.ID, r.ID); err != nil {
			return err
		}
		if err := setOrderState(ctx, tx, o.ID, market.OrderFilled, r.ID, now); errors.Is(err, errOrderNotOpen) {
			return conflict("This standing order is no longer open.")
		} else if err != nil {
			return err
		}
		o.State, o.ReservationID, o.UpdatedAt = market.OrderFilled, r.ID, truncate(now)
		if o.OnFill == market.FillPay {
			// The charge is recorded with the hold it pays (a crash before
			// it is made leaves it for the retrier); without a saved card
			// left the fill stays held for the buyer to pay by hand. A
			// fill being charged says nothing yet: its payment's arrival
			// tells the buyer it was booked and paid (moneyMoved), a
			// decline that it is held (the order's note).
			_, err := insertChargeIntent(ctx, tx.Tx, market.ChargeIntent{Purpose: market.PurposeReservation, BuyerID: o.BuyerID,
				ReservationID: r.ID, Amount: r.AmountCents}, now)
			switch {
			case err == nil:
				return nil
			case market.ErrorCode(err) != market.CodeNotFound:
				return err
			}
		}
		return insertNotification(ctx, tx, Notification{UserID: o.BuyerID, Kind: NotifyOrderFilled, CreatedAt: now,
			URL: fmt.Sprintf("/reservations/%d", r.ID),
			Notice: market.Notice{Kind: market.NoticeOrderFilledHeld, Params: market.NoticeParams{Order: o.ID, Reservation: r.ID, Devices: r.Devices(), Start: r.Start(), End: r.End(),
				Amount: r.AmountCents, Until: r.HoldExpiresAt}}})
	})
	if err != nil {
		return market.StandingOrder{}, market.Reservation{}, fail(op, err, "")
	}
	return o, r, nil
}

// fillRuntime keeps the order's runtime, secrets included, with the
// reservation of its fill.
func fillRuntime(ctx context.Context, q querier, orderID, reservationID int64) error {
	var doc string
	err := q.QueryRowContext(ctx, `SELECT runtime_json FROM standing_order_runtimes WHERE order_id = ?`, orderID).Scan(&doc)
	if errors.Is(err, sql.ErrNoRows) {
		return nil
	}
	if err != nil {
		return err
	}
	rt, err := market.DecodeRuntimeStored([]byte(doc))
	if err != nil {
		return err
	}
	return insertReservationRuntime(ctx, q, reservationID, rt)
}

// NoteStandingOrder records what the buyer must know after a fill (a
// declined payment) on their order and notifies them, in one transaction.
func (db *DB) NoteStandingOrder(ctx context.Context, id int64, note, url string, now time.Time) error {
	const op = "note standing order"
	tx, err := db.begin(ctx)
	if err != nil {
		return fail(op, err, "")
	}
	defer tx.Rollback()
	var buyerID int64
	err = tx.QueryRowContext(ctx, `UPDATE standing_orders SET note = ?, updated_at = ? WHERE id = ? RETURNING buyer_id`,
		note, unix(now), id).Scan(&buyerID)
	if errors.Is(err, sql.ErrNoRows) {
		return notFound("No such standing order.")
	}
	if err != nil {
		return fail(op, err, "")
	}
	if err := insertNotification(ctx, tx, Notification{UserID: buyerID, Kind: NotifyOrderNote, CreatedAt: now, URL: url,
		Notice: market.Notice{Kind: market.NoticeOrderNote, Params: market.NoticeParams{Order: id, Text: note}}}); err != nil {
		return fail(op, err, "")
	}
	return fail(op, tx.Commit(), "")
}
