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

// Automatic replacement (docs/replacement.md): the measured outages that
// call for one, and the one row per outage that records what was done —
// booked, offered to the buyer, lapsed, unfilled or not wanted — under the
// outage's unique key.

// Replacement states.
const (
	ReplacementBooked    = "booked"
	ReplacementOffered   = "offered"
	ReplacementLapsed    = "lapsed"
	ReplacementUnfilled  = "unfilled"
	ReplacementNotWanted = "not_wanted"
	// ReplacementCharging: the buyer's share of a dearer replacement is
	// being charged to their saved card; the planned pieces are booked in
	// the transaction that records the paid charge.
	ReplacementCharging = "charging"
)

// Notification kinds of replacement, to the buyer.
const (
	NotifyRentalReplaced      = "rental_replaced"
	NotifyReplacementOffered  = "replacement_offered"
	NotifyReplacementUnfilled = "replacement_unfilled"
)

const msgReplacementNotFound = "That replacement could not be found."

// Replacement is what was done about one measured outage.
type Replacement struct {
	ID       int64
	OutageID int64 // the measured outage that triggered it; 0 when an admin did (IncidentID)
	// IncidentID is the incident an admin triggered it from (0: the agent's
	// measured outage did).
	IncidentID     int64
	ReservationID  int64
	PieceID        int64 // the original piece
	FailedNode     int
	Kind           market.IncidentKind
	Policy         market.ReplacementPolicy
	State          string
	Reason         string // why unfilled, or what was offered
	Tier           market.ReplacementTier
	PieceIDs       []int64 // the replacement's pieces, once booked
	From, Until    time.Time
	OfferExpiresAt time.Time // ask policy: the buyer confirms before this
	Split          market.ReplacementSplit
	RefundDone     bool
	RefundRef      string
	Attempts       int
	NextAttemptAt  time.Time
	LastError      string
	// ChargeIntentID is the charge of the buyer's share, if any
	// (market.PurposeReplacement); PremiumRef the processor's payment of it.
	ChargeIntentID int64
	PremiumRef     string
	// TriggeredBy is the admin who triggered it from the incident
	// (IncidentID); 0 when the agent's measurement did. Recording a row
	// with it writes the audit trail's replacement.trigger entry in the
	// same transaction.
	TriggeredBy int64
	CreatedAt   time.Time
	UpdatedAt   time.Time
}

// OfferLive reports whether an offered replacement may still be confirmed at now.
func (r Replacement) OfferLive(now time.Time) bool {
	return r.State == ReplacementOffered && now.Before(r.OfferExpiresAt)
}

const replacementColumns = `id, COALESCE(outage_id, 0), reservation_id, piece_id, failed_node, kind, policy, state, reason, tier, piece_ids,
	from_at, until_at, offer_expires_at, remaining_cents, delivered_cents, cost_cents, refund_cents, provider_share_cents,
	buyer_share_cents, refund_done, refund_ref, attempts, next_attempt_at, last_error, charge_intent_id, premium_ref, created_at, updated_at, COALESCE(incident_id, 0), COALESCE(triggered_by, 0)`

func scanReplacement(s scanner) (Replacement, error) {
	var r Replacement
	var kind, policy, ids string
	var from, until, expires, next, created, updated int64
	var rem, del, cost, refund, ps, bs int64
	if err := s.Scan(&r.ID, &r.OutageID, &r.ReservationID, &r.PieceID, &r.FailedNode, &kind, &policy, &r.State, &r.Reason, &r.Tier, &ids,
		&from, &until, &expires, &rem, &del, &cost, &refund, &ps, &bs, &r.RefundDone, &r.RefundRef, &r.Attempts, &next, &r.LastError,
		&r.ChargeIntentID, &r.PremiumRef, &created, &updated, &r.IncidentID, &r.TriggeredBy); err != nil {
		return Replacement{}, err
	}
	r.Kind, r.Policy = market.IncidentKind(kind), market.ReplacementPolicy(policy)
	for _, f := range strings.Split(ids, ",") {
		if id, err := strconv.ParseInt(f, 10, 64); err == nil {
			r.PieceIDs = append(r.PieceIDs, id)
		}
	}
	r.From, r.Until, r.CreatedAt, r.UpdatedAt = fromUnix(from), fromUnix(until), fromUnix(created), fromUnix(updated)
	if expires != 0 {
		r.OfferExpiresAt = fromUnix(expires)
	}
	if next != 0 {
		r.NextAttemptAt = fromUnix(next)
	}
	r.Split = market.ReplacementSplit{Remaining: market.Cents(rem), Delivered: market.Cents(del), Cost: market.Cents(cost),
		Refund: market.Cents(refund), ProviderShare: market.Cents(ps), BuyerShare: market.Cents(bs)}
	return r, nil
}

// ReplacementTrigger is a measured outage that calls for a replacement
// (market.TriggersReplacement) and has none recorded yet, with its
// reservation and piece as they stand.
type ReplacementTrigger struct {
	OutageID    int64
	IncidentID  int64 // an admin's trigger from an incident, when OutageID is 0
	AdminID     int64 // the admin who triggered it from IncidentID
	Node        int
	Kind        market.IncidentKind
	Reservation market.Reservation
	Piece       market.ReservationPiece
}

