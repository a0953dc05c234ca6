package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// SettlementState is where a settlement stands (market.SettlementState).
type SettlementState = market.SettlementState

// Settlement states, as market defines them.
const (
	SettlementPending = market.SettlementPending
	SettlementWaiting = market.SettlementWaiting
	SettlementFailed  = market.SettlementFailed
	SettlementDone    = market.SettlementDone
)

// TransferState is where one provider's payout stands (market.PayoutState).
type TransferState = market.PayoutState

// Transfer states, as market defines them.
const (
	TransferPending = market.PayoutPending
	TransferHeld    = market.PayoutHeld
	TransferFrozen  = market.PayoutFrozen
	TransferDone    = market.PayoutDone
)

// Settlement is a reservation's settlement: the statement and the state of
// every money movement it needs.
type Settlement struct {
	ReservationID int64
	BuyerID       int64
	Statement     market.Statement
	RefundCents   market.Cents
	RefundDone    bool
	RefundRef     string
	// PaymentIntentID is the payment the refund goes back to.
	PaymentIntentID string
	State           SettlementState
	Attempts        int
	NextAttemptAt   time.Time
	LastError       string
	Transfers       []SettlementTransfer
	CreatedAt       time.Time
	UpdatedAt       time.Time
	SettledAt       time.Time
}

// SettlementTransfer is one provider's payout of a settlement.
type SettlementTransfer struct {
	ProviderID int64
	Amount     market.Cents
	Fee        market.Cents
	State      TransferState
	Ref        string // the processor's transfer id once made
	AccountID  string // the provider's connected account, if any
}

const settlementColumns = `s.reservation_id, r.buyer_id, s.statement_json, s.refund_cents, s.refund_done, s.refund_ref,
	COALESCE(pay.payment_intent_id, ''), s.state, s.attempts, s.next_attempt_at, s.last_error, s.created_at, s.updated_at,
	COALESCE(s.settled_at, 0)`

const settlementFrom = ` FROM settlements s JOIN reservations r ON r.id = s.reservation_id
	LEFT JOIN payments pay ON pay.reservation_id = s.reservation_id `

func querySettlements(ctx context.Context, q querier, where string, args ...any) ([]Settlement, error) {
	rows, err := q.QueryContext(ctx, `SELECT `+settlementColumns+settlementFrom+where+` ORDER BY s.reservation_id`, args...)
	if err != nil {
		return nil, err
	}
	var out []Settlement
	for rows.Next() {
		var s Settlement
		var stmt, state string
		var refund, next, created, updated, settled int64
		if err := rows.Scan(&s.ReservationID, &s.BuyerID, &stmt, &refund, &s.RefundDone, &s.RefundRef, &s.PaymentIntentID,
			&state, &s.Attempts, &next, &s.LastError, &created, &updated, &settled); err != nil {
			rows.Close()
			return nil, err
		}
		if err := json.Unmarshal([]byte(stmt), &s.Statement); err != nil {
			rows.Close()
			return nil, fmt.Errorf("statement of reservation %d: %w", s.ReservationID, err)
		}
		s.RefundCents, s.State = market.Cents(refund), SettlementState(state)
		s.NextAttemptAt, s.CreatedAt, s.UpdatedAt = fromUnix(next), fromUnix(created), fromUnix(updated)
		if settled != 0 {
			s.SettledAt = fromUnix(settled)
		}
		out = append(out, s)
	}
	if err := closeRows(rows); err != nil {
		return nil, err
	}
	for i := range out {
		ts, err := queryTransfers(ctx, q, out[i].ReservationID)
		if err != nil {
			return nil, err
		}
		out[i].Transfers = ts
	}
	return out, nil
}

func queryTransfers(ctx context.Context, q querier, reservationID int64) ([]SettlementTransfer, error) {
	rows, err := q.QueryContext(ctx, `SELECT t.provider_id, t.amount_cents, t.fee_cents, t.state, t.transfer_ref, COALESCE(a.account_id, '')
		FROM settlement_transfers t LEFT JOIN payout_accounts a ON a.provider_id = t.provider_id
		WHERE t.reservation_id = ? ORDER BY t.provider_id`, reservationID)
	if err != nil {
		return nil, err
	}
	var out []SettlementTransfer
	for rows.Next() {
		var t SettlementTransfer
		var amount, fee int64
		var state string
		if err := rows.Scan(&t.ProviderID, &amount, &fee, &state, &t.Ref, &t.AccountID); err != nil {
			rows.Close()
			return nil, err
		}
		t.Amount, t.Fee, t.State = market.Cents(amount), market.Cents(fee), TransferState(state)
		out = append(out, t)
	}
	return out, closeRows(rows)
}

