package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// Metered rentals and prepaid balances (docs/metered.md). The balance
// ledger (balance_entries) holds every movement of a buyer's balance; a
// metered rental is a reservation of one piece, active from its start,
// whose end rolls forward notice minutes ahead while it runs.

// Person-safe messages of metered rentals.
const (
	msgNotMetered        = "This offer does not allow metered rentals."
	msgBalanceTooLow     = "Your balance does not cover the first %d minutes of this rental (%s). Top up first."
	msgMeteredNotFound   = "That metered rental could not be found."
	msgMeteredStopped    = "This metered rental has already stopped."
	msgTopUpNotFound     = "That top-up could not be found."
	msgRefundWhileRental = "Stop your metered rentals before asking for a refund of your balance."
	msgNothingToRefund   = "There is no unused balance to refund."
)

// Notification kind of metered rentals: the balance running low, a rental
// stopped (by the balance, the provider's notice or the buyer's maximum).
const NotifyMeteredRental = "metered_rental"

// MeteredTerms is an offer's opt-in to metered rentals.
type MeteredTerms struct {
	OfferID int64
	// NoticeMinutes is the notice to stop a rental for a booking of the
	// same devices (0 stored means market.MeteredDefaultNoticeMinutes;
	// this is the effective figure).
	NoticeMinutes int
}

// SetOfferMetered lets the provider's offer be rented metered (allow) with
// the given notice, or stops allowing it (rentals under way go on).
func (db *DB) SetOfferMetered(ctx context.Context, providerID, offerID int64, allow bool, noticeMinutes int, now time.Time) error {
	const op = "set offer metered"
	if err := market.ValidateMeteredNotice(noticeMinutes); err != nil {
		return err
	}
	tx, err := db.begin(ctx)
	if err != nil {
		return fail(op, err, "")
	}
	defer tx.Rollback()
	if err := checkOwnOffer(ctx, tx, providerID, offerID); err != nil {
		return fail(op, err, "")
	}
	if allow {
		_, err = tx.ExecContext(ctx, `INSERT INTO offer_metered (offer_id, notice_minutes, updated_at) VALUES (?, ?, ?)
			ON CONFLICT (offer_id) DO UPDATE SET notice_minutes = excluded.notice_minutes, updated_at = excluded.updated_at`,
			offerID, noticeMinutes, unix(now))
	} else {
		_, err = tx.ExecContext(ctx, `DELETE FROM offer_metered WHERE offer_id = ?`, offerID)
	}
	if err != nil {
		return fail(op, err, "")
	}
	return fail(op, tx.Commit(), "")
}

func getMeteredTerms(ctx context.Context, q querier, offerID int64) (MeteredTerms, error) {
	t := MeteredTerms{OfferID: offerID}
	err := q.QueryRowContext(ctx, `SELECT notice_minutes FROM offer_metered WHERE offer_id = ?`, offerID).Scan(&t.NoticeMinutes)
	if errors.Is(err, sql.ErrNoRows) {
		return MeteredTerms{}, notFound(msgNotMetered)
	}
	if t.NoticeMinutes == 0 {
		t.NoticeMinutes = market.MeteredDefaultNoticeMinutes
	}
	return t, err
}

// MeteredOfferIDs returns which of the offers allow metered rentals, in
// one query (the quote cards' "Start now, metered").
func (db *DB) MeteredOfferIDs(ctx context.Context, offerIDs []int64) (map[int64]bool, error) {
	out := map[int64]bool{}
	if len(offerIDs) == 0 {
		return out, nil
	}
	args := make([]any, len(offerIDs))
	for i, id := range offerIDs {
		args[i] = id
	}
	ids, err := collect(ctx, db.reader, func(s scanner) (int64, error) {
		var id int64
		return id, s.Scan(&id)
	}, `SELECT offer_id FROM offer_metered WHERE offer_id IN (`+placeholders(len(args))+`)`, args...)
	for _, id := range ids {
		out[id] = true
	}
	return out, fail("list metered offers", err, "")
}

// FindOfferMetered returns the offer's metered terms; an offer that does
// not allow metered rentals is not found.
func (db *DB) FindOfferMetered(ctx context.Context, offerID int64) (MeteredTerms, error) {
	t, err := getMeteredTerms(ctx, db.reader, offerID)
	return t, fail("find offer metered", err, "")
}

// Top-up states and methods.
const (
	TopUpPending  = "pending"
	TopUpPaid     = "paid"
	TopUpFailed   = "failed"
	TopUpSaved    = "saved"    // the buyer's saved card, charged at once
	TopUpCheckout = "checkout" // a hosted payment page
)

// TopUp is a payment into a buyer's balance.
type TopUp struct {
	ID, BuyerID     int64
	Amount          market.Cents
	Method, State   string
	PaymentIntentID string
	CheckoutID      string
	Refunded        market.Cents // returned to this payment by refunds of unused balance
	LastError       string
	CreatedAt       time.Time
	UpdatedAt       time.Time
}

const topUpColumns = `id, buyer_id, amount_cents, method, state, payment_intent_id, checkout_id, refunded_cents, last_error, created_at, updated_at`

func scanTopUp(s scanner) (TopUp, error) {
	var t TopUp
	var amount, refunded, created, updated int64
	if err := s.Scan(&t.ID, &t.BuyerID, &amount, &t.Method, &t.State, &t.PaymentIntentID, &t.CheckoutID, &refunded, &t.LastError, &created, &updated); err != nil {
		return TopUp{}, err
	}
	t.Amount, t.Refunded = market.Cents(amount), market.Cents(refunded)
	t.CreatedAt, t.UpdatedAt = fromUnix(created), fromUnix(updated)
	return t, nil
}