// ListReplacementTriggers returns the open measured outages at now that
// call for a replacement (market.TriggersReplacement: the agent's host
// failure or fewer devices on a piece running with enough of it left, of
// an active reservation neither bought on resale nor resold) and have no
// replacement recorded.
func (db *DB) ListReplacementTriggers(ctx context.Context, now time.Time) ([]ReplacementTrigger, error) {
	const op = "list replacement triggers"
	tx, err := db.read(ctx)
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer tx.Rollback()
	open, err := collect(ctx, tx, scanOutage, `SELECT `+outageColumns+` FROM measured_outages o
		WHERE o.end_at IS NULL AND NOT EXISTS (SELECT 1 FROM replacements x WHERE x.outage_id = o.id) ORDER BY o.id`)
	if err != nil {
		return nil, fail(op, err, "")
	}
	var out []ReplacementTrigger
	for _, o := range open {
		var resID int64
		if err := tx.QueryRowContext(ctx, `SELECT reservation_id FROM reservation_pieces WHERE id = ?`, o.PieceID).Scan(&resID); err != nil {
			return nil, fail(op, err, "")
		}
		r, err := getReservation(ctx, tx, resID)
		if err != nil {
			return nil, fail(op, err, "")
		}
		p := pieceOfReservation(r, o.PieceID)
		if r.State != market.ReservationActive || r.ResaleOf != 0 || !r.ResoldAt.IsZero() ||
			!market.TriggersReplacement(o.Kind, true, p, now) {
			continue
		}
		out = append(out, ReplacementTrigger{OutageID: o.ID, Node: o.Node, Kind: o.Kind, Reservation: r, Piece: p})
	}
	return out, fail(op, tx.Commit(), "")
}

// insertReplacementRow records rep once for its outage and returns it with
// its id; inserted is false when a row for the outage was there already
// (then that row is returned). A row an admin triggers (rep.TriggeredBy)
// is written to the audit trail with it (replacementTriggerAudit).
func insertReplacementRow(ctx context.Context, tx *sql.Tx, rep Replacement, now time.Time) (Replacement, bool, error) {
	var expires any = 0
	if !rep.OfferExpiresAt.IsZero() {
		expires = unix(rep.OfferExpiresAt)
	}
	if rep.OutageID == 0 && rep.IncidentID == 0 {
		return Replacement{}, false, errors.New("a replacement needs a measured outage or an incident")
	}
	if rep.TriggeredBy != 0 && (rep.IncidentID == 0 || rep.OutageID != 0) {
		return Replacement{}, false, errors.New("an admin triggers a replacement from an incident only")
	}
	var by any
	if rep.TriggeredBy != 0 {
		by = rep.TriggeredBy
	}
	// The key: the measured outage, or the incident an admin triggered it from.
	var outage, incident any
	keyCol, key := "outage_id", rep.OutageID
	if rep.OutageID != 0 {
		outage = rep.OutageID
	} else {
		incident, keyCol, key = rep.IncidentID, "incident_id", rep.IncidentID
	}
	res, err := tx.ExecContext(ctx, `INSERT INTO replacements (outage_id, incident_id, reservation_id, piece_id, failed_node, kind, policy, state, reason,
		from_at, until_at, offer_expires_at, triggered_by, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (`+keyCol+`) DO NOTHING`,
		outage, incident, rep.ReservationID, rep.PieceID, rep.FailedNode, string(rep.Kind), string(rep.Policy), rep.State, rep.Reason,
		unix(rep.From), unix(rep.Until), expires, by, unix(now), unix(now))
	if err != nil {
		return Replacement{}, false, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return Replacement{}, false, err
	}
	got, err := scanReplacement(tx.QueryRowContext(ctx, `SELECT `+replacementColumns+` FROM replacements WHERE `+keyCol+` = ?`, key))
	if err != nil || n != 1 || got.TriggeredBy == 0 {
		return got, n == 1, err
	}
	return got, true, insertAudit(ctx, tx, replacementTriggerAudit(got, now))
}

// replacementTriggerAudit is the audit entry of an admin's trigger of
// replacement rep (just recorded): the admin, the rental, and what was
// decided — booked, offered to the buyer, being paid, unfilled with the
// reason, or not wanted.
func replacementTriggerAudit(rep Replacement, now time.Time) AuditEntry {
	decided := strings.ReplaceAll(rep.State, "_", " ")
	switch rep.State {
	case ReplacementCharging:
		decided = "being paid (the buyer's share is charged to their saved card)"
	case ReplacementOffered:
		decided = "offered to the buyer"
	case ReplacementUnfilled:
		decided = "not booked: " + rep.Reason
	case ReplacementNotWanted:
		decided = "not wanted (the buyer's policy is never)"
	}
	return AuditEntry{At: now, ActorID: rep.TriggeredBy, Action: AuditReplacementTrigger, SubjectKind: AuditSubjectReservation, SubjectID: rep.ReservationID,
		After: AuditJSON(map[string]any{"replacement_id": rep.ID, "incident_id": rep.IncidentID, "piece_id": rep.PieceID, "node": rep.FailedNode,
			"policy": rep.Policy, "state": rep.State}),
		Note: fmt.Sprintf("Replacement #%d of reservation #%d triggered from incident #%d (%s on node %d): %s.",
			rep.ID, rep.ReservationID, rep.IncidentID, strings.ToLower(rep.Kind.Label()), rep.FailedNode+1, strings.TrimSuffix(decided, "."))}
}