func getSettlement(ctx context.Context, q querier, reservationID int64) (Settlement, error) {
	ss, err := querySettlements(ctx, q, `WHERE s.reservation_id = ?`, reservationID)
	if err != nil {
		return Settlement{}, err
	}
	if len(ss) == 0 {
		return Settlement{}, notFound(msgSettlementNotFound)
	}
	return ss[0], nil
}

// FindSettlement returns a reservation's settlement.
func (db *DB) FindSettlement(ctx context.Context, reservationID int64) (Settlement, error) {
	const op = "find settlement"
	tx, err := db.read(ctx)
	if err != nil {
		return Settlement{}, fail(op, err, "")
	}
	defer tx.Rollback()
	s, err := getSettlement(ctx, tx, reservationID)
	return s, fail(op, err, "")
}

// ListSettlements returns every settlement not done, then the done ones,
// each by reservation, for admins.
func (db *DB) ListSettlements(ctx context.Context) ([]Settlement, error) {
	const op = "list settlements"
	tx, err := db.read(ctx)
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer tx.Rollback()
	ss, err := querySettlements(ctx, tx, `WHERE s.state <> ?`, string(SettlementDone))
	if err != nil {
		return nil, fail(op, err, "")
	}
	done, err := querySettlements(ctx, tx, `WHERE s.state = ?`, string(SettlementDone))
	return append(ss, done...), fail(op, err, "")
}

// ListDueSettlements returns the pending settlements whose next attempt is
// due at now.
func (db *DB) ListDueSettlements(ctx context.Context, now time.Time) ([]Settlement, error) {
	const op = "list due settlements"
	tx, err := db.read(ctx)
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer tx.Rollback()
	ss, err := querySettlements(ctx, tx, `WHERE s.state = ? AND s.next_attempt_at <= ?`, string(SettlementPending), unix(now))
	return ss, fail(op, err, "")
}

// SettlementBacklog counts the settlements the retrier has work on:
// pending with no failed attempt yet (Due), pending after a failed attempt
// (Retrying), and given up, waiting for an admin (Failed).
type SettlementBacklog struct {
	Due, Retrying, Failed int
}

// CountSettlementBacklog returns the retrier's backlog, for monitoring.
func (db *DB) CountSettlementBacklog(ctx context.Context) (SettlementBacklog, error) {
	const op = "count settlement backlog"
	tx, err := db.read(ctx)
	if err != nil {
		return SettlementBacklog{}, fail(op, err, "")
	}
	defer tx.Rollback()
	var b SettlementBacklog
	err = tx.QueryRowContext(ctx, `SELECT
		COALESCE(SUM(CASE WHEN state = ? AND attempts = 0 THEN 1 ELSE 0 END), 0),
		COALESCE(SUM(CASE WHEN state = ? AND attempts > 0 THEN 1 ELSE 0 END), 0),
		COALESCE(SUM(CASE WHEN state = ? THEN 1 ELSE 0 END), 0)
		FROM settlements WHERE state IN (?, ?)`,
		string(SettlementPending), string(SettlementPending), string(SettlementFailed),
		string(SettlementPending), string(SettlementFailed)).Scan(&b.Due, &b.Retrying, &b.Failed)
	return b, fail(op, err, "")
}

// pendingIncidentsWhere selects, on reservations aliased r, those with a
// buyer report neither acknowledged nor turned into a dispute.
// Reports on time bought on resale (reservations whose resale_of is r)
// count too: they settle with r.
const pendingIncidentsWhere = `EXISTS (SELECT 1 FROM incidents i WHERE (i.reservation_id = r.id
	OR i.reservation_id IN (SELECT n.id FROM reservations n WHERE n.resale_of = r.id)) AND i.acknowledged = 0 AND i.disputed_at IS NULL)`

