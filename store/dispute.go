package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// Dispute outcomes an admin decides, beside DisputeOpen, and the source of
// a dispute a buyer opens.
const (
	DisputeGranted     = "granted"  // a credit was granted to the buyer
	DisputeRejected    = "rejected" // no credit
	DisputeSourceBuyer = "buyer"
)

// Refund states of a granted credit.
const (
	DisputeRefundPending = "pending" // granted; the processor has not confirmed the refund yet
	DisputeRefundDone    = "done"
)

const msgDisputeNotFound = "That dispute could not be found."

// DisputeCase is a dispute with everything the parties and the admin see:
// billing's Dispute plus the reason, the decision, the refund and the
// parties' statements.
type DisputeCase struct {
	Dispute
	Reason         market.DisputeReason
	OpenedBy       int64
	CreditCents    market.Cents
	DecisionReason string
	DecidedBy      int64
	DecidedAt      time.Time
	RefundState    string
	RefundRef      string
	BuyerID        int64
	BuyerName      string
	ProviderIDs    []int64
	Messages       []DisputeMessage
}

// Decided reports whether an admin has decided the dispute.
func (d DisputeCase) Decided() bool { return d.Status == DisputeGranted || d.Status == DisputeRejected }

// DisputeMessage is a statement of one party after the opening one.
type DisputeMessage struct {
	AuthorID   int64
	AuthorName string
	Role       string // "buyer" or "provider"
	Body       string
	CreatedAt  time.Time
}

const disputeCaseColumns = `d.id, d.reservation_id, d.source, COALESCE(d.stripe_dispute_id, ''), COALESCE(d.incident_id, 0), d.status,
	d.statement, d.created_at, d.reason, COALESCE(d.opened_by, 0), d.credit_cents, d.decision_reason, COALESCE(d.decided_by, 0),
	COALESCE(d.decided_at, 0), d.refund_state, d.refund_ref, r.buyer_id, u.display_name, d.amount_cents, d.bank_outcome`

const disputeCaseFrom = ` FROM disputes d JOIN reservations r ON r.id = d.reservation_id JOIN users u ON u.id = r.buyer_id `