func getTopUp(ctx context.Context, q querier, id int64) (TopUp, error) {
	t, err := scanTopUp(q.QueryRowContext(ctx, `SELECT `+topUpColumns+` FROM balance_topups WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return TopUp{}, notFound(msgTopUpNotFound)
	}
	return t, err
}

// CreateTopUp records a top-up of the buyer's balance as pending, before
// the processor is asked for the money (its key is market.TopUpKey of the
// id, so a retried call charges once).
func (db *DB) CreateTopUp(ctx context.Context, buyerID int64, amount market.Cents, method string, now time.Time) (TopUp, error) {
	const op = "create top-up"
	if err := market.ValidateTopUp(amount); err != nil {
		return TopUp{}, err
	}
	if method != TopUpSaved && method != TopUpCheckout {
		return TopUp{}, fmt.Errorf("store: %s: unknown method %q", op, method)
	}
	tx, err := db.begin(ctx)
	if err != nil {
		return TopUp{}, fail(op, err, "")
	}
	defer tx.Rollback()
	var id int64
	if err := tx.QueryRowContext(ctx, `INSERT INTO balance_topups (buyer_id, amount_cents, method, state, created_at, updated_at)
		VALUES (?, ?, ?, ?, ?, ?) RETURNING id`, buyerID, int64(amount), method, TopUpPending, unix(now), unix(now)).Scan(&id); err != nil {
		return TopUp{}, fail(op, err, "")
	}
	t, err := getTopUp(ctx, tx, id)
	if err != nil {
		return TopUp{}, fail(op, err, "")
	}
	return t, fail(op, tx.Commit(), "")
}

// SetTopUpCheckout notes the hosted checkout of a pending top-up.
func (db *DB) SetTopUpCheckout(ctx context.Context, id int64, checkoutID string, now time.Time) error {
	const op = "set top-up checkout"
	tx, err := db.begin(ctx)
	if err != nil {
		return fail(op, err, "")
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `UPDATE balance_topups SET checkout_id = ?, updated_at = ? WHERE id = ? AND state = ?`,
		checkoutID, unix(now), id, TopUpPending); err != nil {
		return fail(op, err, "")
	}
	return fail(op, tx.Commit(), "")
}

// RecordTopUpPaid records that the processor's payment paymentIntentID paid
// the top-up: the top-up entry (Dr cash, Cr the buyer's balance) under its
// key, in one transaction. Recording it again changes nothing.
func (db *DB) RecordTopUpPaid(ctx context.Context, id int64, paymentIntentID string, now time.Time) (TopUp, error) {
	const op = "record top-up paid"
	tx, err := db.begin(ctx)
	if err != nil {
		return TopUp{}, fail(op, err, "")
	}
	defer tx.Rollback()
	t, err := getTopUp(ctx, tx, id)
	if err != nil {
		return TopUp{}, fail(op, err, "")
	}
	if t.State == TopUpPaid {
		return t, nil
	}
	if _, err := tx.ExecContext(ctx, `UPDATE balance_topups SET state = ?, payment_intent_id = ?, last_error = '', updated_at = ? WHERE id = ?`,
		TopUpPaid, paymentIntentID, unix(now), id); err != nil {
		return TopUp{}, fail(op, err, "")
	}
	e := market.BalanceEntry{BuyerID: t.BuyerID, LedgerEntry: market.LedgerEntry{Kind: market.EntryTopUp, Debit: market.AccountPlatformCash,
		Credit: market.BalanceAccount(t.BuyerID), Amount: t.Amount, StripeRef: paymentIntentID, IdempotencyKey: market.TopUpKey(id), At: now}}
	if err := insertBalanceEntries(ctx, tx, e); err != nil {
		return TopUp{}, fail(op, err, "")
	}
	if t.Method != TopUpAuto { // a top-up by hand resumes a paused automatic top-up
		if _, err := tx.ExecContext(ctx, `UPDATE balance_auto_topup SET paused_reason = '', updated_at = ? WHERE buyer_id = ? AND paused_reason <> ''`,
			unix(now), t.BuyerID); err != nil {
			return TopUp{}, fail(op, err, "")
		}
	}
	t.State, t.PaymentIntentID, t.UpdatedAt = TopUpPaid, paymentIntentID, truncate(now)
	return t, fail(op, tx.Commit(), "")
}

// RecordTopUpFailed records that a pending top-up's payment was refused
// (nothing moved); msg is for the buyer.
func (db *DB) RecordTopUpFailed(ctx context.Context, id int64, msg string, now time.Time) error {
	const op = "record top-up failed"
	tx, err := db.begin(ctx)
	if err != nil {
		return fail(op, err, "")
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, `UPDATE balance_topups SET state = ?, last_error = ?, updated_at = ? WHERE id = ? AND state = ?`,
		TopUpFailed, msg, unix(now), id, TopUpPending)
	if err != nil {
		return fail(op, err, "")
	}
	if n, err := res.RowsAffected(); err != nil {
		return fail(op, err, "")
	} else if n > 0 {
		t, err := getTopUp(ctx, tx, id)
		if err != nil {
			return fail(op, err, "")
		}
		if t.Method == TopUpAuto {
			if err := pauseAutoTopUp(ctx, tx, t.BuyerID, msg, now); err != nil {
				return fail(op, err, "")
			}
		}
	}
	return fail(op, tx.Commit(), "")
}

// FindTopUp returns a buyer's top-up; another buyer's is not found.
func (db *DB) FindTopUp(ctx context.Context, buyerID, id int64) (TopUp, error) {
	t, err := getTopUp(ctx, db.reader, id)
	if err == nil && t.BuyerID != buyerID {
		err = notFound(msgTopUpNotFound)
	}
	return t, fail("find top-up", err, "")
}

// ListTopUps returns the buyer's top-ups (every buyer's with 0), oldest first.
func (db *DB) ListTopUps(ctx context.Context, buyerID int64) ([]TopUp, error) {
	q, args := `SELECT `+topUpColumns+` FROM balance_topups ORDER BY id`, []any{}
	if buyerID != 0 {
		q, args = `SELECT `+topUpColumns+` FROM balance_topups WHERE buyer_id = ? ORDER BY id`, []any{buyerID}
	}
	ts, err := collect(ctx, db.reader, scanTopUp, q, args...)
	return ts, fail("list top-ups", err, "")
}

// insertBalanceEntries appends balance entries; an entry whose key is in
// the ledger already is the same movement recorded before and is skipped.
func insertBalanceEntries(ctx context.Context, tx querier, entries ...market.BalanceEntry) error {
	for _, e := range entries {
		if e.Amount <= 0 || e.IdempotencyKey == "" || e.BuyerID == 0 {
			return fmt.Errorf("balance entry %q of %d: needs a buyer, a key and a positive amount", e.IdempotencyKey, e.Amount)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO balance_entries (buyer_id, reservation_id, kind, debit_account, credit_account,
			amount_cents, stripe_ref, idempotency_key, at) VALUES (?, NULLIF(?, 0), ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (idempotency_key) DO NOTHING`,
			e.BuyerID, e.ReservationID, e.Kind, e.Debit, e.Credit, int64(e.Amount), e.StripeRef, e.IdempotencyKey, unix(e.At)); err != nil {
			return err
		}
	}
	return nil
}

