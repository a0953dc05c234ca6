package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// Resale of reserved time (market/resale.go): listings, the sale and the
// seller's credit.

const (
	msgListingNotFound = "That resale listing could not be found."
	msgListingGone     = "This time is no longer for sale: it was sold, withdrawn, or its start has passed."
)

const resaleColumns = `l.id, l.reservation_id, l.seller_id, l.from_at, l.price_cents, l.state, l.created_at, l.updated_at,
	COALESCE(l.buyer_id, 0), COALESCE(l.sold_reservation_id, 0), COALESCE(l.sold_at, 0), l.charge_ref, l.fee_cents,
	l.credit_cents, l.credit_done, l.credit_ref, l.attempts, l.last_error, l.sla_credit_cents, l.sla_credit_done`

func scanResale(s scanner, extra ...any) (market.ResaleListing, error) {
	var l market.ResaleListing
	var state string
	var from, price, created, updated, sold, fee, credit, sla int64
	if err := s.Scan(append([]any{&l.ID, &l.ReservationID, &l.SellerID, &from, &price, &state, &created, &updated,
		&l.BuyerID, &l.SoldReservationID, &sold, &l.ChargeRef, &fee, &credit, &l.CreditDone, &l.CreditRef,
		&l.Attempts, &l.LastError, &sla, &l.SLACreditDone}, extra...)...); err != nil {
		return market.ResaleListing{}, err
	}
	l.From, l.CreatedAt, l.UpdatedAt = fromUnix(from), fromUnix(created), fromUnix(updated)
	if sold != 0 {
		l.SoldAt = fromUnix(sold)
	}
	l.Price, l.Fee, l.Credit, l.SLACredit = market.Cents(price), market.Cents(fee), market.Cents(credit), market.Cents(sla)
	l.State = market.ListingState(state)
	return l, nil
}

// scanListingRow scans a row of resaleColumns alone.
func scanListingRow(s scanner) (market.ResaleListing, error) { return scanResale(s) }

