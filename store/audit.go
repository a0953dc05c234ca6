package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// AuditEntry is one row of the append-only audit trail: who (ActorID, 0 for
// the system) did what (Action) to which subject, when, with the subject's
// state before and after as JSON. The table's triggers refuse any UPDATE
// or DELETE.
type AuditEntry struct {
	ID          int64
	At          time.Time
	ActorID     int64  // 0: the system (auto-approval, webhooks, sweeps)
	ActorName   string // filled when read
	Action      string // e.g. AuditOfferApprove
	SubjectKind string // e.g. AuditSubjectOffer
	SubjectID   int64
	Before      string // JSON, "" when there was nothing before
	After       string // JSON
	Note        string // the admin's reason or evidence
}

// Audit actions. Money movements use the ledger entry kind after "money.",
// e.g. "money.refund".
const (
	AuditOfferApprove          = "offer.approve"
	AuditOfferAutoApprove      = "offer.auto_approve"
	AuditOfferEditAtOnce       = "offer.edit_at_once"
	AuditOfferReject           = "offer.reject"
	AuditOfferRequestChanges   = "offer.request_changes"
	AuditFigureVerify          = "offer.verify_figure"
	AuditProviderSuspend       = "provider.suspend"
	AuditProviderReinstate     = "provider.reinstate"
	AuditReservationFlagClear  = "reservation.flag_clear"
	AuditDisputeDecide         = "dispute.decide"
	AuditReservationReject     = "reservation.reject"
	AuditIncidentNote          = "incident.note"
	AuditTwoFactorReset        = "user.reset_two_factor"
	AuditReplacementTrigger    = "replacement.trigger"
	AuditMoneyPrefix           = "money."
	AuditSubjectOffer          = "offer"
	AuditSubjectUser           = "user"
	AuditSubjectReservation    = "reservation"
	AuditSubjectDispute        = "dispute"
	AuditSubjectReservationFlg = "reservation_flag"
)

// AuditActionLabel names an audit action in words: "Offer approved",
// "Money: Refund".
func AuditActionLabel(action string) string {
	switch action {
	case AuditOfferApprove:
		return "Offer approved"
	case AuditOfferAutoApprove:
		return "Offer approved automatically"
	case AuditOfferReject:
		return "Offer rejected"
	case AuditOfferRequestChanges:
		return "Changes asked for on an offer"
	case AuditFigureVerify:
		return "Figure marked verified"
	case AuditProviderSuspend:
		return "Provider suspended"
	case AuditProviderReinstate:
		return "Provider reinstated"
	case AuditReservationFlagClear:
		return "Reservation flag cleared"
	case AuditDisputeDecide:
		return "Dispute decided"
	case AuditReservationReject:
		return "Rental rejected by the buyer in its acceptance period"
	case AuditIncidentNote:
		return "Provider's note on an incident"
	case AuditTwoFactorReset:
		return "Two-factor sign-in reset by the operator"
	case AuditReplacementTrigger:
		return "Replacement triggered by an admin"
	}
	if kind, ok := strings.CutPrefix(action, AuditMoneyPrefix); ok {
		return "Money: " + market.EntryKindLabel(kind)
	}
	return action
}

// AuditSubjectLabel names an audit subject in words, with its id:
// "reservation #12", "account #3".
func AuditSubjectLabel(kind string, id int64) string {
	switch kind {
	case AuditSubjectUser:
		kind = "account"
	case AuditSubjectReservationFlg:
		kind = "reservation flag"
	}
	return kind + " #" + strconv.FormatInt(id, 10)
}

// AuditMoneyEntry reads back the ledger entry a money.* audit row records
// (see moneyMoved). Rows written before the debit and credit were named
// called them "to" and "from".
func AuditMoneyEntry(e AuditEntry) (market.LedgerEntry, bool) {
	kind, ok := strings.CutPrefix(e.Action, AuditMoneyPrefix)
	if !ok {
		return market.LedgerEntry{}, false
	}
	var v struct {
		Debit, Credit, From, To, Ref, Key string
		AmountCents                       int64 `json:"amount_cents"`
	}
	if err := json.Unmarshal([]byte(e.After), &v); err != nil {
		return market.LedgerEntry{}, false
	}
	le := market.LedgerEntry{ReservationID: e.SubjectID, Kind: kind, Debit: v.Debit, Credit: v.Credit,
		Amount: market.Cents(v.AmountCents), StripeRef: v.Ref, IdempotencyKey: v.Key, At: e.At}
	if le.Debit == "" && le.Credit == "" {
		le.Debit, le.Credit = v.To, v.From
	}
	return le, true
}