// RecordReplacementDecision records, once per outage, a replacement that
// books nothing: not wanted (policy never), unfilled (nothing fits or the
// money rule refused, Reason saying why: the buyer is told, and the SLA
// credit stands) or offered (ask policy: the buyer is told what is
// offered, Reason, and confirms before OfferExpiresAt). It returns the row
// for the outage — an earlier one, unchanged, if there is one.
func (db *DB) RecordReplacementDecision(ctx context.Context, rep Replacement, now time.Time) (Replacement, error) {
	const op = "record replacement decision"
	switch rep.State {
	case ReplacementNotWanted, ReplacementUnfilled, ReplacementOffered:
	default:
		return Replacement{}, fmt.Errorf("store: %s: state %q books something", op, rep.State)
	}
	tx, err := db.begin(ctx)
	if err != nil {
		return Replacement{}, fail(op, err, "")
	}
	defer tx.Rollback()
	got, inserted, err := insertReplacementRow(ctx, tx, rep, now)
	if err != nil || !inserted {
		return got, fail(op, err, "")
	}
	url := fmt.Sprintf("/reservations/%d", rep.ReservationID)
	var buyer int64
	if err := tx.QueryRowContext(ctx, `SELECT buyer_id FROM reservations WHERE id = ?`, rep.ReservationID).Scan(&buyer); err != nil {
		return Replacement{}, fail(op, err, "")
	}
	what := fmt.Sprintf("The provider's agent measured a %s on node %d of reservation #%d", strings.ToLower(rep.Kind.Label()), rep.FailedNode+1, rep.ReservationID)
	switch rep.State {
	case ReplacementUnfilled:
		err = insertNotification(ctx, tx, Notification{UserID: buyer, Kind: NotifyReplacementUnfilled, CreatedAt: now, URL: url,
			Message: what + ". No replacement could be booked: " + rep.Reason + " The SLA credit for the outage stands."})
	case ReplacementOffered:
		err = insertNotification(ctx, tx, Notification{UserID: buyer, Kind: NotifyReplacementOffered, CreatedAt: now,
			URL:     fmt.Sprintf("/replacements/%d", got.ID),
			Message: what + ". A replacement is offered: " + rep.Reason + " Confirm it before " + market.FormatTime(rep.OfferExpiresAt) + ", or it lapses and the SLA credit applies."})
	}
	if err != nil {
		return Replacement{}, fail(op, err, "")
	}
	return got, fail(op, tx.Commit(), "")
}

// BookReplacement books the replacement of rep's piece with pieces (from
// market.Rematch, placed on nodes, paid as split says) in one transaction,
// once per outage: a replacement already recorded for the outage is
// returned as it is (booked is false) — unless it is an offer the buyer
// buyerID (non-zero) confirms while it is live. Inside the transaction the
// reservation must still be active with the piece running to rep.Until;
// the original piece then ends at rep.From for split.OriginalAmount under
// its frozen terms; the new pieces are checked and placed on their offers
// as every booking is (reserveOnOffer), inserted with their own offers'
// frozen terms, and added to the reservation, whose amount becomes the sum
// of its pieces; the ledger records the movements
// (market.ReplacementEntries); a refund, if any, is left to the retrier;
// the buyer is told what failed, where the rental is now and how to
// connect, and the providers are told. A buyer's share above zero is
// refused here: it is charged first (RecordReplacementCharge) and booked
// with the payment (BookChargedReplacement).
func (db *DB) BookReplacement(ctx context.Context, rep Replacement, buyerID int64, pieces []market.ReservationPiece, split market.ReplacementSplit, tier market.ReplacementTier, now time.Time) (_ Replacement, booked bool, _ error) {
	const op = "book replacement"
	if len(pieces) == 0 {
		return Replacement{}, false, invalid("A replacement needs at least one piece.")
	}
	if split.BuyerShare > 0 {
		return Replacement{}, false, conflict("This replacement costs the buyer more than they paid; their share is charged first (RecordReplacementCharge).")
	}
	tx, err := db.begin(ctx)
	if err != nil {
		return Replacement{}, false, fail(op, err, "")
	}
	defer tx.Rollback()
	rep.State = ReplacementBooked
	got, inserted, err := insertReplacementRow(ctx, tx, rep, now)
	if err != nil {
		return Replacement{}, false, fail(op, err, "")
	}
	if !inserted {
		if buyerID == 0 || got.State != ReplacementOffered {
			return got, false, nil
		}
		if !got.OfferLive(now) {
			return Replacement{}, false, conflict("This offer of a replacement has lapsed; the SLA credit for the outage applies.")
		}
	}
	if got, err = bookReplacementTx(ctx, tx, got, buyerID, truncate(rep.From), pieces, split, tier, "", now); err != nil {
		return Replacement{}, false, fail(op, err, "")
	}
	return got, true, fail(op, tx.Commit(), "")
}