func getResale(ctx context.Context, q querier, id int64) (market.ResaleListing, error) {
	l, err := scanResale(q.QueryRowContext(ctx, `SELECT `+resaleColumns+` FROM resale_listings l WHERE l.id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return market.ResaleListing{}, notFound(msgListingNotFound)
	}
	return l, err
}

// ResaleOffer is a listing with the reservation it sells and the offers of
// its pieces, by id, for the pages that show what is for sale.
type ResaleOffer struct {
	Listing     market.ResaleListing
	Reservation market.Reservation
	Offers      map[int64]market.Offer
}

func loadResaleOffer(ctx context.Context, q querier, l market.ResaleListing) (ResaleOffer, error) {
	r, err := getReservation(ctx, q, l.ReservationID)
	if err != nil {
		return ResaleOffer{}, err
	}
	ro := ResaleOffer{Listing: l, Reservation: r, Offers: map[int64]market.Offer{}}
	for _, p := range r.Pieces {
		if _, ok := ro.Offers[p.OfferID]; ok {
			continue
		}
		o, err := getOffer(ctx, q, p.OfferID)
		if err != nil {
			return ResaleOffer{}, err
		}
		ro.Offers[p.OfferID] = o
	}
	return ro, nil
}

// refundedOn is what has been refunded so far on a reservation's payment,
// as the ledger records it.
func refundedOn(ctx context.Context, q querier, reservationID int64) (market.Cents, error) {
	var n int64
	err := q.QueryRowContext(ctx, `SELECT COALESCE(SUM(amount_cents), 0) FROM ledger_entries WHERE reservation_id = ? AND kind = ?`,
		reservationID, market.EntryRefund).Scan(&n)
	return market.Cents(n), err
}

// ResaleTerms is what the seller's form needs to know about listing a
// reservation at now: the hours it may start at, the cap on the price for
// each (in the same order), and whether it can be listed at all (Err).
type ResaleTerms struct {
	Choices []time.Time
	Caps    []market.Cents
	Err     error
}

// FindResaleTerms returns the listing terms of the seller's reservation at
// now (another buyer's reservation is not found).
func (db *DB) FindResaleTerms(ctx context.Context, sellerID, reservationID int64, now time.Time) (ResaleTerms, error) {
	const op = "find resale terms"
	tx, err := db.read(ctx)
	if err != nil {
		return ResaleTerms{}, fail(op, err, "")
	}
	defer tx.Rollback()
	r, err := getBuyerReservation(ctx, tx, sellerID, reservationID)
	if err != nil {
		return ResaleTerms{}, fail(op, err, "")
	}
	var t ResaleTerms
	if t.Err = market.CanResell(r); t.Err != nil {
		return t, nil
	}
	if t.Err = paidFor(ctx, tx, r.ID); t.Err != nil {
		return t, nil
	}
	refunded, err := refundedOn(ctx, tx, r.ID)
	if err != nil {
		return ResaleTerms{}, fail(op, err, "")
	}
	for _, from := range market.ResaleFromChoices(r, now) {
		t.Choices = append(t.Choices, from)
		t.Caps = append(t.Caps, market.ResalePriceCap(r, from, refunded))
	}
	if len(t.Choices) == 0 {
		t.Err = market.Errorf(market.CodeConflict, "No whole hour of this reservation is far enough ahead to sell.")
	}
	return t, nil
}

// paidFor returns nil when the reservation's payment is complete, else a
// conflict.
func paidFor(ctx context.Context, q querier, reservationID int64) error {
	pay, err := getPayment(ctx, q, reservationID)
	if err != nil && market.ErrorCode(err) != market.CodeNotFound {
		return err
	}
	if err != nil || pay.Status != PaymentPaid || pay.PaymentIntentID == "" {
		return conflict("Only a reservation paid in full can be resold.")
	}
	return nil
}

// CreateResaleListing lists the remaining time of the seller's reservation
// from `from` at price (market.ValidateResaleListing, with the refunds made
// so far on its payment), in one transaction. Another buyer's reservation
// is not found; one that is unpaid, or already has an open listing, is a
// conflict.
func (db *DB) CreateResaleListing(ctx context.Context, sellerID, reservationID int64, from time.Time, price market.Cents, now time.Time) (market.ResaleListing, error) {
	const op = "create resale listing"
	tx, err := db.begin(ctx)
	if err != nil {
		return market.ResaleListing{}, fail(op, err, "")
	}
	defer tx.Rollback()
	if err := mayAct(ctx, tx, sellerID); err != nil {
		return market.ResaleListing{}, fail(op, err, "")
	}
	r, err := getBuyerReservation(ctx, tx, sellerID, reservationID)
	if err != nil {
		return market.ResaleListing{}, fail(op, err, "")
	}
	if err := market.CanResell(r); err != nil {
		return market.ResaleListing{}, err
	}
	if err := paidFor(ctx, tx, r.ID); err != nil {
		return market.ResaleListing{}, fail(op, err, "")
	}
	refunded, err := refundedOn(ctx, tx, r.ID)
	if err != nil {
		return market.ResaleListing{}, fail(op, err, "")
	}
	if err := market.ValidateResaleListing(r, from, price, refunded, now); err != nil {
		return market.ResaleListing{}, err
	}
	var open int64
	err = tx.QueryRowContext(ctx, `SELECT l.id FROM resale_listings l WHERE l.reservation_id = ? AND l.state = ? AND l.from_at > ?`,
		r.ID, string(market.ListingOpen), unix(now)).Scan(&open)
	if err == nil {
		return market.ResaleListing{}, conflict(fmt.Sprintf("This reservation is already listed (listing #%d); withdraw that listing first.", open))
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return market.ResaleListing{}, fail(op, err, "")
	}
	l := market.ResaleListing{ReservationID: r.ID, SellerID: sellerID, From: truncate(from), Price: price, State: market.ListingOpen,
		CreatedAt: truncate(now), UpdatedAt: truncate(now)}
	if err := tx.QueryRowContext(ctx, `INSERT INTO resale_listings (reservation_id, seller_id, from_at, price_cents, state, created_at, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id`, l.ReservationID, l.SellerID, unix(l.From), int64(l.Price), string(l.State),
		unix(now), unix(now)).Scan(&l.ID); err != nil {
		return market.ResaleListing{}, fail(op, err, "")
	}
	return l, fail(op, tx.Commit(), "")
}

// WithdrawResaleListing withdraws the seller's open listing. Another
// seller's listing is not found; one sold or withdrawn is a conflict.
func (db *DB) WithdrawResaleListing(ctx context.Context, sellerID, listingID int64, now time.Time) (market.ResaleListing, error) {
	const op = "withdraw resale listing"
	tx, err := db.begin(ctx)
	if err != nil {
		return market.ResaleListing{}, fail(op, err, "")
	}
	defer tx.Rollback()
	l, err := getResale(ctx, tx, listingID)
	if err != nil {
		return market.ResaleListing{}, fail(op, err, "")
	}
	if l.SellerID != sellerID {
		return market.ResaleListing{}, notFound(msgListingNotFound)
	}
	if l.State != market.ListingOpen {
		return market.ResaleListing{}, conflict(fmt.Sprintf("This listing is %s and cannot be withdrawn.", l.State))
	}
	if _, err := tx.ExecContext(ctx, `UPDATE resale_listings SET state = ?, updated_at = ? WHERE id = ?`,
		string(market.ListingWithdrawn), unix(now), l.ID); err != nil {
		return market.ResaleListing{}, fail(op, err, "")
	}
	l.State, l.UpdatedAt = market.ListingWithdrawn, truncate(now)
	return l, fail(op, tx.Commit(), "")
}

// FindResaleOffer returns a listing with its reservation and offers.
func (db *DB) FindResaleOffer(ctx context.Context, listingID int64) (ResaleOffer, error) {
	const op = "find resale listing"
	tx, err := db.read(ctx)
	if err != nil {
		return ResaleOffer{}, fail(op, err, "")
	}
	defer tx.Rollback()
	l, err := getResale(ctx, tx, listingID)
	if err != nil {
		return ResaleOffer{}, fail(op, err, "")
	}
	ro, err := loadResaleOffer(ctx, tx, l)
	return ro, fail(op, err, "")
}

// ListOpenResaleOffers returns the listings that can be bought at now
// (market.ResaleListing.Live), soonest start first.
func (db *DB) ListOpenResaleOffers(ctx context.Context, now time.Time) ([]ResaleOffer, error) {
	const op = "list resale listings"
	tx, err := db.read(ctx)
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer tx.Rollback()
	ls, err := collect(ctx, tx, scanListingRow, `SELECT `+resaleColumns+` FROM resale_listings l
		WHERE l.state = ? AND l.from_at > ? ORDER BY l.from_at, l.id`, string(market.ListingOpen), unix(now))
	if err != nil {
		return nil, fail(op, err, "")
	}
	var out []ResaleOffer
	for _, l := range ls {
		ro, err := loadResaleOffer(ctx, tx, l)
		if err != nil {
			return nil, fail(op, err, "")
		}
		if l.Live(ro.Reservation, now) {
			out = append(out, ro)
		}
	}
	return out, nil
}

// ListResalesSoldInto returns the listings whose sales made any of the
// reservations (sold_reservation_id), newest first, in one query: the
// buyer's list of reservations marks those bought on resale with their
// price without a read per row.
func (db *DB) ListResalesSoldInto(ctx context.Context, reservationIDs []int64) ([]market.ResaleListing, error) {
	if len(reservationIDs) == 0 {
		return nil, nil
	}
	args := make([]any, len(reservationIDs))
	for i, id := range reservationIDs {
		args[i] = id
	}
	ls, err := collect(ctx, db.reader, scanListingRow, `SELECT `+resaleColumns+` FROM resale_listings l
		WHERE l.sold_reservation_id IN (`+placeholders(len(args))+`) ORDER BY l.id DESC`, args...)
	return ls, fail("list resales sold into", err, "")
}

// ListReservationResales returns the listings of a reservation's time and
// the listing it was bought from, if any (sold_reservation_id), newest
// first.
func (db *DB) ListReservationResales(ctx context.Context, reservationID int64) ([]market.ResaleListing, error) {
	const op = "list reservation resales"
	tx, err := db.read(ctx)
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer tx.Rollback()
	ls, err := collect(ctx, tx, scanListingRow, `SELECT `+resaleColumns+` FROM resale_listings l
		WHERE l.reservation_id = ? OR l.sold_reservation_id = ? ORDER BY l.id DESC`, reservationID, reservationID)
	return ls, fail(op, err, "")
}

// SellResaleListing sells a listing to buyerID, who has paid its price
// (chargeRef, the payment), in one transaction: it re-reads the listing
// and its reservation and refuses unless the listing is still live
// (market.ResaleListing.Live) and the buyer is not the seller; creates the
// buyer's reservation, confirmed, of market.ResalePieces (resale_of names
// the original; its pieces carry the original's frozen terms and
// cancellation policy, not the offer's current ones); marks the original
// resold at the listing's start; records the sale (fee and seller's credit
// by market.ResaleSplit with the platform fee feeBP; the credit is a step
// for the retrier); writes market.ResaleEntries; finishes the buyer's
// charge intent chargeIntentID (0: none); and tells both parties.
// The capacity the pieces hold does not change: the original's pieces keep
// holding it (holdsCapacity), so no other booking can see it free.
func (db *DB) SellResaleListing(ctx context.Context, listingID, buyerID int64, chargeRef string, chargeIntentID int64, feeBP int, now time.Time) (market.ResaleListing, market.Reservation, error) {
	const op = "sell resale listing"
	tx, err := db.begin(ctx)
	if err != nil {
		return market.ResaleListing{}, market.Reservation{}, fail(op, err, "")
	}
	defer tx.Rollback()
	l, err := getResale(ctx, tx, listingID)
	if err != nil {
		return market.ResaleListing{}, market.Reservation{}, fail(op, err, "")
	}
	orig, err := getReservation(ctx, tx, l.ReservationID)
	if err != nil {
		return market.ResaleListing{}, market.Reservation{}, fail(op, err, "")
	}
	if l.SellerID == buyerID {
		return market.ResaleListing{}, market.Reservation{}, invalid("You cannot buy your own listing; withdraw it instead.")
	}
	if !l.Live(orig, now) {
		return market.ResaleListing{}, market.Reservation{}, conflict(msgListingGone)
	}
	l.Fee, l.Credit = market.ResaleSplit(l.Price, feeBP)
	l.BuyerID, l.ChargeRef, l.State, l.SoldAt, l.UpdatedAt = buyerID, chargeRef, market.ListingSold, truncate(now), truncate(now)
	l.CreditDone = l.Credit == 0

	n := market.Reservation{BuyerID: buyerID, State: market.ReservationConfirmed, Pieces: market.ResalePieces(orig, l.From),
		HoldExpiresAt: truncate(now), RequestJSON: orig.RequestJSON, CreatedAt: truncate(now), UpdatedAt: truncate(now),
		ResaleOf: orig.ID}
	if n.ID, err = insertReservation(ctx, tx, n); err != nil {
		return market.ResaleListing{}, market.Reservation{}, fail(op, err, "")
	}
	if _, err := tx.ExecContext(ctx, `UPDATE reservations SET resale_of = ? WHERE id = ?`, orig.ID, n.ID); err != nil {
		return market.ResaleListing{}, market.Reservation{}, fail(op, err, "")
	}
	// The buyer's container is the original's environment without the
	// seller's secrets (market.ResaleRuntime); the seller's container is
	// removed at the hand-over and the buyer's made afresh.
	if rt, ok, err := getReservationRuntime(ctx, tx, orig.ID); err != nil {
		return market.ResaleListing{}, market.Reservation{}, fail(op, err, "")
	} else if ok {
		if err := insertReservationRuntime(ctx, tx, n.ID, market.ResaleRuntime(rt)); err != nil {
			return market.ResaleListing{}, market.Reservation{}, fail(op, err, "")
		}
	}
	// The pieces continue the original contract: its frozen terms and
	// cancellation policy, not what the offer says today.
	for i, p := range orig.Pieces {
		if _, err := tx.ExecContext(ctx, `UPDATE reservation_pieces SET billing_basis = o.billing_basis, uptime_bp = o.uptime_bp,
			credit_cap_bp = o.credit_cap_bp, credit_schedule_json = o.credit_schedule_json, reject_minutes = o.reject_minutes,
			free_cancel_hours = o.free_cancel_hours, cancel_fee_bp = o.cancel_fee_bp, price_cents = o.price_cents,
			interruptible = o.interruptible
			FROM reservation_pieces o WHERE reservation_pieces.id = ? AND o.id = ?`, n.Pieces[i].ID, p.ID); err != nil {
			return market.ResaleListing{}, market.Reservation{}, fail(op, err, "")
		}
	}
	if _, err := tx.ExecContext(ctx, `UPDATE reservations SET resold_at = ?, updated_at = ? WHERE id = ?`,
		unix(l.From), unix(now), orig.ID); err != nil {
		return market.ResaleListing{}, market.Reservation{}, fail(op, err, "")
	}
	l.SoldReservationID = n.ID
	if _, err := tx.ExecContext(ctx, `UPDATE resale_listings SET state = ?, buyer_id = ?, sold_reservation_id = ?, charge_ref = ?,
		fee_cents = ?, credit_cents = ?, credit_done = ?, next_attempt_at = ?, sold_at = ?, updated_at = ? WHERE id = ? AND state = ?`,
		string(l.State), buyerID, n.ID, chargeRef, int64(l.Fee), int64(l.Credit), boolInt(l.CreditDone), unix(now), unix(now), unix(now),
		l.ID, string(market.ListingOpen)); err != nil {
		return market.ResaleListing{}, market.Reservation{}, fail(op, err, "")
	}
	if err := insertEntries(ctx, tx, market.ResaleEntries(l, now)); err != nil {
		return market.ResaleListing{}, market.Reservation{}, fail(op, err, "")
	}
	if err := finishChargeIntent(ctx, tx, chargeIntentID, chargeRef, market.ChargeOutcomeSold, now); err != nil {
		return market.ResaleListing{}, market.Reservation{}, fail(op, err, "")
	}
	if err := insertNotification(ctx, tx, Notification{UserID: l.SellerID, Kind: NotifyRefundSent, CreatedAt: now,
		URL: fmt.Sprintf("/reservations/%d", orig.ID),
		Notice: market.Notice{Kind: market.NoticeResaleSold, Params: market.NoticeParams{Reservation: orig.ID, Start: l.From, End: orig.End(),
			Price: l.Price, Fee: l.Fee, Refund: l.Credit}}}); err != nil {
		return market.ResaleListing{}, market.Reservation{}, fail(op, err, "")
	}
	if err := insertNotification(ctx, tx, Notification{UserID: buyerID, Kind: NotifyBookingConfirmed, CreatedAt: now,
		URL: fmt.Sprintf("/reservations/%d", n.ID),
		Notice: market.Notice{Kind: market.NoticeResaleBought, Params: market.NoticeParams{Reservation: n.ID, Start: l.From, End: orig.End(),
			Price: l.Price}}}); err != nil {
		return market.ResaleListing{}, market.Reservation{}, fail(op, err, "")
	}
	if err := tx.Commit(); err != nil {
		return market.ResaleListing{}, market.Reservation{}, fail(op, err, "")
	}
	return l, n, nil
}

// ResaleCredit is a seller's credit still to refund: the listing and the
// payment it is refunded on (the original reservation's).
type ResaleCredit struct {
	Listing         market.ResaleListing
	PaymentIntentID string
}

// ListDueResaleCredits returns the sold listings whose seller's credit is
// not yet refunded and whose next attempt is due at now.
func (db *DB) ListDueResaleCredits(ctx context.Context, now time.Time) ([]ResaleCredit, error) {
	return db.listResaleCredits(ctx, `AND l.next_attempt_at <= ?`, unix(now))
}

// ListPendingResaleCredits returns every sold listing whose seller's
// credit is not yet refunded, due or not, for reconciliation.
func (db *DB) ListPendingResaleCredits(ctx context.Context) ([]ResaleCredit, error) {
	return db.listResaleCredits(ctx, ``)
}

func (db *DB) listResaleCredits(ctx context.Context, and string, args ...any) ([]ResaleCredit, error) {
	const op = "list resale credits"
	tx, err := db.read(ctx)
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer tx.Rollback()
	args = append([]any{string(market.ListingSold)}, args...)
	out, err := collect(ctx, tx, func(s scanner) (ResaleCredit, error) {
		var c ResaleCredit
		var err error
		c.Listing, err = scanResale(s)
		return c, err
	}, `SELECT `+resaleColumns+` FROM resale_listings l WHERE l.state = ? AND l.credit_done = 0 `+and+` ORDER BY l.id`, args...)
	if err != nil {
		return nil, fail(op, err, "")
	}
	for i := range out {
		pay, err := getPayment(ctx, tx, out[i].Listing.ReservationID)
		if err != nil {
			return nil, fail(op, err, "")
		}
		out[i].PaymentIntentID = pay.PaymentIntentID
	}
	return out, nil
}

// RecordResaleCredit records that the seller's credit of a sale was
// refunded (refundRef): the ledger's refund entry and the step done.
// Recording it again changes nothing.
func (db *DB) RecordResaleCredit(ctx context.Context, listingID int64, refundRef string, now time.Time) error {
	const op = "record resale credit"
	tx, err := db.begin(ctx)
	if err != nil {
		return fail(op, err, "")
	}
	defer tx.Rollback()
	l, err := getResale(ctx, tx, listingID)
	if err != nil {
		return fail(op, err, "")
	}
	if l.State != market.ListingSold {
		return conflict("This listing was not sold.")
	}
	if l.CreditDone {
		return nil
	}
	if err := insertEntries(ctx, tx, []market.LedgerEntry{market.ResaleCreditEntry(l, refundRef, now)}); err != nil {
		return fail(op, err, "")
	}
	if _, err := tx.ExecContext(ctx, `UPDATE resale_listings SET credit_done = 1, credit_ref = ?, last_error = '', updated_at = ? WHERE id = ?`,
		refundRef, unix(now), l.ID); err != nil {
		return fail(op, err, "")
	}
	return fail(op, tx.Commit(), "")
}

// SettleResoldReservations marks settled every reservation bought on
// resale that has completed once its original is settled — its money
// settles in the original's statement — and returns how many.
func (db *DB) SettleResoldReservations(ctx context.Context, now time.Time) (int64, error) {
	const op = "settle resold reservations"
	tx, err := db.begin(ctx)
	if err != nil {
		return 0, fail(op, err, "")
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, `UPDATE reservations SET state = ?, updated_at = ? WHERE resale_of IS NOT NULL AND state = ?
		AND EXISTS (SELECT 1 FROM reservations o WHERE o.id = reservations.resale_of AND o.state = ?)`,
		string(market.ReservationSettled), unix(now), string(market.ReservationCompleted), string(market.ReservationSettled))
	if err != nil {
		return 0, fail(op, err, "")
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fail(op, err, "")
	}
	return n, fail(op, tx.Commit(), "")
}

// ResaleRefund is a buyer's payment for a listing they could not buy after
// all, to refund in full.
type ResaleRefund struct {
	ID              int64
	ListingID       int64
	ReservationID   int64
	BuyerID         int64
	PaymentIntentID string
	Amount          market.Cents
	Done            bool
	Attempts        int
	LastError       string
}

const resaleRefundColumns = `f.id, f.listing_id, f.reservation_id, f.buyer_id, f.payment_intent_id, f.amount_cents, f.state, f.attempts, f.last_error`

func scanResaleRefund(s scanner) (ResaleRefund, error) {
	var f ResaleRefund
	var amount int64
	var state string
	err := s.Scan(&f.ID, &f.ListingID, &f.ReservationID, &f.BuyerID, &f.PaymentIntentID, &amount, &state, &f.Attempts, &f.LastError)
	f.Amount, f.Done = market.Cents(amount), state == string(PaymentRefunded)
	return f, err
}

// RecordUnsoldPayment records, in one transaction, that buyerID paid
// (paymentIntentID, amount) for a listing that was not sold to them: the
// payment in the ledger (market.UnsoldPaymentEntries) and a full refund
// due at now, finishing the charge intent chargeIntentID (0: none).
// Recording the same payment again returns the same refund.
func (db *DB) RecordUnsoldPayment(ctx context.Context, listingID, buyerID int64, paymentIntentID string, amount market.Cents, chargeIntentID int64, now time.Time) (ResaleRefund, error) {
	const op = "record unsold resale payment"
	tx, err := db.begin(ctx)
	if err != nil {
		return ResaleRefund{}, fail(op, err, "")
	}
	defer tx.Rollback()
	l, err := getResale(ctx, tx, listingID)
	if err != nil {
		return ResaleRefund{}, fail(op, err, "")
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO resale_refunds (listing_id, reservation_id, buyer_id, payment_intent_id, amount_cents, state,
		next_attempt_at, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (payment_intent_id) DO NOTHING`,
		l.ID, l.ReservationID, buyerID, paymentIntentID, int64(amount), string(PaymentRefundPending), unix(now), unix(now), unix(now)); err != nil {
		return ResaleRefund{}, fail(op, err, "")
	}
	if err := insertEntries(ctx, tx, market.UnsoldPaymentEntries(l, buyerID, paymentIntentID, amount, "", now)); err != nil {
		return ResaleRefund{}, fail(op, err, "")
	}
	if err := finishChargeIntent(ctx, tx, chargeIntentID, paymentIntentID, market.ChargeOutcomeUnsold, now); err != nil {
		return ResaleRefund{}, fail(op, err, "")
	}
	f, err := scanResaleRefund(tx.QueryRowContext(ctx, `SELECT `+resaleRefundColumns+` FROM resale_refunds f WHERE f.payment_intent_id = ?`, paymentIntentID))
	if err != nil {
		return ResaleRefund{}, fail(op, err, "")
	}
	return f, fail(op, tx.Commit(), "")
}

// ListDueResaleRefunds returns the unsold payments not yet refunded whose
// next attempt is due at now (any time when now is zero).
func (db *DB) ListDueResaleRefunds(ctx context.Context, now time.Time) ([]ResaleRefund, error) {
	const op = "list resale refunds"
	tx, err := db.read(ctx)
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer tx.Rollback()
	due := int64(1) << 62
	if !now.IsZero() {
		due = unix(now)
	}
	fs, err := collect(ctx, tx, scanResaleRefund, `SELECT `+resaleRefundColumns+` FROM resale_refunds f
		WHERE f.state = ? AND f.next_attempt_at <= ? ORDER BY f.id`, string(PaymentRefundPending), due)
	return fs, fail(op, err, "")
}

// RecordResaleRefund records the full refund of an unsold payment: the
// ledger's refund entry and the refund done. Recording it again changes
// nothing.
func (db *DB) RecordResaleRefund(ctx context.Context, id int64, refundRef string, now time.Time) error {
	const op = "record resale refund"
	tx, err := db.begin(ctx)
	if err != nil {
		return fail(op, err, "")
	}
	defer tx.Rollback()
	f, err := scanResaleRefund(tx.QueryRowContext(ctx, `SELECT `+resaleRefundColumns+` FROM resale_refunds f WHERE f.id = ?`, id))
	if err != nil {
		return fail(op, err, "")
	}
	if f.Done {
		return nil
	}
	l := market.ResaleListing{ID: f.ListingID, ReservationID: f.ReservationID}
	if err := insertEntries(ctx, tx, market.UnsoldPaymentEntries(l, f.BuyerID, f.PaymentIntentID, f.Amount, refundRef, now)); err != nil {
		return fail(op, err, "")
	}
	if _, err := tx.ExecContext(ctx, `UPDATE resale_refunds SET state = ?, refund_ref = ?, last_error = '', updated_at = ? WHERE id = ?`,
		string(PaymentRefunded), refundRef, unix(now), id); err != nil {
		return fail(op, err, "")
	}
	if err := insertNotification(ctx, tx, Notification{UserID: f.BuyerID, Kind: NotifyRefundSent, CreatedAt: now, URL: "/resale",
		Notice: market.Notice{Kind: market.NoticeResaleUnsold, Params: market.NoticeParams{Amount: f.Amount}}}); err != nil {
		return fail(op, err, "")
	}
	return fail(op, tx.Commit(), "")
}

// RecordResaleRefundFailure records a failed attempt at refunding an
// unsold payment, to be tried again at next.
func (db *DB) RecordResaleRefundFailure(ctx context.Context, id int64, msg string, next, now time.Time) error {
	const op = "record resale refund failure"
	tx, err := db.begin(ctx)
	if err != nil {
		return fail(op, err, "")
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `UPDATE resale_refunds SET attempts = attempts + 1, last_error = ?, next_attempt_at = ?, updated_at = ?
		WHERE id = ? AND state = ?`, msg, unix(next), unix(now), id, string(PaymentRefundPending)); err != nil {
		return fail(op, err, "")
	}
	return fail(op, tx.Commit(), "")
}

// soldListing returns the sale of reservationID's time, if it was sold.
func soldListing(ctx context.Context, q querier, reservationID int64) (market.ResaleListing, bool, error) {
	l, err := scanResale(q.QueryRowContext(ctx, `SELECT `+resaleColumns+` FROM resale_listings l WHERE l.reservation_id = ? AND l.state = ?`,
		reservationID, string(market.ListingSold)))
	if errors.Is(err, sql.ErrNoRows) {
		return market.ResaleListing{}, false, nil
	}
	return l, err == nil, err
}

// settleResale, inside StartSettlement, settles r under the resale rule
// when its time was sold (market.SettleResold): the acknowledged incidents
// on the bought pieces count on r's pieces at the same positions, beside
// r's own, and each party's refund is capped by what is left on their
// payment (paymentRefunds). st is replaced by that statement, whose
// ResaleCredit is the holder's. It returns the sale (ID 0 when there was
// none, and st is left as it is).
func settleResale(ctx context.Context, tx querier, r market.Reservation, in market.SettlementInput, st *market.Statement) (market.ResaleListing, error) {
	sale, ok, err := soldListing(ctx, tx, r.ID)
	if err != nil || !ok {
		return market.ResaleListing{}, err
	}
	n, err := getReservation(ctx, tx, sale.SoldReservationID)
	if err != nil {
		return market.ResaleListing{}, err
	}
	incs, err := queryIncidents(ctx, tx, `WHERE reservation_id = ?`, n.ID)
	if err != nil {
		return market.ResaleListing{}, err
	}
	onOriginal := map[int64]int64{}
	for i, p := range n.Pieces {
		if i < len(r.Pieces) {
			onOriginal[p.ID] = r.Pieces[i].ID
		}
	}
	full := in
	full.Incidents = append([]market.Incident(nil), in.Incidents...)
	for _, i := range incs {
		inc := i.Incident
		id, ok := onOriginal[inc.PieceID]
		if !ok {
			return market.ResaleListing{}, fmt.Errorf("incident %d is on no piece of reservation %d", inc.ID, n.ID)
		}
		inc.PieceID = id
		full.Incidents = append(full.Incidents, inc)
	}
	seller, err := paymentRefunds(ctx, tx, r)
	if err != nil {
		return market.ResaleListing{}, err
	}
	holder, err := paymentRefunds(ctx, tx, n)
	if err != nil {
		return market.ResaleListing{}, err
	}
	withResold, err := market.SettleResold(full, market.ResaleSettlement{ListingID: sale.ID, HolderID: sale.BuyerID, From: sale.From,
		Price: sale.Price, SellerRefunded: seller.Refunds.Total(), HolderRefunded: holder.Refunds.Total()})
	if err != nil {
		return market.ResaleListing{}, err
	}
	*st = withResold
	return sale, nil
}

// PaymentOf is the payment that paid for a reservation's time and what
// has been refunded or is owed on it: the booking's own payment, or for
// time bought on resale the holder's payment of the listing.
type PaymentOf struct {
	ReservationID   int64 // whose ledger the payment's money sits on: the original's for bought time
	PayerID         int64
	PaymentIntentID string
	Amount          market.Cents
	Refunds         market.PaymentRefunds
}

// FindPaymentOf returns the payment that paid for a reservation's time
// and what is refunded or owed on it (PaymentOf): the booking's own, or
// for time bought on resale the holder's payment of the listing.
func (db *DB) FindPaymentOf(ctx context.Context, reservationID int64) (PaymentOf, error) {
	const op = "find payment of reservation"
	tx, err := db.read(ctx)
	if err != nil {
		return PaymentOf{}, fail(op, err, "")
	}
	defer tx.Rollback()
	r, err := getReservation(ctx, tx, reservationID)
	if err != nil {
		return PaymentOf{}, fail(op, err, "")
	}
	p, err := paymentRefunds(ctx, tx, r)
	return p, fail(op, err, "")
}

// paymentRefunds returns the payment of r's time (PaymentOf) with what is
// refunded or owed on it. For a booking: the settlement's refund to its
// buyer, the seller's credit of a sale of its time, and dispute credits
// granted on it. For time bought on resale: the listing's charge, the SLA
// credit of its hours, and dispute credits granted on it. A booking
// without a payment is not found; bought time without a sale recorded is
// a conflict.
func paymentRefunds(ctx context.Context, q querier, r market.Reservation) (PaymentOf, error) {
	p := PaymentOf{ReservationID: r.ID, PayerID: r.BuyerID}
	var disputes int64
	if err := q.QueryRowContext(ctx, `SELECT COALESCE(SUM(credit_cents), 0) FROM disputes WHERE reservation_id = ? AND status = ?`,
		r.ID, DisputeGranted).Scan(&disputes); err != nil {
		return PaymentOf{}, err
	}
	p.Refunds.Disputes = market.Cents(disputes)
	if r.ResaleOf != 0 {
		l, err := scanResale(q.QueryRowContext(ctx, `SELECT `+resaleColumns+` FROM resale_listings l WHERE l.sold_reservation_id = ? AND l.state = ?`,
			r.ID, string(market.ListingSold)))
		if errors.Is(err, sql.ErrNoRows) {
			return PaymentOf{}, conflict("This time bought on resale has no recorded payment.")
		}
		if err != nil {
			return PaymentOf{}, err
		}
		p.ReservationID, p.PaymentIntentID, p.Amount, p.Refunds.Resale = l.ReservationID, l.ChargeRef, l.Price, l.SLACredit
		return p, nil
	}
	pay, err := getPayment(ctx, q, r.ID)
	if err != nil {
		return PaymentOf{}, err
	}
	p.PaymentIntentID, p.Amount = pay.PaymentIntentID, pay.Amount
	sale, sold, err := soldListing(ctx, q, r.ID)
	if err != nil {
		return PaymentOf{}, err
	}
	if sold {
		p.Refunds.Resale = sale.Credit
	}
	var refund int64
	err = q.QueryRowContext(ctx, `SELECT refund_cents FROM settlements WHERE reservation_id = ?`, r.ID).Scan(&refund)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return PaymentOf{}, err
	}
	p.Refunds.Settlement = market.Cents(refund)
	return p, nil
}

// recordResaleSLACredit marks the sale's SLA credit of st as a step for
// the retrier (nothing when there is none).
func recordResaleSLACredit(ctx context.Context, tx *sql.Tx, sale market.ResaleListing, st market.Statement, now time.Time) error {
	if sale.ID == 0 || st.ResaleCredit <= 0 {
		return nil
	}
	if _, err := tx.ExecContext(ctx, `UPDATE resale_listings SET sla_credit_cents = ?, sla_credit_done = 0, attempts = 0, next_attempt_at = ?,
		updated_at = ? WHERE id = ?`, int64(st.ResaleCredit), unix(now), unix(now), sale.ID); err != nil {
		return err
	}
	return insertNotification(ctx, tx, Notification{UserID: sale.BuyerID, Kind: NotifyStatementReady, CreatedAt: now,
		URL:    fmt.Sprintf("/reservations/%d", sale.SoldReservationID),
		Notice: market.Notice{Kind: market.NoticeResaleSettled, Params: market.NoticeParams{Reservation: sale.SoldReservationID, Amount: st.ResaleCredit}}})
}

// ResaleSLACreditDue is an SLA credit owed to the holder of resold time:
// the sale, the amount and the payment it is refunded on (the buyer's).
type ResaleSLACreditDue struct {
	Listing market.ResaleListing
	Amount  market.Cents
}

// ListDueResaleSLACredits returns the SLA credits of resold time not yet
// refunded whose next attempt is due at now (any time when now is zero).
func (db *DB) ListDueResaleSLACredits(ctx context.Context, now time.Time) ([]ResaleSLACreditDue, error) {
	const op = "list resale sla credits"
	tx, err := db.read(ctx)
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer tx.Rollback()
	due := int64(1) << 62
	if !now.IsZero() {
		due = unix(now)
	}
	out, err := collect(ctx, tx, func(s scanner) (ResaleSLACreditDue, error) {
		l, err := scanResale(s)
		return ResaleSLACreditDue{Listing: l, Amount: l.SLACredit}, err
	}, `SELECT `+resaleColumns+` FROM resale_listings l WHERE l.state = ? AND l.sla_credit_done = 0 AND l.next_attempt_at <= ? ORDER BY l.id`,
		string(market.ListingSold), due)
	return out, fail(op, err, "")
}

// RecordResaleSLARefund records that the SLA credit of resold time was
// refunded to its holder (refundRef): the ledger's refund entry and the
// step done. Recording it again changes nothing.
func (db *DB) RecordResaleSLARefund(ctx context.Context, listingID int64, refundRef string, now time.Time) error {
	const op = "record resale sla refund"
	tx, err := db.begin(ctx)
	if err != nil {
		return fail(op, err, "")
	}
	defer tx.Rollback()
	l, err := getResale(ctx, tx, listingID)
	if err != nil {
		return fail(op, err, "")
	}
	if l.SLACreditDone {
		return nil
	}
	if err := insertEntries(ctx, tx, []market.LedgerEntry{market.ResaleSLARefundEntry(l, l.SLACredit, refundRef, now)}); err != nil {
		return fail(op, err, "")
	}
	if _, err := tx.ExecContext(ctx, `UPDATE resale_listings SET sla_credit_done = 1, sla_credit_ref = ?, last_error = '', updated_at = ? WHERE id = ?`,
		refundRef, unix(now), l.ID); err != nil {
		return fail(op, err, "")
	}
	return fail(op, tx.Commit(), "")
}

// RecordResaleStepFailure records a failed attempt at a resale refund
// step (the seller's credit or the SLA credit), to be tried again at next.
func (db *DB) RecordResaleStepFailure(ctx context.Context, listingID int64, msg string, next, now time.Time) error {
	const op = "record resale step failure"
	tx, err := db.begin(ctx)
	if err != nil {
		return fail(op, err, "")
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `UPDATE resale_listings SET attempts = attempts + 1, last_error = ?, next_attempt_at = ?, updated_at = ?
		WHERE id = ?`, msg, unix(next), unix(now), listingID); err != nil {
		return fail(op, err, "")
	}
	return fail(op, tx.Commit(), "")
}