// ListSettleable returns the completed reservations ready to settle: paid,
// not yet settling, and with no buyer report still awaiting the provider.
func (db *DB) ListSettleable(ctx context.Context) ([]int64, error) {
	const op = "list settleable"
	tx, err := db.read(ctx)
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx, `SELECT r.id FROM reservations r WHERE r.state = ?
		AND EXISTS (SELECT 1 FROM payments pay WHERE pay.reservation_id = r.id AND pay.status = ?)
		AND NOT EXISTS (SELECT 1 FROM settlements s WHERE s.reservation_id = r.id) AND NOT `+pendingIncidentsWhere+` ORDER BY r.id`,
		string(market.ReservationCompleted), string(PaymentPaid))
	if err != nil {
		return nil, fail(op, err, "")
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return nil, fail(op, err, "")
		}
		ids = append(ids, id)
	}
	return ids, fail(op, closeRows(rows), "")
}

// StartSettlement settles a completed reservation's accounts, in one
// transaction: market.Settle over the pieces, each piece's offer terms, the
// incidents and the platform fee; the statement, the refund and each
// provider's payout stored as steps to do; and the credit and fee entries
// written to the ledger (they move no money). A provider payout is held
// while the provider has not finished onboarding and frozen while a dispute
// is open. Starting a settlement that exists returns it unchanged. A buyer
// report still awaiting the provider, or a reservation without a payment,
// is a conflict.
func (db *DB) StartSettlement(ctx context.Context, reservationID int64, feeBP int, now time.Time) (Settlement, error) {
	const op = "start settlement"
	tx, err := db.begin(ctx)
	if err != nil {
		return Settlement{}, fail(op, err, "")
	}
	defer tx.Rollback()
	if s, err := getSettlement(ctx, tx, reservationID); err == nil {
		return s, nil
	} else if market.ErrorCode(err) != market.CodeNotFound {
		return Settlement{}, fail(op, err, "")
	}
	r, err := getReservation(ctx, tx, reservationID)
	if err != nil {
		return Settlement{}, fail(op, err, "")
	}
	if r.State != market.ReservationCompleted {
		return Settlement{}, conflict(fmt.Sprintf("%s reservation cannot be settled.", r.State.LabelWithArticle()))
	}
	var waiting int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM reservations r WHERE r.id = ? AND `+pendingIncidentsWhere, r.ID).Scan(&waiting); err != nil {
		return Settlement{}, fail(op, err, "")
	}
	if waiting > 0 {
		return Settlement{}, conflict("Settlement waits for the provider to acknowledge the buyer's incident reports.")
	}
	pay, err := getPayment(ctx, tx, r.ID)
	if err != nil && market.ErrorCode(err) != market.CodeNotFound {
		return Settlement{}, fail(op, err, "")
	}
	if err != nil || pay.Status != PaymentPaid || pay.PaymentIntentID == "" {
		return Settlement{}, conflict("This reservation has no completed payment to settle.")
	}
	// The terms frozen on the pieces at booking, not the offer's current
	// ones. A reservation's pieces on one offer are booked in one
	// transaction, so they share their terms.
	terms := map[int64]market.SLATerms{}
	for _, p := range r.Pieces {
		terms[p.OfferID] = p.Terms
	}
	incs, err := queryIncidents(ctx, tx, `WHERE reservation_id = ?`, r.ID)
	if err != nil {
		return Settlement{}, fail(op, err, "")
	}
	in := market.SettlementInput{Reservation: r, Terms: terms, PlatformFeeBP: feeBP}
	for _, i := range incs {
		in.Incidents = append(in.Incidents, i.Incident)
	}
	st, err := market.Settle(in)
	if err != nil {
		return Settlement{}, fail(op, err, "")
	}
	// Resold time's incidents settle here, their credit to its holder (resale.go).
	sale, err := settleResale(ctx, tx, r, in, &st)
	if err != nil {
		return Settlement{}, fail(op, err, "")
	}
	if err := insertSettlement(ctx, tx, st, now); err != nil {
		return Settlement{}, fail(op, err, "")
	}
	if err := recordResaleSLACredit(ctx, tx, sale, st, now); err != nil {
		return Settlement{}, fail(op, err, "")
	}
	if err := notifyStatement(ctx, tx, st, now); err != nil {
		return Settlement{}, fail(op, err, "")
	}
	s, err := getSettlement(ctx, tx, r.ID)
	if err != nil {
		return Settlement{}, fail(op, err, "")
	}
	return s, fail(op, tx.Commit(), "")
}

// insertSettlement stores a new statement as a settlement to carry out: the
// refund and each provider's payout as steps (a zero payout is a step
// already done; a payout is frozen while a dispute of the reservation is
// open, held while the provider has not finished onboarding), and the
// credit and fee entries written to the ledger (they move no money).
func insertSettlement(ctx context.Context, tx *sql.Tx, st market.Statement, now time.Time) error {
	stmt, err := json.Marshal(st)
	if err != nil {
		return err
	}
	disputes, err := openDisputes(ctx, tx, st.ReservationID)
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO settlements (reservation_id, statement_json, refund_cents, refund_done, state,
		next_attempt_at, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
		st.ReservationID, string(stmt), int64(st.Refund-st.ResaleCredit), boolInt(st.Refund-st.ResaleCredit == 0), string(SettlementPending), unix(now), unix(now), unix(now)); err != nil {
		return err
	}
	for _, pp := range st.Payouts() {
		state, err := payoutState(ctx, tx, pp.ProviderID, pp.Payout, disputes > 0)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO settlement_transfers (reservation_id, provider_id, amount_cents, fee_cents, state)
			VALUES (?, ?, ?, ?, ?)`, st.ReservationID, pp.ProviderID, int64(pp.Payout), int64(pp.Fee), string(state)); err != nil {
			return err
		}
		if state == TransferHeld {
			if err := insertNotification(ctx, tx, Notification{UserID: pp.ProviderID, Kind: NotifyPayoutHeld, CreatedAt: now,
				URL:    "/provider/reservations",
				Notice: market.Notice{Kind: market.NoticePayoutHeld, Params: market.NoticeParams{Reservation: st.ReservationID, Payout: pp.Payout}}}); err != nil {
				return err
			}
		}
	}
	var bookkeeping []market.LedgerEntry
	for _, e := range market.SettlementEntries(st, now) {
		if e.Kind == market.EntryCredit || e.Kind == market.EntryFee || e.Kind == market.EntryResale {
			bookkeeping = append(bookkeeping, e)
		}
	}
	if err := insertEntries(ctx, tx, bookkeeping); err != nil {
		return err
	}
	return finishSettlement(ctx, tx, st.ReservationID, now)
}