// bookReplacementTx books replacement row got (recorded for its outage)
// from `from` with pieces, inside tx: the checks, the original piece's
// end, the new pieces on their offers, the reservation's amount, the
// row's money, the ledger (with the buyer's share paid by premiumRef, if
// any) and the notifications. It returns the row as booked.
func bookReplacementTx(ctx context.Context, tx *sql.Tx, got Replacement, buyerID int64, from time.Time, pieces []market.ReservationPiece,
	split market.ReplacementSplit, tier market.ReplacementTier, premiumRef string, now time.Time) (Replacement, error) {
	r, err := getReservation(ctx, tx, got.ReservationID)
	if err != nil {
		return Replacement{}, err
	}
	if buyerID != 0 && r.BuyerID != buyerID {
		return Replacement{}, notFound(msgReplacementNotFound)
	}
	orig := pieceOfReservation(r, got.PieceID)
	if r.State != market.ReservationActive || orig.ID == 0 || !orig.End.Equal(got.Until) || !from.Before(orig.End) {
		return Replacement{}, conflict("This rental has moved on since the failure was measured; no replacement was booked.")
	}
	if _, err := tx.ExecContext(ctx, `UPDATE reservation_pieces SET end_at = ?, amount_cents = ? WHERE id = ?`,
		unix(from), int64(split.OriginalAmount()), orig.ID); err != nil {
		return Replacement{}, err
	}
	add := make([]market.ReservationPiece, len(pieces))
	var offerIDs []int64
	byOffer := map[int64][]int{}
	for i, p := range pieces {
		p.ID, p.Start, p.End = 0, from, truncate(p.End)
		add[i] = p
		if _, seen := byOffer[p.OfferID]; !seen {
			offerIDs = append(offerIDs, p.OfferID)
		}
		byOffer[p.OfferID] = append(byOffer[p.OfferID], i)
	}
	for _, id := range offerIDs {
		if err := reserveOnOffer(ctx, tx, id, add, byOffer[id], now); err != nil {
			return Replacement{}, err
		}
	}
	position := len(r.Pieces)
	ids := make([]string, len(add))
	for i := range add {
		p := &add[i]
		var basis, schedule string
		if err := tx.QueryRowContext(ctx, insertPieceQuery, r.ID, position+i, p.ProviderID, p.Devices, unix(p.Start), unix(p.End),
			boolInt(p.Interruptible), int64(p.PriceCents), int64(p.AmountCents), p.FreeCancelHours, p.CancelFeeBP,
			boolInt(p.Gang), formatNodes(p.Nodes), p.OfferID,
		).Scan(&p.ID, &basis, &p.Terms.UptimeBP, &p.Terms.CreditCapBP, &schedule, &p.RejectMinutes); err != nil {
			return Replacement{}, err
		}
		ids[i] = strconv.FormatInt(p.ID, 10)
	}
	var total market.Cents
	for _, p := range r.Pieces {
		if p.ID == orig.ID {
			p.AmountCents = split.OriginalAmount()
		}
		total += p.AmountCents
	}
	for _, p := range add {
		total += p.AmountCents
	}
	if _, err := tx.ExecContext(ctx, `UPDATE reservations SET amount_cents = ?, updated_at = ? WHERE id = ?`, int64(total), unix(now), r.ID); err != nil {
		return Replacement{}, err
	}
	refundDone := boolInt(split.Refund == 0)
	if _, err := tx.ExecContext(ctx, `UPDATE replacements SET state = ?, tier = ?, piece_ids = ?, from_at = ?, remaining_cents = ?,
		delivered_cents = ?, cost_cents = ?, refund_cents = ?, provider_share_cents = ?, buyer_share_cents = ?, refund_done = ?,
		next_attempt_at = ?, premium_ref = ?, updated_at = ? WHERE id = ?`,
		ReplacementBooked, int(tier), strings.Join(ids, ","), unix(from), int64(split.Remaining), int64(split.Delivered), int64(split.Cost),
		int64(split.Refund), int64(split.ProviderShare), int64(split.BuyerShare), refundDone, unix(now), premiumRef, unix(now), got.ID); err != nil {
		return Replacement{}, err
	}
	entries := market.ReplacementEntries(got.ID, r, orig.ProviderID, add, split, now)
	if split.BuyerShare > 0 {
		entries = append(entries, market.ReplacementChargeEntries(got.ID, r, add, split, premiumRef, now)...)
	}
	if err := insertEntries(ctx, tx, entries); err != nil {
		return Replacement{}, err
	}
	got.From = from
	if err := notifyReplaced(ctx, tx, r, orig, got, add, split, tier, now); err != nil {
		return Replacement{}, err
	}
	return scanReplacement(tx.QueryRowContext(ctx, `SELECT `+replacementColumns+` FROM replacements WHERE id = ?`, got.ID))
}