func queryBalanceEntries(ctx context.Context, q querier, where string, args ...any) ([]market.BalanceEntry, error) {
	return collect(ctx, q, func(s scanner) (market.BalanceEntry, error) {
		var e market.BalanceEntry
		var amount, at int64
		if err := s.Scan(&e.BuyerID, &e.ReservationID, &e.Kind, &e.Debit, &e.Credit, &amount, &e.StripeRef, &e.IdempotencyKey, &at); err != nil {
			return e, err
		}
		e.Amount, e.At = market.Cents(amount), fromUnix(at)
		return e, nil
	}, `SELECT buyer_id, COALESCE(reservation_id, 0), kind, debit_account, credit_account, amount_cents, stripe_ref, idempotency_key, at
		FROM balance_entries `+where+` ORDER BY id`, args...)
}

// ListBalanceEntries returns the buyer's balance statement (every buyer's
// with 0): top-ups, draws, refunds and, for the whole ledger, the payouts
// of metered earnings, in the order written.
func (db *DB) ListBalanceEntries(ctx context.Context, buyerID int64) ([]market.BalanceEntry, error) {
	const op = "list balance entries"
	tx, err := db.read(ctx)
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer tx.Rollback()
	var es []market.BalanceEntry
	if buyerID == 0 {
		es, err = queryBalanceEntries(ctx, tx, ``)
	} else {
		es, err = queryBalanceEntries(ctx, tx, `WHERE buyer_id = ?`, buyerID)
	}
	return es, fail(op, err, "")
}

// balanceOf is what the buyer's balance account holds.
func balanceOf(ctx context.Context, q querier, buyerID int64) (market.Cents, error) {
	acct := market.BalanceAccount(buyerID)
	var in, out int64
	err := q.QueryRowContext(ctx, `SELECT COALESCE(SUM(CASE WHEN credit_account = ? THEN amount_cents ELSE 0 END), 0),
		COALESCE(SUM(CASE WHEN debit_account = ? THEN amount_cents ELSE 0 END), 0) FROM balance_entries WHERE buyer_id = ?`,
		acct, acct, buyerID).Scan(&in, &out)
	return market.Cents(in - out), err
}

// FindBalance returns the buyer's balance with its top-ups, draws and
// refunds.
func (db *DB) FindBalance(ctx context.Context, buyerID int64) (market.BalanceSummary, error) {
	es, err := db.ListBalanceEntries(ctx, buyerID)
	if err != nil {
		return market.BalanceSummary{}, err
	}
	return market.SummarizeBalance(buyerID, es), nil
}

// MeteredRental is a metered rental as stored.
type MeteredRental struct {
	ReservationID, BuyerID, OfferID, ProviderID, PieceID int64
	Devices                                              int
	Price                                                market.Cents // per device-hour, frozen at start
	NoticeMinutes, MaxMinutes                            int
	ClockStart                                           time.Time // zero until the machine is usable
	StopAt                                               time.Time // zero while it runs
	StopReason                                           string
	DrawnMinutes                                         int64
	DrawnCents                                           market.Cents
	WarnedAt                                             time.Time
	Final                                                bool // the last draw is made
	Fee, Payout                                          market.Cents
	TransferRef                                          string
	CreatedAt, UpdatedAt                                 time.Time
	// PieceEnd is the end its capacity is held to now (rolling while it
	// runs; the stop once stopped).
	PieceEnd time.Time
}

// Running reports whether the rental has not stopped.
func (m MeteredRental) Running() bool { return m.StopAt.IsZero() }

const meteredColumns = `m.reservation_id, m.buyer_id, m.offer_id, m.provider_id, m.piece_id, m.devices, m.price_cents, m.notice_minutes,
	m.max_minutes, COALESCE(m.clock_start_at, 0), COALESCE(m.stop_at, 0), m.stop_reason, m.drawn_minutes, m.drawn_cents,
	COALESCE(m.warned_at, 0), m.final, m.fee_cents, m.payout_cents, m.transfer_ref, m.created_at, m.updated_at, p.end_at`

func scanMetered(s scanner) (MeteredRental, error) {
	var m MeteredRental
	var price, start, stop, drawn, warned, fee, payout, created, updated, end int64
	if err := s.Scan(&m.ReservationID, &m.BuyerID, &m.OfferID, &m.ProviderID, &m.PieceID, &m.Devices, &price, &m.NoticeMinutes,
		&m.MaxMinutes, &start, &stop, &m.StopReason, &m.DrawnMinutes, &drawn, &warned, &m.Final, &fee, &payout, &m.TransferRef,
		&created, &updated, &end); err != nil {
		return MeteredRental{}, err
	}
	opt := func(v int64) time.Time {
		if v == 0 {
			return time.Time{}
		}
		return fromUnix(v)
	}
	m.Price, m.DrawnCents, m.Fee, m.Payout = market.Cents(price), market.Cents(drawn), market.Cents(fee), market.Cents(payout)
	m.ClockStart, m.StopAt, m.WarnedAt = opt(start), opt(stop), opt(warned)
	m.CreatedAt, m.UpdatedAt, m.PieceEnd = fromUnix(created), fromUnix(updated), fromUnix(end)
	return m, nil
}

const meteredFrom = ` FROM metered_rentals m JOIN reservation_pieces p ON p.id = m.piece_id `

func getMetered(ctx context.Context, q querier, reservationID int64) (MeteredRental, error) {
	m, err := scanMetered(q.QueryRowContext(ctx, `SELECT `+meteredColumns+meteredFrom+`WHERE m.reservation_id = ?`, reservationID))
	if errors.Is(err, sql.ErrNoRows) {
		return MeteredRental{}, notFound(msgMeteredNotFound)
	}
	return m, err
}

// FindMeteredRental returns a metered rental by its reservation.
func (db *DB) FindMeteredRental(ctx context.Context, reservationID int64) (MeteredRental, error) {
	m, err := getMetered(ctx, db.reader, reservationID)
	return m, fail("find metered rental", err, "")
}

// ListMeteredRentals returns the buyer's metered rentals (every one with
// buyer 0), oldest first.
func (db *DB) ListMeteredRentals(ctx context.Context, buyerID int64) ([]MeteredRental, error) {
	q, args := `SELECT `+meteredColumns+meteredFrom+`ORDER BY m.reservation_id`, []any{}
	if buyerID != 0 {
		q, args = `SELECT `+meteredColumns+meteredFrom+`WHERE m.buyer_id = ? ORDER BY m.reservation_id`, []any{buyerID}
	}
	ms, err := collect(ctx, db.reader, scanMetered, q, args...)
	return ms, fail("list metered rentals", err, "")
}