// AuditSummary is an audit entry in one line for a reservation's
// timeline: the action in words and, for money, what moved which way.
func AuditSummary(e AuditEntry) string {
	if le, ok := AuditMoneyEntry(e); ok {
		return fmt.Sprintf("%s: %s, %s.", AuditActionLabel(e.Action), le.Describe(""), le.Amount)
	}
	if e.Note == "" {
		return AuditActionLabel(e.Action) + "."
	}
	return AuditActionLabel(e.Action) + ": " + e.Note
}

// AuditJSON renders a before or after value for an AuditEntry. Values that
// cannot be encoded become "" (an audit row is never lost for its detail).
func AuditJSON(v any) string {
	if v == nil {
		return ""
	}
	b, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	return string(b)
}

// insertAudit appends e inside the caller's transaction, so the action and
// its record commit or fail together.
func insertAudit(ctx context.Context, tx querier, e AuditEntry) error {
	var actor any
	if e.ActorID != 0 {
		actor = e.ActorID
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO audit_log (at, actor_id, action, subject_kind, subject_id, before_json, after_json, note)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
		unix(e.At), actor, e.Action, e.SubjectKind, e.SubjectID, e.Before, e.After, e.Note)
	return err
}

// AuditFilter selects audit entries; zero values mean "any".
type AuditFilter struct {
	ActorID     int64
	Action      string // exact, or a prefix ending in "." (e.g. "money.")
	SubjectKind string
	SubjectID   int64
	From, To    time.Time // half-open [From, To)
	Limit       int       // 0: 200
	Offset      int
}