// RecordReplacementCharge records, in one transaction, the decision to
// book a dearer replacement whose buyer's share (split.BuyerShare > 0) is
// charged to the buyer's default saved card: the outage's row in state
// charging with the planned pieces, the split and the tier, and the
// pending charge of the share (market.PurposeReplacement) that
// BookChargedReplacement finishes. The buyer buyerID (non-zero) takes up
// an offer they confirm while it is live; otherwise a row already
// recorded for the outage is returned as it is with no charge (ci.ID 0).
// No saved card is a market CodeNotFound error and records nothing.
func (db *DB) RecordReplacementCharge(ctx context.Context, rep Replacement, buyerID int64, pieces []market.ReservationPiece, split market.ReplacementSplit,
	tier market.ReplacementTier, now time.Time) (Replacement, market.ChargeIntent, error) {
	const op = "record replacement charge"
	if len(pieces) == 0 || split.BuyerShare <= 0 {
		return Replacement{}, market.ChargeIntent{}, invalid("Only a replacement with a buyer's share is charged.")
	}
	plan, err := json.Marshal(pieces)
	if err != nil {
		return Replacement{}, market.ChargeIntent{}, fail(op, err, "")
	}
	tx, err := db.begin(ctx)
	if err != nil {
		return Replacement{}, market.ChargeIntent{}, fail(op, err, "")
	}
	defer tx.Rollback()
	rep.State = ReplacementCharging
	got, inserted, err := insertReplacementRow(ctx, tx, rep, now)
	if err != nil {
		return Replacement{}, market.ChargeIntent{}, fail(op, err, "")
	}
	if !inserted {
		if buyerID == 0 || got.State != ReplacementOffered {
			return got, market.ChargeIntent{}, nil
		}
		if !got.OfferLive(now) {
			return Replacement{}, market.ChargeIntent{}, conflict("This offer of a replacement has lapsed; the SLA credit for the outage applies.")
		}
	}
	r, err := getReservation(ctx, tx, got.ReservationID)
	if err != nil {
		return Replacement{}, market.ChargeIntent{}, fail(op, err, "")
	}
	if buyerID != 0 && r.BuyerID != buyerID {
		return Replacement{}, market.ChargeIntent{}, notFound(msgReplacementNotFound)
	}
	ci, err := insertChargeIntent(ctx, tx, market.ChargeIntent{Purpose: market.PurposeReplacement, BuyerID: r.BuyerID,
		ReservationID: r.ID, Amount: split.BuyerShare}, now)
	if err != nil {
		return Replacement{}, market.ChargeIntent{}, fail(op, err, "")
	}
	var taken int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM replacements WHERE charge_intent_id = ?`, ci.ID).Scan(&taken); err != nil {
		return Replacement{}, market.ChargeIntent{}, fail(op, err, "")
	}
	if taken > 0 {
		// Another outage of the same rental is being charged right now.
		return Replacement{}, market.ChargeIntent{}, conflict("Another replacement of this rental is being paid; this one is planned again shortly.")
	}
	if _, err := tx.ExecContext(ctx, `UPDATE replacements SET state = ?, tier = ?, from_at = ?, remaining_cents = ?, delivered_cents = ?,
		cost_cents = ?, refund_cents = ?, provider_share_cents = ?, buyer_share_cents = ?, charge_intent_id = ?, planned_pieces = ?,
		updated_at = ? WHERE id = ?`,
		ReplacementCharging, int(tier), unix(truncate(rep.From)), int64(split.Remaining), int64(split.Delivered), int64(split.Cost),
		int64(split.Refund), int64(split.ProviderShare), int64(split.BuyerShare), ci.ID, string(plan), unix(now), got.ID); err != nil {
		return Replacement{}, market.ChargeIntent{}, fail(op, err, "")
	}
	got, err = scanReplacement(tx.QueryRowContext(ctx, `SELECT `+replacementColumns+` FROM replacements WHERE id = ?`, got.ID))
	if err != nil {
		return Replacement{}, market.ChargeIntent{}, fail(op, err, "")
	}
	return got, ci, fail(op, tx.Commit(), "")
}

// chargingReplacement returns the replacement row a replacement charge
// intent pays for, with its planned pieces.
func chargingReplacement(ctx context.Context, tx *sql.Tx, chargeIntentID int64) (Replacement, []market.ReservationPiece, error) {
	var plan string
	if err := tx.QueryRowContext(ctx, `SELECT planned_pieces FROM replacements WHERE charge_intent_id = ?`, chargeIntentID).Scan(&plan); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return Replacement{}, nil, notFound(msgReplacementNotFound)
		}
		return Replacement{}, nil, err
	}
	rep, err := scanReplacement(tx.QueryRowContext(ctx, `SELECT `+replacementColumns+` FROM replacements WHERE charge_intent_id = ?`, chargeIntentID))
	if err != nil {
		return Replacement{}, nil, err
	}
	var pieces []market.ReservationPiece
	if err := json.Unmarshal([]byte(plan), &pieces); err != nil {
		return Replacement{}, nil, fmt.Errorf("replacement %d: planned pieces: %w", rep.ID, err)
	}
	return rep, pieces, nil
}

// BookChargedReplacement books, in one transaction, the replacement whose
// buyer's share the charge intent chargeIntentID paid with the
// processor's payment paymentIntentID: the planned pieces from the
// replacement's start (as BookReplacement books them), the ledger with the
// share's charge entries (market.ReplacementChargeEntries), and the intent
// finished. A replacement booked already with this payment is returned as
// it is (a retry); one that can no longer be booked is a conflict, and
// nothing is recorded (RecordUnbookedReplacementCharge records it).
func (db *DB) BookChargedReplacement(ctx context.Context, chargeIntentID int64, paymentIntentID string, now time.Time) (Replacement, error) {
	const op = "book charged replacement"
	tx, err := db.begin(ctx)
	if err != nil {
		return Replacement{}, fail(op, err, "")
	}
	defer tx.Rollback()
	rep, pieces, err := chargingReplacement(ctx, tx, chargeIntentID)
	if err != nil {
		return Replacement{}, fail(op, err, "")
	}
	if rep.State == ReplacementBooked && rep.PremiumRef == paymentIntentID {
		return rep, nil
	}
	if rep.State != ReplacementCharging {
		return Replacement{}, conflict("This replacement is no longer being paid for.")
	}
	got, err := bookReplacementTx(ctx, tx, rep, 0, rep.From, pieces, rep.Split, rep.Tier, paymentIntentID, now)
	if err != nil {
		return Replacement{}, fail(op, err, "")
	}
	if err := finishChargeIntent(ctx, tx, chargeIntentID, paymentIntentID, market.ChargeOutcomePaid, now); err != nil {
		return Replacement{}, fail(op, err, "")
	}
	return got, fail(op, tx.Commit(), "")
}

// RecordUnbookedReplacementCharge records, in one transaction, a buyer's
// share that was paid (paymentIntentID) for a replacement that could not be
// booked any more, reason saying why: the replacement unfilled, the payment
// in the ledger as the buyer's (market.ReplacementUnbookedCharge), its full
// refund due to the retrier (refund_cents, on premium_ref), the intent
// finished as unbooked, and the buyer told. A row no longer charging is
// left as it is.
func (db *DB) RecordUnbookedReplacementCharge(ctx context.Context, chargeIntentID int64, paymentIntentID, reason string, now time.Time) error {
	const op = "record unbooked replacement charge"
	tx, err := db.begin(ctx)
	if err != nil {
		return fail(op, err, "")
	}
	defer tx.Rollback()
	rep, _, err := chargingReplacement(ctx, tx, chargeIntentID)
	if err != nil {
		return fail(op, err, "")
	}
	if rep.State != ReplacementCharging {
		return nil
	}
	r, err := getReservation(ctx, tx, rep.ReservationID)
	if err != nil {
		return fail(op, err, "")
	}
	share := rep.Split.BuyerShare
	if _, err := tx.ExecContext(ctx, `UPDATE replacements SET state = ?, reason = ?, refund_cents = ?, refund_done = 0, next_attempt_at = ?,
		premium_ref = ?, updated_at = ? WHERE id = ?`, ReplacementUnfilled, reason, int64(share), unix(now), paymentIntentID, unix(now), rep.ID); err != nil {
		return fail(op, err, "")
	}
	if err := insertEntries(ctx, tx, []market.LedgerEntry{market.ReplacementUnbookedCharge(rep.ID, r, share, paymentIntentID, now)}); err != nil {
		return fail(op, err, "")
	}
	if err := finishChargeIntent(ctx, tx, chargeIntentID, paymentIntentID, market.ChargeOutcomeUnbooked, now); err != nil {
		return fail(op, err, "")
	}
	if err := insertNotification(ctx, tx, Notification{UserID: r.BuyerID, Kind: NotifyReplacementUnfilled, CreatedAt: now, URL: fmt.Sprintf("/reservations/%d", r.ID),
		Message: fmt.Sprintf("%s No replacement could be booked: %s The %s charged for it is refunded to your card, and the SLA credit for the outage stands.",
			failureSentence(rep), reason, share)}); err != nil {
		return fail(op, err, "")
	}
	return fail(op, tx.Commit(), "")
}

// declineReplacementCharge records, inside tx, that the buyer's card
// refused the share of replacement charge chargeIntentID: the replacement
// is unfilled with the bank's message, and the buyer told.
func declineReplacementCharge(ctx context.Context, tx *sql.Tx, chargeIntentID int64, message string, now time.Time) error {
	rep, _, err := chargingReplacement(ctx, tx, chargeIntentID)
	if err != nil || rep.State != ReplacementCharging {
		return err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE replacements SET state = ?, reason = ?, updated_at = ? WHERE id = ?`,
		ReplacementUnfilled, message, unix(now), rep.ID); err != nil {
		return err
	}
	var buyer int64
	if err := tx.QueryRowContext(ctx, `SELECT buyer_id FROM reservations WHERE id = ?`, rep.ReservationID).Scan(&buyer); err != nil {
		return err
	}
	return insertNotification(ctx, tx, Notification{UserID: buyer, Kind: NotifyReplacementUnfilled, CreatedAt: now, URL: fmt.Sprintf("/reservations/%d", rep.ReservationID),
		Message: fmt.Sprintf("%s A replacement costing you %s more was found, but your saved card was not charged: %s No replacement was booked, and the SLA credit for the outage stands.",
			failureSentence(rep), rep.Split.BuyerShare, message)})
}