// ListOpenMeteredRentals returns the reservations of the metered rentals
// whose last draw is not made yet.
func (db *DB) ListOpenMeteredRentals(ctx context.Context) ([]int64, error) {
	ids, err := collect(ctx, db.reader, func(s scanner) (int64, error) {
		var id int64
		return id, s.Scan(&id)
	}, `SELECT reservation_id FROM metered_rentals WHERE final = 0 ORDER BY reservation_id`)
	return ids, fail("list open metered rentals", err, "")
}

// holdEnd is the end to which a running rental holds its capacity at
// now: its notice ahead, but not past the buyer's maximum from its creation.
func (m MeteredRental) holdEnd(now time.Time) time.Time {
	end := now.Add(time.Duration(m.NoticeMinutes) * time.Minute)
	if m.MaxMinutes > 0 {
		if last := m.CreatedAt.Add(time.Duration(m.MaxMinutes) * time.Minute); end.After(last) {
			end = last
		}
	}
	return truncate(end)
}

// placeMetered checks and places, inside the caller's write transaction,
// the metered piece p (its capacity held [Start, End)) on its offer: the
// offer listed and its provider not suspended, the devices free
// throughout on the nodes it names (or placed by the booking's rule). The
// offer's rental limits in hours are for blocks and do not apply.
func placeMetered(ctx context.Context, tx querier, p *market.ReservationPiece, now time.Time) error {
	o, suspended, err := scanBookableOffer(tx.QueryRowContext(ctx, bookableOfferQuery, p.OfferID))
	if errors.Is(err, sql.ErrNoRows) || (err == nil && (!o.Listed() || suspended)) {
		return conflict(msgOfferUnavailable)
	}
	if err != nil {
		return err
	}
	o.MinRentalHours, o.MaxRentalHours = 0, 0
	pieces := []market.ReservationPiece{*p}
	if err := placeOnOffer(ctx, tx, o, pieces, []int{0}, now); err != nil {
		return err
	}
	*p = pieces[0]
	return nil
}