// payoutState is where a provider's payout of amount starts
// (market.PayoutStateFor), with the provider's onboarding as recorded.
func payoutState(ctx context.Context, tx *sql.Tx, providerID int64, amount market.Cents, disputed bool) (TransferState, error) {
	onboarded, err := providerOnboarded(ctx, tx, providerID)
	if err != nil {
		return "", err
	}
	return market.PayoutStateFor(amount, disputed, onboarded), nil
}

// freezePayouts freezes a reservation's payouts not yet sent
// (market.PayoutFrozen) when a dispute of it opens.
func freezePayouts(ctx context.Context, tx *sql.Tx, reservationID int64) error {
	_, err := tx.ExecContext(ctx, `UPDATE settlement_transfers SET state = ? WHERE reservation_id = ? AND state IN (?, ?)`,
		string(TransferFrozen), reservationID, string(TransferPending), string(TransferHeld))
	return err
}

// providerOnboarded reports whether the provider can be paid out.
func providerOnboarded(ctx context.Context, tx *sql.Tx, providerID int64) (bool, error) {
	acct, err := getPayoutAccount(ctx, tx, providerID)
	if market.ErrorCode(err) == market.CodeNotFound {
		return false, nil
	}
	return err == nil && acct.Onboarded(), err
}

// saveStatement replaces a settlement's statement with st (after a dispute
// credit) and brings every payout not yet sent in line with it: the new
// amount and fee, and done when nothing is left to pay.
func saveStatement(ctx context.Context, tx *sql.Tx, reservationID int64, st market.Statement, now time.Time) error {
	stmt, err := json.Marshal(st)
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE settlements SET statement_json = ?, updated_at = ? WHERE reservation_id = ?`,
		string(stmt), unix(now), reservationID); err != nil {
		return err
	}
	for _, pp := range st.Payouts() {
		if _, err := tx.ExecContext(ctx, `UPDATE settlement_transfers SET amount_cents = ?, fee_cents = ?,
			state = CASE WHEN ? <= 0 THEN ? ELSE state END
			WHERE reservation_id = ? AND provider_id = ? AND state <> ?`,
			int64(pp.Payout), int64(pp.Fee), int64(pp.Payout), string(TransferDone), reservationID, pp.ProviderID, string(TransferDone)); err != nil {
			return err
		}
	}
	return finishSettlement(ctx, tx, reservationID, now)
}

// finishSettlement sets the settlement's state from its steps: done (and
// the reservation settled) when the refund and every payout are made;
// waiting when only held or frozen payouts are left; pending otherwise.
func finishSettlement(ctx context.Context, tx *sql.Tx, reservationID int64, now time.Time) error {
	var refundDone bool
	var state string
	if err := tx.QueryRowContext(ctx, `SELECT refund_done, state FROM settlements WHERE reservation_id = ?`, reservationID).Scan(&refundDone, &state); err != nil {
		return err
	}
	ts, err := queryTransfers(ctx, tx, reservationID)
	if err != nil {
		return err
	}
	payouts := make([]market.PayoutState, len(ts))
	for i, t := range ts {
		payouts[i] = t.State
	}
	next := market.NextSettlementState(SettlementState(state), refundDone, payouts)
	if next == SettlementDone {
		if _, err := tx.ExecContext(ctx, `UPDATE settlements SET state = ?, last_error = '', settled_at = ?, updated_at = ? WHERE reservation_id = ?`,
			string(next), unix(now), unix(now), reservationID); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `UPDATE reservations SET state = ?, updated_at = ? WHERE id = ? AND state = ?`,
			string(market.ReservationSettled), unix(now), reservationID, string(market.ReservationCompleted))
		return err
	}
	_, err = tx.ExecContext(ctx, `UPDATE settlements SET state = ?, updated_at = ? WHERE reservation_id = ?`, string(next), unix(now), reservationID)
	return err
}

// RecordSettlementRefund records that the settlement's refund was made:
// the refund ledger entry, referencing the processor's refund, and the step
// marked done. Recording it again changes nothing.
func (db *DB) RecordSettlementRefund(ctx context.Context, reservationID int64, refundRef string, now time.Time) (Settlement, error) {
	const op = "record settlement refund"
	tx, err := db.begin(ctx)
	if err != nil {
		return Settlement{}, fail(op, err, "")
	}
	defer tx.Rollback()
	s, err := getSettlement(ctx, tx, reservationID)
	if err != nil {
		return Settlement{}, fail(op, err, "")
	}
	if !s.RefundDone {
		for _, e := range market.SettlementEntries(s.Statement, now) {
			if e.Kind == market.EntryRefund {
				e.StripeRef = refundRef
				if err := insertEntries(ctx, tx, []market.LedgerEntry{e}); err != nil {
					return Settlement{}, fail(op, err, "")
				}
			}
		}
		if _, err := tx.ExecContext(ctx, `UPDATE settlements SET refund_done = 1, refund_ref = ?, updated_at = ? WHERE reservation_id = ?`,
			refundRef, unix(now), reservationID); err != nil {
			return Settlement{}, fail(op, err, "")
		}
		if err := finishSettlement(ctx, tx, reservationID, now); err != nil {
			return Settlement{}, fail(op, err, "")
		}
	}
	if s, err = getSettlement(ctx, tx, reservationID); err != nil {
		return Settlement{}, fail(op, err, "")
	}
	return s, fail(op, tx.Commit(), "")
}

// RecordSettlementTransfer records that a provider's payout was made: the
// transfer ledger entry, referencing the processor's transfer, and the step
// marked done. Recording it again changes nothing.
func (db *DB) RecordSettlementTransfer(ctx context.Context, reservationID, providerID int64, transferRef string, now time.Time) (Settlement, error) {
	const op = "record settlement transfer"
	tx, err := db.begin(ctx)
	if err != nil {
		return Settlement{}, fail(op, err, "")
	}
	defer tx.Rollback()
	s, err := getSettlement(ctx, tx, reservationID)
	if err != nil {
		return Settlement{}, fail(op, err, "")
	}
	for _, t := range s.Transfers {
		if t.ProviderID != providerID || t.State == TransferDone {
			continue
		}
		if t.State != TransferPending {
			return Settlement{}, conflict("This payout is held or frozen and cannot be recorded as sent.")
		}
		// The entry is for the amount actually sent: the payout as it
		// stands after any dispute credit, not the first statement's.
		if err := insertEntries(ctx, tx, market.TransferEntry(reservationID, providerID, t.Amount, transferRef, now)); err != nil {
			return Settlement{}, fail(op, err, "")
		}
		if _, err := tx.ExecContext(ctx, `UPDATE settlement_transfers SET state = ?, transfer_ref = ? WHERE reservation_id = ? AND provider_id = ?`,
			string(TransferDone), transferRef, reservationID, providerID); err != nil {
			return Settlement{}, fail(op, err, "")
		}
		if err := finishSettlement(ctx, tx, reservationID, now); err != nil {
			return Settlement{}, fail(op, err, "")
		}
	}
	if s, err = getSettlement(ctx, tx, reservationID); err != nil {
		return Settlement{}, fail(op, err, "")
	}
	return s, fail(op, tx.Commit(), "")
}

// RecordSettlementFailure records a failed attempt at a settlement step:
// the error (for admins; never shown to buyers or providers), one more
// attempt, and the next attempt at next; with giveUp the settlement is
// failed until an admin retries it.
func (db *DB) RecordSettlementFailure(ctx context.Context, reservationID int64, msg string, next time.Time, giveUp bool, now time.Time) error {
	const op = "record settlement failure"
	tx, err := db.begin(ctx)
	if err != nil {
		return fail(op, err, "")
	}
	defer tx.Rollback()
	state := SettlementPending
	if giveUp {
		state = SettlementFailed
	}
	if _, err := tx.ExecContext(ctx, `UPDATE settlements SET state = ?, attempts = attempts + 1, last_error = ?, next_attempt_at = ?,
		updated_at = ? WHERE reservation_id = ? AND state = ?`,
		string(state), msg, unix(next), unix(now), reservationID, string(SettlementPending)); err != nil {
		return fail(op, err, "")
	}
	return fail(op, tx.Commit(), "")
}

// RetrySettlement puts a failed settlement back to pending, due at now,
// with its attempts reset (an admin's decision).
func (db *DB) RetrySettlement(ctx context.Context, reservationID int64, now time.Time) error {
	const op = "retry settlement"
	tx, err := db.begin(ctx)
	if err != nil {
		return fail(op, err, "")
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, `UPDATE settlements SET state = ?, attempts = 0, next_attempt_at = ?, updated_at = ?
		WHERE reservation_id = ? AND state = ?`, string(SettlementPending), unix(now), unix(now), reservationID, string(SettlementFailed))
	if err != nil {
		return fail(op, err, "")
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return conflict("Only a failed settlement can be retried.")
	}
	return fail(op, tx.Commit(), "")
}

// notifyStatement tells the buyer and each provider that a reservation's
// statement is ready, with the refund and the payouts it makes.
func notifyStatement(ctx context.Context, tx *sql.Tx, st market.Statement, now time.Time) error {
	msg := market.Notice{Kind: market.NoticeStatementBuyer, Params: market.NoticeParams{Reservation: st.ReservationID, Paid: st.Paid,
		Refund: st.Refund - st.ResaleCredit, Credit: st.ResaleCredit}}
	if st.Refund == 0 {
		msg = market.Notice{Kind: market.NoticeStatementNoRefund, Params: market.NoticeParams{Reservation: st.ReservationID, Paid: st.Paid}}
	}
	if err := insertNotification(ctx, tx, Notification{UserID: st.BuyerID, Kind: NotifyStatementReady, CreatedAt: now,
		URL: fmt.Sprintf("/reservations/%d/statement", st.ReservationID), Notice: msg}); err != nil {
		return err
	}
	for _, pp := range st.Payouts() {
		if err := insertNotification(ctx, tx, Notification{UserID: pp.ProviderID, Kind: NotifyStatementReady, CreatedAt: now,
			URL: fmt.Sprintf("/provider/bookings/%d/statement", st.ReservationID),
			Notice: market.Notice{Kind: market.NoticeStatementProvider, Params: market.NoticeParams{Reservation: st.ReservationID, Kept: pp.Kept,
				Fee: pp.Fee, Payout: pp.Payout}}}); err != nil {
			return err
		}
	}
	return nil
}