// failureSentence says what the agent measured, for the buyer.
func failureSentence(rep Replacement) string {
	return fmt.Sprintf("The provider's agent measured a %s on node %d of reservation #%d.", strings.ToLower(rep.Kind.Label()), rep.FailedNode+1, rep.ReservationID)
}

// notifyReplaced tells the buyer what failed, where the rental is now and
// how to connect, and tells the failing and the new providers.
func notifyReplaced(ctx context.Context, tx *sql.Tx, r market.Reservation, orig market.ReservationPiece, rep Replacement,
	add []market.ReservationPiece, split market.ReplacementSplit, tier market.ReplacementTier, now time.Time) error {
	var where []string
	for _, p := range add {
		var title string
		if err := tx.QueryRowContext(ctx, `SELECT title FROM offers WHERE id = ?`, p.OfferID).Scan(&title); err != nil {
			return err
		}
		nodes := make([]string, len(p.Nodes))
		for i, n := range p.Nodes {
			nodes[i] = strconv.Itoa(n.Node + 1)
		}
		where = append(where, fmt.Sprintf("%d device(s) on offer #%d %q, node(s) %s", p.Devices, p.OfferID, title, strings.Join(nodes, ", ")))
	}
	money := "at no extra cost"
	switch {
	case split.Refund > 0:
		money = split.Refund.String() + " cheaper; the difference is refunded to your card"
	case split.BuyerShare > 0:
		money = fmt.Sprintf("dearer by %s: the failing provider bears %s and %s was charged to your saved card",
			split.ProviderShare+split.BuyerShare, split.ProviderShare, split.BuyerShare)
	case split.ProviderShare > 0:
		money = "dearer by " + split.ProviderShare.String() + ", borne by the failing provider"
	}
	url := fmt.Sprintf("/reservations/%d", r.ID)
	msgs := []Notification{
		{UserID: r.BuyerID, Kind: NotifyRentalReplaced, CreatedAt: now, URL: url,
			Message: fmt.Sprintf("The provider's agent measured a %s on node %d of reservation #%d. From %s your rental runs on %s (%s), %s. Connect as before: your SSH keys are handed to the new node's agent; the reservation page shows the new endpoint.",
				strings.ToLower(rep.Kind.Label()), rep.FailedNode+1, r.ID, market.FormatTime(rep.From), strings.Join(where, "; "), tier.Label(), money)},
		{UserID: orig.ProviderID, Kind: NotifyIncidentReported, CreatedAt: now, URL: fmt.Sprintf("/provider/bookings/%d", r.ID),
			Message: fmt.Sprintf("Node %d of booking #%d failed and the rental was moved to a replacement from %s; your piece settles for the time it delivered.",
				rep.FailedNode+1, r.ID, market.FormatTime(rep.From))},
	}
	told := map[int64]bool{orig.ProviderID: true}
	for _, p := range add {
		if !told[p.ProviderID] {
			told[p.ProviderID] = true
			msgs = append(msgs, Notification{UserID: p.ProviderID, Kind: NotifyBookingMade, CreatedAt: now, URL: fmt.Sprintf("/provider/bookings/%d", r.ID),
				Message: fmt.Sprintf("New booking #%d on your offer from %s to %s: a replacement after another host failed.", r.ID, market.FormatTime(p.Start), market.FormatTime(p.End))})
		}
	}
	for _, n := range msgs {
		if err := insertNotification(ctx, tx, n); err != nil {
			return err
		}
	}
	return nil
}