// StartMeteredRental starts a metered rental of devices on the offer for
// the buyer at now, in the booking transaction (db.book, as every booking):
// the offer must allow metered rentals; the buyer's balance must cover
// market.MeteredStartCoverMinutes at the offer's price; and the devices
// must be free on the offer's nodes from now for the offer's notice (or
// the buyer's maximum, maxMinutes, if shorter): it cannot start where it
// could not run at least that. The reservation is active at once, with one
// piece whose end the background tick rolls forward (MeterRental).
func (db *DB) StartMeteredRental(ctx context.Context, buyerID, offerID int64, devices, maxMinutes int, now time.Time) (MeteredRental, error) {
	const op = "start metered rental"
	if devices < 1 {
		return MeteredRental{}, invalid("Choose at least one device.")
	}
	if maxMinutes < 0 {
		return MeteredRental{}, invalid("The maximum must be a positive number of minutes, or none.")
	}
	now = truncate(now)
	var out MeteredRental
	// The buyer's balance is read, not changed: only money steps (the
	// whole lock) change it.
	err := db.book(ctx, bookingLocks{offers: []int64{offerID}, buyers: []int64{buyerID}}, func(ctx context.Context, tx preparedTx) error {
		terms, err := getMeteredTerms(ctx, tx, offerID)
		if err != nil {
			return err
		}
		var price int64
		if err := tx.QueryRowContext(ctx, `SELECT price_cents_per_device_hour FROM offers WHERE id = ?`, offerID).Scan(&price); err != nil {
			return err
		}
		balance, err := balanceOf(ctx, tx, buyerID)
		if err != nil {
			return err
		}
		if !market.MeteredCovers(balance, market.MeteredStartCoverMinutes, market.Cents(price), devices) {
			need := market.Cents(market.MeteredStartCoverMinutes) * market.MeteredPerMinute(market.Cents(price), devices)
			return conflict(fmt.Sprintf(msgBalanceTooLow, market.MeteredStartCoverMinutes, need))
		}
		m := MeteredRental{BuyerID: buyerID, OfferID: offerID, Devices: devices, Price: market.Cents(price),
			NoticeMinutes: terms.NoticeMinutes, MaxMinutes: maxMinutes, CreatedAt: now, UpdatedAt: now}
		p := market.ReservationPiece{OfferID: offerID, Devices: devices, Start: now, End: m.holdEnd(now), PriceCents: m.Price}
		if err := placeMetered(ctx, tx, &p, now); err != nil {
			return err
		}
		r := market.Reservation{BuyerID: buyerID, State: market.ReservationActive, Pieces: []market.ReservationPiece{p},
			HoldExpiresAt: now, CreatedAt: now, UpdatedAt: now, RequestJSON: `{"metered":true}`}
		if r.ID, err = insertReservation(ctx, tx, r); err != nil {
			return err
		}
		m.ReservationID, m.ProviderID, m.PieceID, m.PieceEnd = r.ID, r.Pieces[0].ProviderID, r.Pieces[0].ID, p.End
		if _, err := tx.ExecContext(ctx, `INSERT INTO metered_rentals (reservation_id, buyer_id, offer_id, provider_id, piece_id, devices,
			price_cents, notice_minutes, max_minutes, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			m.ReservationID, buyerID, offerID, m.ProviderID, m.PieceID, devices, price, m.NoticeMinutes, maxMinutes, unix(now), unix(now)); err != nil {
			return err
		}
		out = m
		return insertNotification(ctx, tx, Notification{UserID: buyerID, Kind: NotifyReservationStarting, CreatedAt: now,
			URL:    fmt.Sprintf("/reservations/%d", r.ID),
			Notice: market.Notice{Kind: market.NoticeReservationStarting, Params: market.NoticeParams{Reservation: r.ID, Start: p.Start, End: p.End}}})
	})
	if err != nil {
		return MeteredRental{}, fail(op, err, "")
	}
	return out, nil
}

// stopMetered stops the running rental m at `at` (not before its piece's
// start) for reason: the piece ends there (the agent removes access), the
// reservation completes, the stop is noted.
func stopMetered(ctx context.Context, tx querier, m *MeteredRental, at time.Time, reason string, now time.Time) error {
	var start int64
	if err := tx.QueryRowContext(ctx, `SELECT start_at FROM reservation_pieces WHERE id = ?`, m.PieceID).Scan(&start); err != nil {
		return err
	}
	end := max(unix(at), start+1) // a piece ends after it starts
	if end > unix(m.PieceEnd) {
		end = unix(m.PieceEnd)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE reservation_pieces SET end_at = ? WHERE id = ?`, end, m.PieceID); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE reservations SET ends_at = ?, state = ?, updated_at = ? WHERE id = ? AND state = ?`,
		end, string(market.ReservationCompleted), unix(now), m.ReservationID, string(market.ReservationActive)); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE metered_rentals SET stop_at = ?, stop_reason = ?, updated_at = ? WHERE reservation_id = ?`,
		end, reason, unix(now), m.ReservationID); err != nil {
		return err
	}
	m.StopAt, m.StopReason, m.PieceEnd = fromUnix(end), reason, fromUnix(end)
	return nil
}

// StopMeteredRental stops the buyer's running metered rental at now: its
// capacity is freed from now and the agent removes access; the clock
// stops here (or at an earlier confirmed removal). The last draws are
// made by the background tick (MeterRental).
func (db *DB) StopMeteredRental(ctx context.Context, buyerID, reservationID int64, now time.Time) (MeteredRental, error) {
	const op = "stop metered rental"
	tx, err := db.begin(ctx)
	if err != nil {
		return MeteredRental{}, fail(op, err, "")
	}
	defer tx.Rollback()
	m, err := getMetered(ctx, tx, reservationID)
	if err == nil && m.BuyerID != buyerID {
		err = notFound(msgMeteredNotFound)
	}
	if err != nil {
		return MeteredRental{}, fail(op, err, "")
	}
	if !m.Running() {
		return MeteredRental{}, conflict(msgMeteredStopped)
	}
	if err := stopMetered(ctx, tx, &m, now, market.MeteredStopBuyer, now); err != nil {
		return MeteredRental{}, fail(op, err, "")
	}
	return m, fail(op, tx.Commit(), "")
}

// meteredClock reads what the agents of the rental's nodes reported: when
// its machine became usable (market.MeteredUsableAt), the earliest
// confirmed removal of access (zero: none), and the measured outages that
// are not billed (market.MeteredExcludes), open ones to now.
func meteredClock(ctx context.Context, tx querier, pieceID int64, now time.Time) (usable time.Time, ok bool, removed time.Time, outages []market.Span, err error) {
	var nodesText string
	if err = tx.QueryRowContext(ctx, `SELECT nodes FROM reservation_pieces WHERE id = ?`, pieceID).Scan(&nodesText); err != nil {
		return
	}
	shares, err := parseNodes(nodesText)
	if err != nil {
		return
	}
	var ready []market.NodeReadiness
	for _, sh := range shares {
		var n market.NodeReadiness
		a, e := getPieceAccess(ctx, tx, pieceID, sh.Node)
		if e != nil {
			return time.Time{}, false, time.Time{}, nil, e
		}
		n.InstalledAt = a.InstalledAt
		if a.Removed() && (removed.IsZero() || a.RemovedAt.Before(removed)) {
			removed = a.RemovedAt
		}
		var accepted int64
		var errText string
		switch e := tx.QueryRowContext(ctx, `SELECT created_at, error FROM acceptance_results WHERE piece_id = ? AND node = ?`, pieceID, sh.Node).Scan(&accepted, &errText); {
		case e == nil:
			n.AcceptedAt, n.AcceptanceFailed = fromUnix(accepted), errText != ""
		case !errors.Is(e, sql.ErrNoRows):
			return time.Time{}, false, time.Time{}, nil, e
		}
		var phase string
		var updated int64
		switch e := tx.QueryRowContext(ctx, `SELECT phase, updated_at FROM piece_containers WHERE piece_id = ? AND node = ?`, pieceID, sh.Node).Scan(&phase, &updated); {
		case e == nil:
			if market.ContainerPhase(phase) == market.PhaseReady || market.ContainerPhase(phase) == market.PhaseRemoved {
				n.ContainerReadyAt = fromUnix(updated)
			}
		case !errors.Is(e, sql.ErrNoRows):
			return time.Time{}, false, time.Time{}, nil, e
		}
		ready = append(ready, n)
	}
	usable, ok = market.MeteredUsableAt(ready)
	rows, err := tx.QueryContext(ctx, `SELECT kind, start_at, COALESCE(end_at, 0) FROM measured_outages WHERE piece_id = ?`, pieceID)
	if err != nil {
		return
	}
	for rows.Next() {
		var kind string
		var s, e int64
		if err = rows.Scan(&kind, &s, &e); err != nil {
			rows.Close()
			return
		}
		if !market.MeteredExcludes(market.IncidentKind(kind)) {
			continue
		}
		end := now
		if e != 0 {
			end = fromUnix(e)
		}
		outages = append(outages, market.Span{Start: fromUnix(s), End: end})
	}
	err = closeRows(rows)
	return
}

// MeterStep is what one round of MeterRental did.
type MeterStep struct {
	Rental       MeteredRental
	DrewMinutes  int64
	DrewCents    market.Cents
	ClockStarted bool
	Stopped      bool // stopped in this round (balance, maximum, notice, removal)
	Extended     bool // its capacity held further ahead
	Warned       bool // the buyer was warned that the balance runs low
	Balance      market.Cents
	PayoutDue    bool // final in this round with earnings to pay out
	NoticeStopAt time.Time
}

// MeterRental runs one round of a metered rental at now, in one
// transaction (under the caller's fence, store.WithFence):
//
//   - the clock starts once the machine is usable (meteredClock), at the
//     agents' report, not at booking;
//   - the minutes billable up to now − market.MeteredDrawLag (or the stop,
//     whichever first) are drawn from the balance to the provider, the
//     difference from what was drawn (market.MeteredDraw) under a key of
//     the minute range, so a round run twice draws once;
//   - a confirmed removal of access stops the clock; reaching the buyer's
//     maximum stops the rental; a balance that cannot cover
//     market.MeteredStopCoverMinutes more stops it, and one below
//     market.MeteredWarnMinutes warns the buyer once;
//   - a running rental's capacity is held notice minutes ahead again when
//     the devices are free; when a booking takes them the rental is told
//     it stops at its current end;
//   - once the stop is MeteredDrawLag past, the last draw is made, the
//     platform's fee on the earnings entered (Dr provider, Cr fees) and
//     the rental is final, its payout due (RecordMeteredTransfer).
func (db *DB) MeterRental(ctx context.Context, reservationID int64, feeBP int, now time.Time) (MeterStep, error) {
	const op = "meter rental"
	now = truncate(now)
	tx, err := db.begin(ctx)
	if err != nil {
		return MeterStep{}, fail(op, err, "")
	}
	defer tx.Rollback()
	m, err := getMetered(ctx, tx, reservationID)
	if err != nil {
		return MeterStep{}, fail(op, err, "")
	}
	step := MeterStep{Rental: m}
	if m.Final {
		return step, nil
	}
	var state string
	if err := tx.QueryRowContext(ctx, `SELECT state FROM reservations WHERE id = ?`, m.ReservationID).Scan(&state); err != nil {
		return MeterStep{}, fail(op, err, "")
	}
	usable, ok, removed, outages, err := meteredClock(ctx, tx, m.PieceID, now)
	if err != nil {
		return MeterStep{}, fail(op, err, "")
	}
	if m.ClockStart.IsZero() && ok {
		m.ClockStart, step.ClockStarted = usable, true
	}
	note := func(msg string) error {
		return insertNotification(ctx, tx, Notification{UserID: m.BuyerID, Kind: NotifyMeteredRental, CreatedAt: now,
			URL: fmt.Sprintf("/reservations/%d", m.ReservationID), Message: msg})
	}
	// The rental ends by the clock alone: its piece's end passed (the
	// notice ran out, the maximum came, or no round ran to extend it), or
	// the agent removed access.
	if m.Running() {
		reason := ""
		switch {
		case !removed.IsZero() && removed.Before(now):
			reason = market.MeteredStopRemoved
		case !now.Before(m.PieceEnd) || market.ReservationState(state) != market.ReservationActive:
			reason = market.MeteredStopNotice
			if m.MaxMinutes > 0 && !m.PieceEnd.Before(m.CreatedAt.Add(time.Duration(m.MaxMinutes)*time.Minute)) {
				reason = market.MeteredStopMax
			}
		}
		if reason != "" {
			at := m.PieceEnd
			if reason == market.MeteredStopRemoved {
				at = removed
			}
			if err := stopMetered(ctx, tx, &m, at, reason, now); err != nil {
				return MeterStep{}, fail(op, err, "")
			}
			step.Stopped = true
			if err := note(fmt.Sprintf("Metered rental #%d %s at %s.", m.ReservationID, market.MeteredStopLabel(reason), market.FormatTime(m.StopAt))); err != nil {
				return MeterStep{}, fail(op, err, "")
			}
		}
	}
	// What the clock ran: to the stop (or an earlier removal), less the lag.
	stop := now.Add(-market.MeteredDrawLag)
	if !m.Running() && m.StopAt.Before(stop) {
		stop = m.StopAt
	}
	if !removed.IsZero() && removed.Before(stop) {
		stop = removed
	}
	final := !m.Running() && !now.Before(m.StopAt.Add(market.MeteredDrawLag))
	total := market.MeteredMinutes(m.ClockStart, stop, outages)
	mins, cents := market.MeteredDraw(m.DrawnMinutes, m.DrawnCents, total, m.Price, m.Devices)
	if mins > 0 {
		if cents > 0 {
			e := market.BalanceEntry{BuyerID: m.BuyerID, LedgerEntry: market.LedgerEntry{ReservationID: m.ReservationID, Kind: market.EntryDraw,
				Debit: market.BalanceAccount(m.BuyerID), Credit: market.ProviderAccount(m.ProviderID), Amount: cents,
				IdempotencyKey: market.DrawKey(m.ReservationID, m.DrawnMinutes, total), At: now}}
			if err := insertBalanceEntries(ctx, tx, e); err != nil {
				return MeterStep{}, fail(op, err, "")
			}
		}
		m.DrawnMinutes, m.DrawnCents = total, m.DrawnCents+cents
		step.DrewMinutes, step.DrewCents = mins, cents
	}
	if step.Balance, err = balanceOf(ctx, tx, m.BuyerID); err != nil {
		return MeterStep{}, fail(op, err, "")
	}
	if m.Running() {
		switch {
		case market.MeteredMustStop(step.Balance, m.Price, m.Devices):
			if err := stopMetered(ctx, tx, &m, now, market.MeteredStopBalance, now); err != nil {
				return MeterStep{}, fail(op, err, "")
			}
			step.Stopped = true
			if err := note(fmt.Sprintf("Metered rental #%d stopped at %s: your balance of %s cannot cover the next minutes. Top up to start again.",
				m.ReservationID, market.FormatTime(m.StopAt), step.Balance)); err != nil {
				return MeterStep{}, fail(op, err, "")
			}
		case market.MeteredRunsLow(step.Balance, m.Price, m.Devices):
			if m.WarnedAt.IsZero() {
				m.WarnedAt, step.Warned = now, true
				if err := note(fmt.Sprintf("Your balance of %s covers less than %d more minutes of metered rental #%d; it stops when the balance cannot cover the next %d minutes. Top up to keep it running.",
					step.Balance, market.MeteredWarnMinutes, m.ReservationID, market.MeteredStopCoverMinutes)); err != nil {
					return MeterStep{}, fail(op, err, "")
				}
			}
		default:
			m.WarnedAt = time.Time{} // topped up: warn again next time
		}
	}
	if m.Running() {
		if want := m.holdEnd(now); want.After(m.PieceEnd) {
			ext, err := extendMetered(ctx, tx, m, want, now)
			if err != nil {
				return MeterStep{}, fail(op, err, "")
			}
			if ext {
				m.PieceEnd, step.Extended = want, true
			} else {
				step.NoticeStopAt = m.PieceEnd
			}
		}
	}
	if final {
		m.Final = true
		m.Fee = market.PlatformFee(m.DrawnCents, feeBP)
		m.Payout = m.DrawnCents - m.Fee
		if m.Fee > 0 {
			e := market.BalanceEntry{BuyerID: m.BuyerID, LedgerEntry: market.LedgerEntry{ReservationID: m.ReservationID, Kind: market.EntryFee,
				Debit: market.ProviderAccount(m.ProviderID), Credit: market.AccountPlatformFees, Amount: m.Fee,
				IdempotencyKey: market.MeteredPayoutKey(m.ReservationID, market.EntryFee), At: now}}
			if err := insertBalanceEntries(ctx, tx, e); err != nil {
				return MeterStep{}, fail(op, err, "")
			}
		}
		step.PayoutDue = m.Payout > 0
	}
	warned := any(nil)
	if !m.WarnedAt.IsZero() {
		warned = unix(m.WarnedAt)
	}
	clock := any(nil)
	if !m.ClockStart.IsZero() {
		clock = unix(m.ClockStart)
	}
	// Conditional on what was read: a round that raced another (which
	// the fence and the write lock rule out) would change nothing.
	res, err := tx.ExecContext(ctx, `UPDATE metered_rentals SET clock_start_at = ?, drawn_minutes = ?, drawn_cents = ?, warned_at = ?,
		final = ?, fee_cents = ?, payout_cents = ?, updated_at = ? WHERE reservation_id = ? AND final = 0 AND drawn_minutes = ?`,
		clock, m.DrawnMinutes, int64(m.DrawnCents), warned, boolInt(m.Final), int64(m.Fee), int64(m.Payout), unix(now),
		m.ReservationID, step.Rental.DrawnMinutes)
	if err != nil {
		return MeterStep{}, fail(op, err, "")
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return MeterStep{}, fail(op, fmt.Errorf("metered rental %d changed meanwhile (%d rows, %v)", m.ReservationID, n, err), "")
	}
	m.UpdatedAt = now
	step.Rental = m
	return step, fail(op, tx.Commit(), "")
}

// extendMetered holds the running rental's capacity to `to` when its
// devices are free on its nodes from its current end; false when a
// booking has them.
func extendMetered(ctx context.Context, tx querier, m MeteredRental, to, now time.Time) (bool, error) {
	var nodesText string
	if err := tx.QueryRowContext(ctx, `SELECT nodes FROM reservation_pieces WHERE id = ?`, m.PieceID).Scan(&nodesText); err != nil {
		return false, err
	}
	nodes, err := parseNodes(nodesText)
	if err != nil {
		return false, err
	}
	p := market.ReservationPiece{OfferID: m.OfferID, Devices: m.Devices, Start: m.PieceEnd, End: to, Nodes: nodes}
	if err := placeMetered(ctx, tx, &p, now); err != nil {
		if market.ErrorCode(err) == market.CodeConflict {
			return false, nil
		}
		return false, err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE reservation_pieces SET end_at = ? WHERE id = ?`, unix(to), m.PieceID); err != nil {
		return false, err
	}
	_, err = tx.ExecContext(ctx, `UPDATE reservations SET ends_at = ? WHERE id = ?`, unix(to), m.ReservationID)
	return err == nil, err
}

// ListDueMeteredPayouts returns the final metered rentals whose
// provider's payout is not made yet.
func (db *DB) ListDueMeteredPayouts(ctx context.Context) ([]MeteredRental, error) {
	ms, err := collect(ctx, db.reader, scanMetered, `SELECT `+meteredColumns+meteredFrom+`WHERE m.final = 1 AND m.payout_cents > 0 AND m.transfer_ref = '' ORDER BY m.reservation_id`)
	return ms, fail("list due metered payouts", err, "")
}

// RecordMeteredTransfer records the payout of a final rental's earnings,
// made by the processor's transfer ref: the transfer entry (Dr provider,
// Cr cash). Recording it again changes nothing.
func (db *DB) RecordMeteredTransfer(ctx context.Context, reservationID int64, ref string, now time.Time) error {
	const op = "record metered transfer"
	tx, err := db.begin(ctx)
	if err != nil {
		return fail(op, err, "")
	}
	defer tx.Rollback()
	m, err := getMetered(ctx, tx, reservationID)
	if err != nil {
		return fail(op, err, "")
	}
	if !m.Final || m.TransferRef != "" || m.Payout <= 0 {
		return nil
	}
	e := market.BalanceEntry{BuyerID: m.BuyerID, LedgerEntry: market.LedgerEntry{ReservationID: m.ReservationID, Kind: market.EntryTransfer,
		Debit: market.ProviderAccount(m.ProviderID), Credit: market.AccountPlatformCash, Amount: m.Payout, StripeRef: ref,
		IdempotencyKey: market.MeteredPayoutKey(m.ReservationID, market.EntryTransfer), At: now}}
	if err := insertBalanceEntries(ctx, tx, e); err != nil {
		return fail(op, err, "")
	}
	if _, err := tx.ExecContext(ctx, `UPDATE metered_rentals SET transfer_ref = ?, updated_at = ? WHERE reservation_id = ?`, ref, unix(now), reservationID); err != nil {
		return fail(op, err, "")
	}
	if err := insertNotification(ctx, tx, Notification{UserID: m.ProviderID, Kind: NotifyPayoutSent, CreatedAt: now, URL: "/provider/payouts",
		Message: fmt.Sprintf("Payout of %s sent for metered rental #%d (%d minutes, less the platform fee of %s).", m.Payout, m.ReservationID, m.DrawnMinutes, m.Fee)}); err != nil {
		return fail(op, err, "")
	}
	return fail(op, tx.Commit(), "")
}

// BalanceRefundPart is the part of a refund of unused balance returned to
// one top-up's payment.
type BalanceRefundPart struct {
	RefundID, TopUpID, BuyerID int64
	PaymentIntentID            string // the top-up's payment
	Amount                     market.Cents
	RefundRef                  string // the processor's refund, once made
	LastError                  string
	CreatedAt                  time.Time
}

// Key is the processor's idempotency key of the part's refund.
func (p BalanceRefundPart) Key() string { return market.BalanceRefundKey(p.RefundID, p.TopUpID) }

const refundPartColumns = `r.refund_id, r.topup_id, r.buyer_id, t.payment_intent_id, r.amount_cents, r.refund_ref, r.last_error, r.created_at`

func scanRefundPart(s scanner) (BalanceRefundPart, error) {
	var p BalanceRefundPart
	var amount, created int64
	if err := s.Scan(&p.RefundID, &p.TopUpID, &p.BuyerID, &p.PaymentIntentID, &amount, &p.RefundRef, &p.LastError, &created); err != nil {
		return p, err
	}
	p.Amount, p.CreatedAt = market.Cents(amount), fromUnix(created)
	return p, nil
}

// RequestBalanceRefund records the buyer's request to refund amount of
// unused balance (0: all of it), divided over the paid top-ups by
// market.RefundPlan, newest first and never more on one than it has left;
// the parts are made by the processor (RecordBalanceRefund). A buyer with
// a metered rental whose last draw is not made yet cannot ask: what it
// still draws must stay. Nothing to refund is a conflict.
func (db *DB) RequestBalanceRefund(ctx context.Context, buyerID int64, amount market.Cents, now time.Time) ([]BalanceRefundPart, error) {
	const op = "request balance refund"
	if amount < 0 {
		return nil, invalid("The refund must be a positive amount.")
	}
	tx, err := db.begin(ctx)
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer tx.Rollback()
	var open int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM metered_rentals WHERE buyer_id = ? AND final = 0`, buyerID).Scan(&open); err != nil {
		return nil, fail(op, err, "")
	}
	if open > 0 {
		return nil, conflict(msgRefundWhileRental)
	}
	balance, err := balanceOf(ctx, tx, buyerID)
	if err != nil {
		return nil, fail(op, err, "")
	}
	var pending int64
	if err := tx.QueryRowContext(ctx, `SELECT COALESCE(SUM(amount_cents), 0) FROM balance_refund_parts WHERE buyer_id = ? AND refund_ref = ''`, buyerID).Scan(&pending); err != nil {
		return nil, fail(op, err, "")
	}
	available := balance - market.Cents(pending)
	if amount == 0 || amount > available {
		amount = available
	}
	if amount <= 0 {
		return nil, conflict(msgNothingToRefund)
	}
	tops, err := collect(ctx, tx, scanTopUp, `SELECT `+topUpColumns+` FROM balance_topups WHERE buyer_id = ? AND state = ? ORDER BY id`, buyerID, TopUpPaid)
	if err != nil {
		return nil, fail(op, err, "")
	}
	left := make([]market.Cents, len(tops))
	for i, t := range tops {
		var asked int64
		if err := tx.QueryRowContext(ctx, `SELECT COALESCE(SUM(amount_cents), 0) FROM balance_refund_parts WHERE topup_id = ?`, t.ID).Scan(&asked); err != nil {
			return nil, fail(op, err, "")
		}
		left[i] = t.Amount - market.Cents(asked)
	}
	var refundID int64
	if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(refund_id), 0) + 1 FROM balance_refund_parts`).Scan(&refundID); err != nil {
		return nil, fail(op, err, "")
	}
	for i, part := range market.RefundPlan(amount, left) {
		if part <= 0 {
			continue
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO balance_refund_parts (refund_id, topup_id, buyer_id, amount_cents, created_at) VALUES (?, ?, ?, ?, ?)`,
			refundID, tops[i].ID, buyerID, int64(part), unix(now)); err != nil {
			return nil, fail(op, err, "")
		}
	}
	parts, err := collect(ctx, tx, scanRefundPart, `SELECT `+refundPartColumns+` FROM balance_refund_parts r JOIN balance_topups t ON t.id = r.topup_id
		WHERE r.refund_id = ? ORDER BY r.topup_id`, refundID)
	if err != nil {
		return nil, fail(op, err, "")
	}
	return parts, fail(op, tx.Commit(), "")
}