func queryDisputeCases(ctx context.Context, q querier, where string, args ...any) ([]DisputeCase, error) {
	rows, err := q.QueryContext(ctx, `SELECT `+disputeCaseColumns+disputeCaseFrom+where, args...)
	if err != nil {
		return nil, err
	}
	var out []DisputeCase
	for rows.Next() {
		var d DisputeCase
		var reason string
		var created, decided, credit, amount int64
		if err := rows.Scan(&d.ID, &d.ReservationID, &d.Source, &d.StripeDisputeID, &d.IncidentID, &d.Status, &d.Statement, &created,
			&reason, &d.OpenedBy, &credit, &d.DecisionReason, &d.DecidedBy, &decided, &d.RefundState, &d.RefundRef, &d.BuyerID, &d.BuyerName,
			&amount, &d.BankOutcome); err != nil {
			rows.Close()
			return nil, err
		}
		d.Reason, d.CreditCents, d.CreatedAt, d.AmountCents = market.DisputeReason(reason), market.Cents(credit), fromUnix(created), market.Cents(amount)
		switch {
		case d.Reason == "" && d.Source == DisputeSourceStripe:
			d.Reason = market.DisputeChargeback
		case d.Reason == "" && d.Source == DisputeSourceIncident:
			d.Reason = market.DisputeUnacknowledgedIncident
		}
		if decided != 0 {
			d.DecidedAt = fromUnix(decided)
		}
		out = append(out, d)
	}
	if err := closeRows(rows); err != nil {
		return nil, err
	}
	for i := range out {
		if out[i].ProviderIDs, err = reservationProviders(ctx, q, out[i].ReservationID); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func reservationProviders(ctx context.Context, q querier, reservationID int64) ([]int64, error) {
	rows, err := q.QueryContext(ctx, `SELECT DISTINCT provider_id FROM reservation_pieces WHERE reservation_id = ? ORDER BY provider_id`, reservationID)
	if err != nil {
		return nil, err
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, closeRows(rows)
}

// getDisputeCase loads one dispute with its statements.
func getDisputeCase(ctx context.Context, q querier, id int64) (DisputeCase, error) {
	ds, err := queryDisputeCases(ctx, q, `WHERE d.id = ?`, id)
	if err != nil {
		return DisputeCase{}, err
	}
	if len(ds) == 0 {
		return DisputeCase{}, notFound(msgDisputeNotFound)
	}
	d := ds[0]
	rows, err := q.QueryContext(ctx, `SELECT m.author_id, u.display_name, m.role, m.body, m.created_at
		FROM dispute_messages m JOIN users u ON u.id = m.author_id WHERE m.dispute_id = ? ORDER BY m.id`, id)
	if err != nil {
		return DisputeCase{}, err
	}
	for rows.Next() {
		var m DisputeMessage
		var at int64
		if err := rows.Scan(&m.AuthorID, &m.AuthorName, &m.Role, &m.Body, &at); err != nil {
			rows.Close()
			return DisputeCase{}, err
		}
		m.CreatedAt = fromUnix(at)
		d.Messages = append(d.Messages, m)
	}
	return d, closeRows(rows)
}

// FindDispute returns a dispute with its statements. Callers decide who
// may see it (the buyer, a provider of the reservation, an admin).
func (db *DB) FindDispute(ctx context.Context, id int64) (DisputeCase, error) {
	const op = "find dispute"
	tx, err := db.read(ctx)
	if err != nil {
		return DisputeCase{}, fail(op, err, "")
	}
	defer tx.Rollback()
	d, err := getDisputeCase(ctx, tx, id)
	return d, fail(op, err, "")
}

// ListDisputes returns every dispute: the open ones oldest first, then the
// decided ones newest first.
func (db *DB) ListDisputes(ctx context.Context) ([]DisputeCase, error) {
	const op = "list disputes"
	tx, err := db.read(ctx)
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer tx.Rollback()
	ds, err := queryDisputeCases(ctx, tx, `ORDER BY d.status = ? DESC, CASE WHEN d.status = ? THEN d.id ELSE -d.id END`, DisputeOpen, DisputeOpen)
	return ds, fail(op, err, "")
}

// ListReservationDisputeCases returns a reservation's disputes, oldest first.
func (db *DB) ListReservationDisputeCases(ctx context.Context, reservationID int64) ([]DisputeCase, error) {
	const op = "list reservation dispute cases"
	tx, err := db.read(ctx)
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer tx.Rollback()
	ds, err := queryDisputeCases(ctx, tx, `WHERE d.reservation_id = ? ORDER BY d.id`, reservationID)
	return ds, fail(op, err, "")
}

// OpenDispute opens a buyer's dispute on their paid reservation, with a
// reason and a statement, in one transaction: provider payouts of the
// reservation not yet made are frozen until an admin decides, and the
// providers are notified. Another buyer's reservation is not found; an
// unpaid one, or one with an open dispute of the buyer already, is a
// conflict.
func (db *DB) OpenDispute(ctx context.Context, buyerID, reservationID int64, reason market.DisputeReason, statement string, now time.Time) (DisputeCase, error) {
	const op = "open dispute"
	valid := false
	for _, r := range market.DisputeReasons {
		valid = valid || r == reason
	}
	if !valid {
		return DisputeCase{}, &market.Error{Code: market.CodeInvalid, Message: "Please correct the highlighted fields.",
			Fields: map[string]string{"reason": "Choose what the dispute is about."}}
	}
	statement, err := market.ValidateDisputeStatement(statement)
	if err != nil {
		return DisputeCase{}, err
	}
	tx, err := db.begin(ctx)
	if err != nil {
		return DisputeCase{}, fail(op, err, "")
	}
	defer tx.Rollback()

	r, err := getBuyerReservation(ctx, tx, buyerID, reservationID)
	if err != nil {
		return DisputeCase{}, fail(op, err, "")
	}
	// Time bought on resale was paid by the listing's charge; its money
	// settles with the original booking, whose payouts the dispute freezes.
	paid, err := paymentRefunds(ctx, tx, r)
	if code := market.ErrorCode(err); code == market.CodeNotFound || code == market.CodeConflict {
		return DisputeCase{}, conflict("Only a paid reservation can be disputed.")
	}
	if err != nil {
		return DisputeCase{}, fail(op, err, "")
	}
	if r.ResaleOf == 0 {
		pay, err := getPayment(ctx, tx, r.ID)
		if err != nil {
			return DisputeCase{}, fail(op, err, "")
		}
		if pay.Status != PaymentPaid {
			return DisputeCase{}, conflict("Only a paid reservation can be disputed.")
		}
	}
	var open int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM disputes WHERE reservation_id = ? AND source = ? AND status = ?`,
		r.ID, DisputeSourceBuyer, DisputeOpen).Scan(&open); err != nil {
		return DisputeCase{}, fail(op, err, "")
	}
	if open > 0 {
		return DisputeCase{}, conflict("You already have an open dispute on this reservation; add to it instead.")
	}
	var id int64
	if err := tx.QueryRowContext(ctx, `INSERT INTO disputes (reservation_id, source, status, statement, created_at, opened_by, reason)
		VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id`, r.ID, DisputeSourceBuyer, DisputeOpen, statement, unix(now), buyerID, string(reason)).Scan(&id); err != nil {
		return DisputeCase{}, fail(op, err, "")
	}
	if err := freezePayouts(ctx, tx, paid.ReservationID); err != nil {
		return DisputeCase{}, fail(op, err, "")
	}
	providers, err := reservationProviders(ctx, tx, r.ID)
	if err != nil {
		return DisputeCase{}, fail(op, err, "")
	}
	for _, p := range providers {
		if err := insertNotification(ctx, tx, Notification{UserID: p, Kind: NotifyDisputeOpened, CreatedAt: now, URL: fmt.Sprintf("/disputes/%d", id),
			Notice: market.Notice{Kind: market.NoticeDisputeOpened, Params: market.NoticeParams{Reservation: r.ID, Dispute: reason}}}); err != nil {
			return DisputeCase{}, fail(op, err, "")
		}
	}
	d, err := getDisputeCase(ctx, tx, id)
	if err != nil {
		return DisputeCase{}, fail(op, err, "")
	}
	return d, fail(op, tx.Commit(), "")
}

// AddDisputeStatement adds a statement of a party to an open dispute — the
// reservation's buyer or one of its providers; anyone else is not found —
// and notifies the other side.
func (db *DB) AddDisputeStatement(ctx context.Context, userID, disputeID int64, body string, now time.Time) error {
	const op = "add dispute statement"
	body, err := market.ValidateDisputeStatement(body)
	if err != nil {
		return err
	}
	tx, err := db.begin(ctx)
	if err != nil {
		return fail(op, err, "")
	}
	defer tx.Rollback()
	d, err := getDisputeCase(ctx, tx, disputeID)
	if err != nil {
		return fail(op, err, "")
	}
	role := ""
	if d.BuyerID == userID {
		role = "buyer"
	}
	for _, p := range d.ProviderIDs {
		if p == userID {
			role = "provider"
		}
	}
	if role == "" {
		return notFound(msgDisputeNotFound)
	}
	if d.Status != DisputeOpen {
		return conflict("This dispute has been decided; statements are closed.")
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO dispute_messages (dispute_id, author_id, role, body, created_at) VALUES (?, ?, ?, ?, ?)`,
		disputeID, userID, role, body, unix(now)); err != nil {
		return fail(op, err, "")
	}
	notify := []int64{d.BuyerID}
	notice := market.NoticeDisputeProviderAnswer
	if role == "buyer" {
		notify, notice = d.ProviderIDs, market.NoticeDisputeBuyerStatement
	}
	for _, u := range notify {
		if err := insertNotification(ctx, tx, Notification{UserID: u, Kind: NotifyDisputeAnswered,
			Notice: market.Notice{Kind: notice, Params: market.NoticeParams{Reservation: d.ReservationID}},
			URL:    fmt.Sprintf("/disputes/%d", disputeID), CreatedAt: now}); err != nil {
			return fail(op, err, "")
		}
	}
	return fail(op, tx.Commit(), "")
}

// disputeState is a dispute as the audit trail records it.
type disputeState struct {
	Status string       `json:"status"`
	Credit market.Cents `json:"credit_cents,omitempty"`
}

// DisputeDecision is what DecideDispute did: the dispute as stored and,
// for a credit to refund through the processor, the payment to refund.
type DisputeDecision struct {
	Case            DisputeCase
	PaymentIntentID string // "" when no processor refund is due
}

// DecideDispute records an admin's decision in one transaction: grant a
// credit (positive, at most what was paid less what was refunded or
// credited already — market.MaxDisputeCredit) or reject (credit 0), with a
// reason both parties see. A credit is taken from the providers in
// proportion to what each was paid (market.SplitCredit): the credit ledger
// entries are written, and each provider's payout not yet made shrinks by
// their part. A credit needs the reservation's settlement statement (the
// settlement runs by itself when the booking ends), so the statement's own
// refund is known and the two cannot add up to more than was paid. The
// payouts frozen by the dispute are released when no other dispute of the
// reservation is open. For a chargeback the money has already gone back
// through the buyer's bank, so the refund entry is written at once with the
// processor's dispute id; otherwise the refund is left pending for the
// caller to make with market.DisputeKey(id, "refund", 0) and record with
// RecordDisputeRefund. A decided dispute is a conflict.
func (db *DB) DecideDispute(ctx context.Context, adminID, disputeID int64, credit market.Cents, reason string, now time.Time) (DisputeDecision, error) {
	const op = "decide dispute"
	reason = strings.TrimSpace(reason)
	// Fields first, with the dispute taken as open: they need no reading.
	if err := market.CheckDisputeDecision(market.DisputeDecision{Reason: reason, Credit: credit, Open: true}); err != nil {
		return DisputeDecision{}, err
	}
	if err := badText("reason", reason, true); err != nil {
		return DisputeDecision{}, err
	}
	tx, err := db.begin(ctx)
	if err != nil {
		return DisputeDecision{}, fail(op, err, "")
	}
	defer tx.Rollback()
	d, err := getDisputeCase(ctx, tx, disputeID)
	if err != nil {
		return DisputeDecision{}, fail(op, err, "")
	}
	if err := market.CheckDisputeDecision(market.DisputeDecision{Reason: reason, Credit: credit, Open: d.Status == DisputeOpen,
		Chargeback: d.Source == DisputeSourceStripe, BankLost: d.BankOutcome == BankLost}); err != nil {
		return DisputeDecision{}, err
	}
	out := DisputeDecision{}
	status := DisputeRejected
	if credit > 0 {
		status = DisputeGranted
		lim, pay, err := disputeCreditLimit(ctx, tx, d)
		if market.ErrorCode(err) == market.CodeNotFound {
			return DisputeDecision{}, conflict("This reservation was never paid, so there is nothing to credit.")
		}
		if err != nil {
			return DisputeDecision{}, fail(op, err, "")
		}
		s, err := getSettlement(ctx, tx, pay.ReservationID)
		if market.ErrorCode(err) == market.CodeNotFound {
			return DisputeDecision{}, conflict("Grant a credit once the reservation's settlement statement exists (it is computed when the booking ends); until then its payouts stay frozen.")
		}
		if err != nil {
			return DisputeDecision{}, fail(op, err, "")
		}
		if err := market.CheckDisputeCredit(credit, lim.Max, lim.Paid, lim.Refunds.Total()); err != nil {
			return DisputeDecision{}, err
		}
		paidOut := map[int64]bool{}
		for _, t := range s.Transfers {
			paidOut[t.ProviderID] = t.State == TransferDone && t.Ref != ""
		}
		st, entries, err := market.ApplyDisputeCreditTo(s.Statement, d.ID, pay.PayerID, credit, paidOut, d.Source == DisputeSourceStripe, now)
		if err != nil {
			return DisputeDecision{}, fail(op, err, "")
		}
		if err := saveStatement(ctx, tx, pay.ReservationID, st, now); err != nil {
			return DisputeDecision{}, fail(op, err, "")
		}
		refundState := DisputeRefundDone
		if d.Source != DisputeSourceStripe {
			// The refund entry waits for the processor's refund id.
			entries = entries[:len(entries)-1]
			refundState, out.PaymentIntentID = DisputeRefundPending, pay.PaymentIntentID
		}
		if err := insertEntries(ctx, tx, entries); err != nil {
			return DisputeDecision{}, fail(op, err, "")
		}
		if _, err := tx.ExecContext(ctx, `UPDATE disputes SET refund_state = ?, refund_ref = ? WHERE id = ?`, refundState, d.StripeDisputeID, d.ID); err != nil {
			return DisputeDecision{}, fail(op, err, "")
		}
	}
	if d.Source == DisputeSourceStripe {
		// Whatever of the chargeback the providers do not bear, the
		// platform does.
		if err := insertEntries(ctx, tx, market.ChargebackLossEntries(d.ReservationID, d.ID, d.BuyerID, d.AmountCents, credit, now)); err != nil {
			return DisputeDecision{}, fail(op, err, "")
		}
	}
	if _, err := tx.ExecContext(ctx, `UPDATE disputes SET status = ?, credit_cents = ?, decision_reason = ?, decided_by = ?, decided_at = ? WHERE id = ?`,
		status, int64(credit), reason, adminID, unix(now), d.ID); err != nil {
		return DisputeDecision{}, fail(op, err, "")
	}
	settled, err := settledOn(ctx, tx, d.ReservationID)
	if err != nil {
		return DisputeDecision{}, fail(op, err, "")
	}
	if err := releaseFrozen(ctx, tx, settled, now); err != nil {
		return DisputeDecision{}, fail(op, err, "")
	}
	if err := insertAudit(ctx, tx, AuditEntry{At: now, ActorID: adminID, Action: AuditDisputeDecide, SubjectKind: AuditSubjectDispute, SubjectID: d.ID,
		Before: AuditJSON(disputeState{Status: d.Status}), After: AuditJSON(disputeState{Status: status, Credit: credit}), Note: reason}); err != nil {
		return DisputeDecision{}, fail(op, err, "")
	}
	for _, u := range append([]int64{d.BuyerID}, d.ProviderIDs...) {
		// Each party reads the outcome in their own terms.
		outcome := market.NoticeDisputeNoCredit
		switch {
		case credit > 0 && u == d.BuyerID:
			outcome = market.NoticeDisputeCreditToYou
		case credit > 0:
			outcome = market.NoticeDisputeCreditToBuyer
		}
		if err := insertNotification(ctx, tx, Notification{UserID: u, Kind: NotifyDisputeDecided, CreatedAt: now, URL: fmt.Sprintf("/disputes/%d", d.ID),
			Notice: market.Notice{Kind: outcome, Params: market.NoticeParams{Reservation: d.ReservationID, Amount: credit, Text: reason}}}); err != nil {
			return DisputeDecision{}, fail(op, err, "")
		}
	}
	if out.Case, err = getDisputeCase(ctx, tx, d.ID); err != nil {
		return DisputeDecision{}, fail(op, err, "")
	}
	return out, fail(op, tx.Commit(), "")
}

// releaseFrozen lets the frozen payouts of a reservation go once no
// dispute of it is open: to the retrier when the provider can be paid,
// held otherwise; the settlement's state follows.
func releaseFrozen(ctx context.Context, tx *sql.Tx, reservationID int64, now time.Time) error {
	open, err := openDisputes(ctx, tx, reservationID)
	if err != nil {
		return err
	}
	if open > 0 {
		return nil
	}
	ts, err := queryTransfers(ctx, tx, reservationID)
	if err != nil {
		return err
	}
	for _, t := range ts {
		if t.State != TransferFrozen {
			continue
		}
		state, err := payoutState(ctx, tx, t.ProviderID, t.Amount, false)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE settlement_transfers SET state = ? WHERE reservation_id = ? AND provider_id = ?`,
			string(state), reservationID, t.ProviderID); err != nil {
			return err
		}
	}
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM settlements WHERE reservation_id = ?`, reservationID).Scan(&n); err != nil || n == 0 {
		return err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE settlements SET state = ?, next_attempt_at = ? WHERE reservation_id = ? AND state = ?`,
		string(SettlementPending), unix(now), reservationID, string(SettlementWaiting)); err != nil {
		return err
	}
	return finishSettlement(ctx, tx, reservationID, now)
}

// RecordDisputeRefund records that a granted credit was refunded through
// the processor: the refund ledger entry (Dr buyer, Cr platform cash) with
// the processor's refund id (audited and notified to the buyer as every
// refund entry is) and the refund marked done, in one transaction.
// Recording it again changes nothing.
func (db *DB) RecordDisputeRefund(ctx context.Context, disputeID int64, refundRef string, now time.Time) (DisputeCase, error) {
	const op = "record dispute refund"
	tx, err := db.begin(ctx)
	if err != nil {
		return DisputeCase{}, fail(op, err, "")
	}
	defer tx.Rollback()
	d, err := getDisputeCase(ctx, tx, disputeID)
	if err != nil {
		return DisputeCase{}, fail(op, err, "")
	}
	if d.RefundState != DisputeRefundPending {
		return d, nil
	}
	settled, err := settledOn(ctx, tx, d.ReservationID)
	if err != nil {
		return DisputeCase{}, fail(op, err, "")
	}
	e := market.BuyerRefund(settled, d.BuyerID, d.CreditCents, refundRef, market.DisputeKey(d.ID, market.EntryRefund, 0), now)
	if err := insertEntries(ctx, tx, []market.LedgerEntry{e}); err != nil {
		return DisputeCase{}, fail(op, err, "")
	}
	if _, err := tx.ExecContext(ctx, `UPDATE disputes SET refund_state = ?, refund_ref = ? WHERE id = ?`, DisputeRefundDone, refundRef, d.ID); err != nil {
		return DisputeCase{}, fail(op, err, "")
	}
	if d, err = getDisputeCase(ctx, tx, d.ID); err != nil {
		return DisputeCase{}, fail(op, err, "")
	}
	return d, fail(op, tx.Commit(), "")
}

// TimelineEvent is one dated fact about a reservation, for the admin's
// view of a case.
type TimelineEvent struct {
	At   time.Time
	Kind string // booking, payment, incident, dispute, statement, decision, ledger, settlement, audit
	Text string
	Ref  string // a payment processor's reference, if any
	// Record is a ledger entry as the ledger holds it (kind, amount, debit
	// and credit accounts, idempotency key), for whoever checks the books.
	Record string
}

// ReservationTimeline returns everything recorded about a reservation in
// time order: the booking and its state, the payment, incidents and their
// acknowledgement, disputes with every statement and decision, ledger
// entries, the settlement, and audit entries.
func (db *DB) ReservationTimeline(ctx context.Context, reservationID int64) ([]TimelineEvent, error) {
	const op = "reservation timeline"
	tx, err := db.read(ctx)
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer tx.Rollback()
	r, err := getReservation(ctx, tx, reservationID)
	if err != nil {
		return nil, fail(op, err, "")
	}
	var out []TimelineEvent
	add := func(at time.Time, kind, format string, args ...any) {
		out = append(out, TimelineEvent{At: at, Kind: kind, Text: fmt.Sprintf(format, args...)})
	}
	add(r.CreatedAt, "booking", "Reserved %d devices in %d piece(s) for %s by buyer #%d.", r.Devices(), len(r.Pieces), r.AmountCents, r.BuyerID)
	if !r.UpdatedAt.Equal(r.CreatedAt) {
		add(r.UpdatedAt, "booking", "Now %s.", r.State.Label())
	}
	if pay, err := getPayment(ctx, tx, r.ID); err == nil {
		add(pay.CreatedAt, "payment", "Checkout started for %s.", pay.Amount)
		add(pay.UpdatedAt, "payment", "Payment %s.", pay.Status.Label())
		out[len(out)-1].Ref = pay.PaymentIntentID
	} else if market.ErrorCode(err) != market.CodeNotFound {
		return nil, fail(op, err, "")
	}
	incs, err := queryIncidents(ctx, tx, `WHERE reservation_id = ?`, r.ID)
	if err != nil {
		return nil, fail(op, err, "")
	}
	for _, i := range incs {
		add(i.CreatedAt, "incident", "%s reported by the %s: %s, %d device(s). %s", i.Kind.Label(), i.ReportedBy,
			market.FormatSpan(i.Start, i.End), i.DevicesAffected, i.Note)
		if !i.AcknowledgedAt.IsZero() {
			add(i.AcknowledgedAt, "incident", "Incident %d acknowledged by the provider.", i.ID)
		}
		if !i.DisputedAt.IsZero() {
			add(i.DisputedAt, "incident", "Incident %d not acknowledged in time: became a dispute.", i.ID)
		}
	}
	ds, err := queryDisputeCases(ctx, tx, `WHERE d.reservation_id = ? ORDER BY d.id`, r.ID)
	if err != nil {
		return nil, fail(op, err, "")
	}
	for _, d := range ds {
		full, err := getDisputeCase(ctx, tx, d.ID)
		if err != nil {
			return nil, fail(op, err, "")
		}
		add(d.CreatedAt, "dispute", "Dispute %d opened (%s): %s", d.ID, d.Reason.Label(), d.Statement)
		for _, m := range full.Messages {
			add(m.CreatedAt, "statement", "The %s (%s) on dispute %d: %s", m.Role, m.AuthorName, d.ID, m.Body)
		}
		if d.Decided() {
			add(d.DecidedAt, "decision", "Dispute %d %s, credit %s: %s", d.ID, d.Status, d.CreditCents, d.DecisionReason)
		}
	}
	ledger, err := queryLedger(ctx, tx, `WHERE reservation_id = ?`, r.ID)
	if err != nil {
		return nil, fail(op, err, "")
	}
	for _, e := range ledger {
		add(e.At, "ledger", "%s: %s.", e.Describe(""), e.Amount)
		out[len(out)-1].Ref = e.StripeRef
		out[len(out)-1].Record = fmt.Sprintf("%s %s: debit %s, credit %s (%s)", e.Kind, e.Amount, e.Debit, e.Credit, e.IdempotencyKey)
	}
	if s, err := getSettlement(ctx, tx, r.ID); err == nil {
		add(s.CreatedAt, "settlement", "Settlement computed: refund %s; %s.", s.RefundCents, s.State.Label())
		if !s.SettledAt.IsZero() {
			add(s.SettledAt, "settlement", "Settled.")
		}
	} else if market.ErrorCode(err) != market.CodeNotFound {
		return nil, fail(op, err, "")
	}
	rows, err := tx.QueryContext(ctx, `SELECT a.at, a.action, a.subject_id, a.after_json, a.note FROM audit_log a WHERE (a.subject_kind = ? AND a.subject_id = ?)
		OR (a.subject_kind = ? AND a.subject_id IN (SELECT id FROM disputes WHERE reservation_id = ?)) ORDER BY a.id`,
		AuditSubjectReservation, r.ID, AuditSubjectDispute, r.ID)
	if err != nil {
		return nil, fail(op, err, "")
	}
	for rows.Next() {
		var at int64
		var a AuditEntry
		if err := rows.Scan(&at, &a.Action, &a.SubjectID, &a.After, &a.Note); err != nil {
			rows.Close()
			return nil, fail(op, err, "")
		}
		a.At = fromUnix(at)
		add(a.At, "audit", "%s", AuditSummary(a))
	}
	if err := closeRows(rows); err != nil {
		return nil, fail(op, err, "")
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].At.Before(out[j].At) })
	return out, nil
}

// The bank's outcomes of a chargeback.
const (
	BankWon  = "won"
	BankLost = "lost"
)

// CloseStripeDispute records the bank's decision on a chargeback (the
// processor's charge.dispute.closed), deduplicated on the event. Won: the
// money comes back (a chargeback reversal: Dr cash, Cr buyer), the case is
// closed with no credit and the frozen payouts are released. Lost: the money
// stays with the buyer and an admin decides what the providers bear
// (DecideDispute). An unknown dispute is ignored; it reports whether
// anything changed.
func (db *DB) CloseStripeDispute(ctx context.Context, eventID, eventType, processorDisputeID, outcome string, now time.Time) (bool, error) {
	const op = "close stripe dispute"
	tx, err := db.begin(ctx)
	if err != nil {
		return false, fail(op, err, "")
	}
	defer tx.Rollback()
	fresh, err := markEvent(ctx, tx, eventID, eventType, now)
	if err != nil || !fresh {
		return false, fail(op, err, "")
	}
	ds, err := queryDisputeCases(ctx, tx, `WHERE d.source = ? AND d.stripe_dispute_id = ?`, DisputeSourceStripe, processorDisputeID)
	if err != nil {
		return false, fail(op, err, "")
	}
	if len(ds) == 0 || ds[0].BankOutcome != "" || (outcome != BankWon && outcome != BankLost) {
		return false, fail(op, tx.Commit(), "")
	}
	d := ds[0]
	if _, err := tx.ExecContext(ctx, `UPDATE disputes SET bank_outcome = ? WHERE id = ?`, outcome, d.ID); err != nil {
		return false, fail(op, err, "")
	}
	if outcome == BankWon && d.Status == DisputeOpen {
		if err := insertEntries(ctx, tx, market.ChargebackReversalEntries(d.ReservationID, d.ID, d.BuyerID, d.AmountCents, processorDisputeID, now)); err != nil {
			return false, fail(op, err, "")
		}
		reason := "The buyer's bank ruled for the marketplace and returned the money; nothing is owed."
		if _, err := tx.ExecContext(ctx, `UPDATE disputes SET status = ?, decision_reason = ?, decided_at = ? WHERE id = ?`,
			DisputeRejected, reason, unix(now), d.ID); err != nil {
			return false, fail(op, err, "")
		}
		if err := releaseFrozen(ctx, tx, d.ReservationID, now); err != nil {
			return false, fail(op, err, "")
		}
		for _, u := range append([]int64{d.BuyerID}, d.ProviderIDs...) {
			if err := insertNotification(ctx, tx, Notification{UserID: u, Kind: NotifyDisputeDecided, CreatedAt: now, URL: fmt.Sprintf("/disputes/%d", d.ID),
				Notice: market.Notice{Kind: market.NoticeChargebackClosed, Params: market.NoticeParams{Reservation: d.ReservationID, Text: reason}}}); err != nil {
				return false, fail(op, err, "")
			}
		}
	}
	return true, fail(op, tx.Commit(), "")
}

// DisputeCreditLimit is the most a dispute may still credit (Max): what
// was paid for the reservation's time, less every refund made or owed on
// that payment (market.MaxDisputeCredit) — for a chargeback, also at most
// what the bank took.
type DisputeCreditLimit struct {
	Max     market.Cents
	Paid    market.Cents
	Refunds market.PaymentRefunds
}

// FindDisputeCreditLimit returns the credit limit of a dispute, for the
// admin's form.
func (db *DB) FindDisputeCreditLimit(ctx context.Context, disputeID int64) (DisputeCreditLimit, error) {
	const op = "find dispute credit limit"
	tx, err := db.read(ctx)
	if err != nil {
		return DisputeCreditLimit{}, fail(op, err, "")
	}
	defer tx.Rollback()
	d, err := getDisputeCase(ctx, tx, disputeID)
	if err != nil {
		return DisputeCreditLimit{}, fail(op, err, "")
	}
	lim, _, err := disputeCreditLimit(ctx, tx, d)
	return lim, fail(op, err, "")
}

// disputeCreditLimit is d's credit limit and the payment it is refunded
// on (paymentRefunds): the booking's payment, or for time bought on
// resale the holder's.
func disputeCreditLimit(ctx context.Context, q querier, d DisputeCase) (DisputeCreditLimit, PaymentOf, error) {
	r, err := getReservation(ctx, q, d.ReservationID)
	if err != nil {
		return DisputeCreditLimit{}, PaymentOf{}, err
	}
	pay, err := paymentRefunds(ctx, q, r)
	if err != nil {
		return DisputeCreditLimit{}, PaymentOf{}, err
	}
	lim := DisputeCreditLimit{Paid: pay.Amount, Refunds: pay.Refunds, Max: market.MaxDisputeCredit(pay.Amount, pay.Refunds.Total())}
	if d.Source == DisputeSourceStripe {
		// A chargeback: the bank took back what it took; the credit is the
		// part of it the providers bear.
		lim.Max = min(lim.Max, d.AmountCents)
	}
	return lim, pay, nil
}

// settledOn is the reservation whose settlement and ledger hold id's
// money: the original booking for time bought on resale, else id itself.
func settledOn(ctx context.Context, q querier, id int64) (int64, error) {
	var of sql.NullInt64
	if err := q.QueryRowContext(ctx, `SELECT resale_of FROM reservations WHERE id = ?`, id).Scan(&of); err != nil {
		return 0, err
	}
	if of.Valid && of.Int64 != 0 {
		return of.Int64, nil
	}
	return id, nil
}

// openDisputes counts the open disputes of a reservation and of the time
// bought on resale from it, which settles with it.
func openDisputes(ctx context.Context, q querier, reservationID int64) (int, error) {
	var n int
	err := q.QueryRowContext(ctx, `SELECT COUNT(*) FROM disputes WHERE status = ? AND (reservation_id = ?
		OR reservation_id IN (SELECT n.id FROM reservations n WHERE n.resale_of = ?))`, DisputeOpen, reservationID, reservationID).Scan(&n)
	return n, err
}

// Dispute is a case for admins.
type Dispute struct {
	ID              int64
	ReservationID   int64
	Source          string // DisputeSourceStripe or DisputeSourceIncident
	StripeDisputeID string
	IncidentID      int64
	Status          string // "open" until an admin decides
	Statement       string
	CreatedAt       time.Time
	// AmountCents is what the buyer's bank took back (chargebacks only);
	// BankOutcome is the bank's decision on it: "", won or lost.
	AmountCents market.Cents
	BankOutcome string
}

// Dispute sources and the open status.
const (
	DisputeSourceStripe   = "stripe"
	DisputeSourceIncident = "incident"
	DisputeOpen           = "open"
)

// OpenStripeDispute records a chargeback: an open dispute on the
// reservation, and every provider payout of it not yet made frozen until an
// admin decides. It reports false for a replay (by event or dispute id).
//
// When the event names no reservation, the payment intent or charge finds it.
func (db *DB) OpenStripeDispute(ctx context.Context, eventID, eventType string, reservationID int64, paymentIntentID, chargeID, disputeID string, amount market.Cents, now time.Time) (bool, error) {
	const op = "open stripe dispute"
	tx, err := db.begin(ctx)
	if err != nil {
		return false, fail(op, err, "")
	}
	defer tx.Rollback()
	fresh, err := markEvent(ctx, tx, eventID, eventType, now)
	if err != nil || !fresh {
		return false, fail(op, err, "")
	}
	if reservationID == 0 {
		err := tx.QueryRowContext(ctx, `SELECT reservation_id FROM payments WHERE (payment_intent_id = ? AND ? <> '')
			OR (charge_id = ? AND ? <> '')`, paymentIntentID, paymentIntentID, chargeID, chargeID).Scan(&reservationID)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return false, fail(op, err, "")
		}
	}
	if _, err := getReservation(ctx, tx, reservationID); err != nil {
		if market.ErrorCode(err) == market.CodeNotFound {
			return false, fail(op, tx.Commit(), "")
		}
		return false, fail(op, err, "")
	}
	statement := fmt.Sprintf("The buyer's bank disputed %s of the payment (processor dispute %s). Provider payouts are frozen until an admin decides.", amount, disputeID)
	var id int64
	err = tx.QueryRowContext(ctx, `INSERT INTO disputes (reservation_id, source, stripe_dispute_id, status, statement, created_at, amount_cents)
		VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING RETURNING id`, reservationID, DisputeSourceStripe, disputeID, DisputeOpen, statement, unix(now), int64(amount)).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return false, fail(op, tx.Commit(), "")
	}
	if err != nil {
		return false, fail(op, err, "")
	}
	var buyerID int64
	if err := tx.QueryRowContext(ctx, `SELECT buyer_id FROM reservations WHERE id = ?`, reservationID).Scan(&buyerID); err != nil {
		return false, fail(op, err, "")
	}
	// The bank takes the money back at once: the platform's cash goes to the
	// buyer, recorded as a chargeback (not a refund the platform made).
	if err := insertEntries(ctx, tx, market.ChargebackEntries(reservationID, id, buyerID, amount, disputeID, now)); err != nil {
		return false, fail(op, err, "")
	}
	if err := freezePayouts(ctx, tx, reservationID); err != nil {
		return false, fail(op, err, "")
	}
	return true, fail(op, tx.Commit(), "")
}

const disputeColumns = `id, reservation_id, source, COALESCE(stripe_dispute_id, ''), COALESCE(incident_id, 0), status, statement, created_at,
	amount_cents, bank_outcome`

func queryDisputes(ctx context.Context, q querier, where string, args ...any) ([]Dispute, error) {
	rows, err := q.QueryContext(ctx, `SELECT `+disputeColumns+` FROM disputes `+where+` ORDER BY id`, args...)
	if err != nil {
		return nil, err
	}
	var out []Dispute
	for rows.Next() {
		var d Dispute
		var created, amount int64
		if err := rows.Scan(&d.ID, &d.ReservationID, &d.Source, &d.StripeDisputeID, &d.IncidentID, &d.Status, &d.Statement, &created,
			&amount, &d.BankOutcome); err != nil {
			rows.Close()
			return nil, err
		}
		d.CreatedAt, d.AmountCents = fromUnix(created), market.Cents(amount)
		out = append(out, d)
	}
	return out, closeRows(rows)
}

// ListReservationDisputes returns a reservation's disputes, oldest first.
func (db *DB) ListReservationDisputes(ctx context.Context, reservationID int64) ([]Dispute, error) {
	const op = "list reservation disputes"
	tx, err := db.read(ctx)
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer tx.Rollback()
	ds, err := queryDisputes(ctx, tx, `WHERE reservation_id = ?`, reservationID)
	return ds, fail(op, err, "")
}

// ListOpenDisputes returns every open dispute, oldest first.
func (db *DB) ListOpenDisputes(ctx context.Context) ([]Dispute, error) {
	const op = "list open disputes"
	tx, err := db.read(ctx)
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer tx.Rollback()
	ds, err := queryDisputes(ctx, tx, `WHERE status = ?`, DisputeOpen)
	return ds, fail(op, err, "")
}