// LapseReplacementOffers marks every offered replacement whose deadline
// passed by now as lapsed, telling the buyer, and returns them.
func (db *DB) LapseReplacementOffers(ctx context.Context, now time.Time) ([]Replacement, error) {
	const op = "lapse replacement offers"
	tx, err := db.begin(ctx)
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer tx.Rollback()
	due, err := collect(ctx, tx, scanReplacement, `SELECT `+replacementColumns+` FROM replacements WHERE state = ? AND offer_expires_at <= ? ORDER BY id`,
		ReplacementOffered, unix(now))
	if err != nil {
		return nil, fail(op, err, "")
	}
	for i := range due {
		rep := &due[i]
		if _, err := tx.ExecContext(ctx, `UPDATE replacements SET state = ?, updated_at = ? WHERE id = ?`, ReplacementLapsed, unix(now), rep.ID); err != nil {
			return nil, fail(op, err, "")
		}
		rep.State = ReplacementLapsed
		var buyer int64
		if err := tx.QueryRowContext(ctx, `SELECT buyer_id FROM reservations WHERE id = ?`, rep.ReservationID).Scan(&buyer); err != nil {
			return nil, fail(op, err, "")
		}
		if err := insertNotification(ctx, tx, Notification{UserID: buyer, Kind: NotifyReplacementUnfilled, CreatedAt: now,
			URL:     fmt.Sprintf("/reservations/%d", rep.ReservationID),
			Message: fmt.Sprintf("The replacement offered for reservation #%d was not confirmed in time and lapsed; the SLA credit for the outage applies.", rep.ReservationID)}); err != nil {
			return nil, fail(op, err, "")
		}
	}
	return due, fail(op, tx.Commit(), "")
}