// ListPendingBalanceRefunds returns the refund parts not made yet.
func (db *DB) ListPendingBalanceRefunds(ctx context.Context) ([]BalanceRefundPart, error) {
	ps, err := collect(ctx, db.reader, scanRefundPart, `SELECT `+refundPartColumns+` FROM balance_refund_parts r JOIN balance_topups t ON t.id = r.topup_id
		WHERE r.refund_ref = '' ORDER BY r.refund_id, r.topup_id`)
	return ps, fail("list pending balance refunds", err, "")
}

// RecordBalanceRefund records a refund part made by the processor's refund
// ref: the refund entry (Dr the buyer's balance, Cr cash) and the top-up's
// refunded total. Recording it again changes nothing.
func (db *DB) RecordBalanceRefund(ctx context.Context, refundID, topUpID int64, ref string, now time.Time) error {
	const op = "record balance refund"
	tx, err := db.begin(ctx)
	if err != nil {
		return fail(op, err, "")
	}
	defer tx.Rollback()
	p, err := scanRefundPart(tx.QueryRowContext(ctx, `SELECT `+refundPartColumns+` FROM balance_refund_parts r JOIN balance_topups t ON t.id = r.topup_id
		WHERE r.refund_id = ? AND r.topup_id = ?`, refundID, topUpID))
	if errors.Is(err, sql.ErrNoRows) {
		return notFound("That refund could not be found.")
	}
	if err != nil {
		return fail(op, err, "")
	}
	if p.RefundRef != "" {
		return nil
	}
	if _, err := tx.ExecContext(ctx, `UPDATE balance_refund_parts SET refund_ref = ?, last_error = '' WHERE refund_id = ? AND topup_id = ?`, ref, refundID, topUpID); err != nil {
		return fail(op, err, "")
	}
	if _, err := tx.ExecContext(ctx, `UPDATE balance_topups SET refunded_cents = refunded_cents + ?, updated_at = ? WHERE id = ?`, int64(p.Amount), unix(now), topUpID); err != nil {
		return fail(op, err, "")
	}
	e := market.BalanceEntry{BuyerID: p.BuyerID, LedgerEntry: market.LedgerEntry{Kind: market.EntryBalanceRefund, Debit: market.BalanceAccount(p.BuyerID),
		Credit: market.AccountPlatformCash, Amount: p.Amount, StripeRef: ref, IdempotencyKey: p.Key(), At: now}}
	if err := insertBalanceEntries(ctx, tx, e); err != nil {
		return fail(op, err, "")
	}
	if err := insertNotification(ctx, tx, Notification{UserID: p.BuyerID, Kind: NotifyRefundSent, CreatedAt: now, URL: "/balance",
		Message: fmt.Sprintf("Refund of %s of your unused balance sent to the card that paid top-up #%d.", p.Amount, p.TopUpID)}); err != nil {
		return fail(op, err, "")
	}
	return fail(op, tx.Commit(), "")
}

// RecordBalanceRefundFailure notes why a refund part could not be made;
// the tick tries it again.
func (db *DB) RecordBalanceRefundFailure(ctx context.Context, refundID, topUpID int64, msg string) error {
	const op = "record balance refund failure"
	tx, err := db.begin(ctx)
	if err != nil {
		return fail(op, err, "")
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `UPDATE balance_refund_parts SET last_error = ? WHERE refund_id = ? AND topup_id = ? AND refund_ref = ''`, msg, refundID, topUpID); err != nil {
		return fail(op, err, "")
	}
	return fail(op, tx.Commit(), "")
}