// ListAudit returns the audit entries matching f, newest first, and how
// many match in all.
func (db *DB) ListAudit(ctx context.Context, f AuditFilter) ([]AuditEntry, int, error) {
	const op = "list audit"
	var where []string
	var args []any
	if f.ActorID != 0 {
		where, args = append(where, "a.actor_id = ?"), append(args, f.ActorID)
	}
	if f.Action != "" {
		if strings.HasSuffix(f.Action, ".") {
			where, args = append(where, "substr(a.action, 1, ?) = ?"), append(args, len(f.Action), f.Action)
		} else {
			where, args = append(where, "a.action = ?"), append(args, f.Action)
		}
	}
	if f.SubjectKind != "" {
		where, args = append(where, "a.subject_kind = ?"), append(args, f.SubjectKind)
	}
	if f.SubjectID != 0 {
		where, args = append(where, "a.subject_id = ?"), append(args, f.SubjectID)
	}
	if !f.From.IsZero() {
		where, args = append(where, "a.at >= ?"), append(args, unix(f.From))
	}
	if !f.To.IsZero() {
		where, args = append(where, "a.at < ?"), append(args, unix(f.To))
	}
	cond := ""
	if len(where) > 0 {
		cond = " WHERE " + strings.Join(where, " AND ")
	}
	limit := f.Limit
	if limit <= 0 {
		limit = 200
	}

	tx, err := db.read(ctx)
	if err != nil {
		return nil, 0, fail(op, err, "")
	}
	defer tx.Rollback()

	var total int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM audit_log a`+cond, args...).Scan(&total); err != nil {
		return nil, 0, fail(op, err, "")
	}
	rows, err := tx.QueryContext(ctx, `SELECT a.id, a.at, a.actor_id, COALESCE(u.display_name, ''), a.action, a.subject_kind,
			a.subject_id, a.before_json, a.after_json, a.note
		FROM audit_log a LEFT JOIN users u ON u.id = a.actor_id`+cond+` ORDER BY a.at DESC, a.id DESC LIMIT ? OFFSET ?`,
		append(args, limit, max(f.Offset, 0))...)
	if err != nil {
		return nil, 0, fail(op, err, "")
	}
	var out []AuditEntry
	for rows.Next() {
		var e AuditEntry
		var at int64
		var actor sql.NullInt64
		if err := rows.Scan(&e.ID, &at, &actor, &e.ActorName, &e.Action, &e.SubjectKind, &e.SubjectID, &e.Before, &e.After, &e.Note); err != nil {
			rows.Close()
			return nil, 0, fail(op, err, "")
		}
		e.At, e.ActorID = fromUnix(at), actor.Int64
		out = append(out, e)
	}
	if err := closeRows(rows); err != nil {
		return nil, 0, fail(op, err, "")
	}
	return out, total, nil
}

// moneyMoved records a new ledger entry in the audit trail, in the same
// transaction (every movement of money goes through insertEntries), and
// tells the people it concerns: a charge is a booking made for its
// provider, a transfer a payout sent, a refund money back to the buyer.
func moneyMoved(ctx context.Context, tx querier, e market.LedgerEntry) error {
	if err := insertAudit(ctx, tx, AuditEntry{At: e.At, Action: AuditMoneyPrefix + e.Kind, SubjectKind: AuditSubjectReservation,
		SubjectID: e.ReservationID, After: AuditJSON(map[string]any{"debit": e.Debit, "credit": e.Credit, "amount_cents": e.Amount,
			"ref": e.StripeRef, "key": e.IdempotencyKey}), Note: fmt.Sprintf("%s: %s", e.Describe(""), e.Amount)}); err != nil {
		return err
	}
	var provider string
	switch e.Kind {
	case market.EntryCharge:
		provider = e.Credit
	case market.EntryTransfer:
		provider = e.Debit
	case market.EntryRefund:
		buyer, err := strconv.ParseInt(strings.TrimPrefix(e.Debit, "buyer:"), 10, 64)
		if err != nil || !strings.HasPrefix(e.Debit, "buyer:") {
			return nil
		}
		return insertNotification(ctx, tx, Notification{UserID: buyer, Kind: NotifyRefundSent, CreatedAt: e.At,
			URL: fmt.Sprintf("/reservations/%d", e.ReservationID),
			Notice: market.Notice{Kind: market.NoticeRefundSent, Params: market.NoticeParams{Reservation: e.ReservationID, Amount: e.Amount,
				RefundFor: refundFor(e.IdempotencyKey)}}})
	default:
		return nil
	}
	id, err := strconv.ParseInt(strings.TrimPrefix(provider, "provider:"), 10, 64)
	if err != nil || !strings.HasPrefix(provider, "provider:") {
		return nil
	}
	if e.Kind == market.EntryCharge {
		// A payment that arrived too late confirms nothing: it is refunded,
		// and the provider has no booking to hear about.
		var state string
		var buyer, starts int64
		if err := tx.QueryRowContext(ctx, `SELECT state, buyer_id, starts_at FROM reservations WHERE id = ?`, e.ReservationID).Scan(&state, &buyer, &starts); err != nil {
			return err
		}
		switch market.ReservationState(state) {
		case market.ReservationConfirmed, market.ReservationActive, market.ReservationCompleted, market.ReservationSettled:
		default:
			return nil
		}
		// A standing order's fill says it was booked and paid in one
		// notification (its fill said nothing while being charged).
		var order int64
		err := tx.QueryRowContext(ctx, `SELECT id FROM standing_orders WHERE reservation_id = ?`, e.ReservationID).Scan(&order)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		kind := market.NoticePaymentArrived
		if order != 0 {
			kind = market.NoticeOrderFilledPaid
		}
		if err := insertNotification(ctx, tx, Notification{UserID: buyer, Kind: NotifyBookingConfirmed, CreatedAt: e.At,
			URL: fmt.Sprintf("/reservations/%d", e.ReservationID),
			Notice: market.Notice{Kind: kind, Params: market.NoticeParams{Order: order, Reservation: e.ReservationID, Amount: e.Amount,
				Start: fromUnix(starts)}}}); err != nil {
			return err
		}
	}
	n := Notification{UserID: id, Kind: NotifyBookingMade, CreatedAt: e.At, URL: fmt.Sprintf("/provider/bookings/%d", e.ReservationID),
		Notice: market.Notice{Kind: market.NoticeBookingPaid, Params: market.NoticeParams{Reservation: e.ReservationID, Amount: e.Amount}}}
	if e.Kind == market.EntryTransfer {
		n.Kind, n.URL = NotifyPayoutSent, "/provider/reservations"
		n.Notice.Kind = market.NoticePayoutSent
	}
	return insertNotification(ctx, tx, n)
}

// refundFor says, from a refund entry's idempotency key, what the refund
// is for.
func refundFor(key string) market.RefundFor {
	switch {
	case strings.HasPrefix(key, "dispute_"):
		return market.RefundForDispute
	case strings.HasPrefix(key, "payment_exception_"):
		return market.RefundForPaymentException
	case strings.HasPrefix(key, "resale_") && strings.HasSuffix(key, "_credit"): // market.ResaleCreditEntry
		return market.RefundForResale
	}
	return market.RefundForTerms
}