// FindReplacement returns a replacement; a buyerID other than 0 must be
// its reservation's buyer (else not found).
func (db *DB) FindReplacement(ctx context.Context, buyerID, id int64) (Replacement, error) {
	const op = "find replacement"
	tx, err := db.read(ctx)
	if err != nil {
		return Replacement{}, fail(op, err, "")
	}
	defer tx.Rollback()
	rep, err := scanReplacement(tx.QueryRowContext(ctx, `SELECT `+replacementColumns+` FROM replacements WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return Replacement{}, notFound(msgReplacementNotFound)
	}
	if err != nil {
		return Replacement{}, fail(op, err, "")
	}
	if buyerID != 0 {
		var buyer int64
		if err := tx.QueryRowContext(ctx, `SELECT buyer_id FROM reservations WHERE id = ?`, rep.ReservationID).Scan(&buyer); err != nil {
			return Replacement{}, fail(op, err, "")
		}
		if buyer != buyerID {
			return Replacement{}, notFound(msgReplacementNotFound)
		}
	}
	return rep, fail(op, tx.Commit(), "")
}

// ListReplacements returns a reservation's replacements in the order recorded.
func (db *DB) ListReplacements(ctx context.Context, reservationID int64) ([]Replacement, error) {
	const op = "list replacements"
	tx, err := db.read(ctx)
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer tx.Rollback()
	out, err := collect(ctx, tx, scanReplacement, `SELECT `+replacementColumns+` FROM replacements WHERE reservation_id = ? ORDER BY id`, reservationID)
	return out, fail(op, err, "")
}

// ListAllReplacements returns every replacement, for reconciliation.
func (db *DB) ListAllReplacements(ctx context.Context) ([]Replacement, error) {
	const op = "list all replacements"
	tx, err := db.read(ctx)
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer tx.Rollback()
	out, err := collect(ctx, tx, scanReplacement, `SELECT `+replacementColumns+` FROM replacements ORDER BY id`)
	return out, fail(op, err, "")
}

// ReplacementRefund is a booked replacement's refund due, with the
// payment it is made on.
type ReplacementRefund struct {
	Replacement     Replacement
	Reservation     market.Reservation
	PaymentIntentID string
}

// ListDueReplacementRefunds returns the replacements whose refund is not
// made and is due at now (a zero now: all of them).
func (db *DB) ListDueReplacementRefunds(ctx context.Context, now time.Time) ([]ReplacementRefund, error) {
	const op = "list due replacement refunds"
	tx, err := db.read(ctx)
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer tx.Rollback()
	where, args := `WHERE refund_done = 0`, []any{}
	if !now.IsZero() {
		where, args = where+` AND next_attempt_at <= ?`, append(args, unix(now))
	}
	reps, err := collect(ctx, tx, scanReplacement, `SELECT `+replacementColumns+` FROM replacements `+where+` ORDER BY id`, args...)
	if err != nil {
		return nil, fail(op, err, "")
	}
	out := make([]ReplacementRefund, 0, len(reps))
	for _, rep := range reps {
		r, err := getReservation(ctx, tx, rep.ReservationID)
		if err != nil {
			return nil, fail(op, err, "")
		}
		pi := rep.PremiumRef
		if rep.State != ReplacementUnfilled || pi == "" {
			// A cheaper replacement's difference comes back out of the
			// rental's own payment; an unbooked share out of its own.
			if err := tx.QueryRowContext(ctx, `SELECT payment_intent_id FROM payments WHERE reservation_id = ?`, r.ID).Scan(&pi); err != nil && !errors.Is(err, sql.ErrNoRows) {
				return nil, fail(op, err, "")
			}
		}
		out = append(out, ReplacementRefund{Replacement: rep, Reservation: r, PaymentIntentID: pi})
	}
	return out, fail(op, tx.Commit(), "")
}

// RecordReplacementRefund records the refund of a replacement's
// difference (the processor's refund refundID) in the ledger, once.
func (db *DB) RecordReplacementRefund(ctx context.Context, id int64, refundID string, now time.Time) error {
	const op = "record replacement refund"
	tx, err := db.begin(ctx)
	if err != nil {
		return fail(op, err, "")
	}
	defer tx.Rollback()
	rep, err := scanReplacement(tx.QueryRowContext(ctx, `SELECT `+replacementColumns+` FROM replacements WHERE id = ?`, id))
	if err != nil {
		return fail(op, err, "")
	}
	if rep.RefundDone {
		return nil
	}
	r, err := getReservation(ctx, tx, rep.ReservationID)
	if err != nil {
		return fail(op, err, "")
	}
	if err := insertEntries(ctx, tx, []market.LedgerEntry{market.ReplacementRefundEntry(rep.ID, r, rep.Split.Refund, refundID, now)}); err != nil {
		return fail(op, err, "")
	}
	if _, err := tx.ExecContext(ctx, `UPDATE replacements SET refund_done = 1, refund_ref = ?, last_error = '', updated_at = ? WHERE id = ?`,
		refundID, unix(now), id); err != nil {
		return fail(op, err, "")
	}
	if err := insertNotification(ctx, tx, Notification{UserID: r.BuyerID, Kind: NotifyRefundSent, CreatedAt: now, URL: fmt.Sprintf("/reservations/%d", r.ID),
		Message: refundMessage(rep, r.ID)}); err != nil {
		return fail(op, err, "")
	}
	return fail(op, tx.Commit(), "")
}

// RecordReplacementRefundFailure records a failed refund attempt, to be
// tried again at next.
func (db *DB) RecordReplacementRefundFailure(ctx context.Context, id int64, msg string, next, now time.Time) error {
	const op = "record replacement refund failure"
	tx, err := db.begin(ctx)
	if err != nil {
		return fail(op, err, "")
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `UPDATE replacements SET attempts = attempts + 1, last_error = ?, next_attempt_at = ?, updated_at = ?
		WHERE id = ? AND refund_done = 0`, msg, unix(next), unix(now), id); err != nil {
		return fail(op, err, "")
	}
	return fail(op, tx.Commit(), "")
}

// refundMessage tells the buyer what a replacement's refund was for.
func refundMessage(rep Replacement, reservationID int64) string {
	if rep.State == ReplacementUnfilled {
		return fmt.Sprintf("%s was refunded to your card: the replacement on reservation #%d it paid for could not be booked.", rep.Split.Refund, reservationID)
	}
	return fmt.Sprintf("%s was refunded to your card: the replacement on reservation #%d cost less than the time it replaced.", rep.Split.Refund, reservationID)
}

// notifyReplacementReady tells the buyer, inside tx, how to connect once
// the agent of a replacement piece's node first hands over access: the
// piece p of r is a booked replacement's, and conn is where it now runs.
// Any other piece tells nothing.
func notifyReplacementReady(ctx context.Context, tx *sql.Tx, r market.Reservation, p market.ReservationPiece, node int, conn market.Connection, now time.Time) error {
	reps, err := collect(ctx, tx, scanReplacement, `SELECT `+replacementColumns+` FROM replacements WHERE reservation_id = ? AND state = ? ORDER BY id`,
		r.ID, ReplacementBooked)
	if err != nil {
		return err
	}
	for _, rep := range reps {
		for _, id := range rep.PieceIDs {
			if id != p.ID {
				continue
			}
			return insertNotification(ctx, tx, Notification{UserID: r.BuyerID, Kind: NotifyRentalReplaced, CreatedAt: now, URL: fmt.Sprintf("/reservations/%d", r.ID),
				Message: fmt.Sprintf("The replacement of reservation #%d after the %s on node %d is ready on node %d of offer #%d: connect with %s (your SSH keys are installed there).",
					r.ID, strings.ToLower(rep.Kind.Label()), rep.FailedNode+1, node+1, p.OfferID, conn.SSHCommand())})
		}
	}
	return nil
}
