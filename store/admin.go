package store

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// Person-safe messages of the admin area.
const (
	msgReasonRequired = "Give the provider a reason; they will see it."
	msgFlagNotFound   = "That review flag could not be found."
)

// reviewState is the part of an offer a review changes, as the audit trail
// records it.
type reviewState struct {
	Review market.ReviewState `json:"review"`
	Note   string             `json:"note,omitempty"`
}

// DecideOffer records an admin's decision on an offer in one transaction
// with its audit entry and the provider's notification: approved, rejected
// or changes requested (both with a reason the provider sees). A withdrawn
// offer cannot be decided (conflict). It returns the offer as stored.
func (db *DB) DecideOffer(ctx context.Context, adminID, offerID int64, decision market.ReviewState, note string, now time.Time) (market.Offer, error) {
	const op = "decide offer"
	note = strings.TrimSpace(note)
	var action, kind string
	var notice market.NoticeKind
	switch decision {
	case market.ReviewApproved:
		action, kind, notice = AuditOfferApprove, NotifyListingApproved, market.NoticeListingApproved
	case market.ReviewRejected:
		action, kind, notice = AuditOfferReject, NotifyListingRejected, market.NoticeListingRejected
	case market.ReviewChangesRequested:
		action, kind, notice = AuditOfferRequestChanges, NotifyListingChanges, market.NoticeListingChanges
	default:
		return market.Offer{}, invalid("Choose approve, reject or ask for changes.")
	}
	if decision != market.ReviewApproved && note == "" {
		return market.Offer{}, &market.Error{Code: market.CodeInvalid, Message: msgReasonRequired,
			Fields: map[string]string{"note": msgReasonRequired}}
	}
	if len(note) > 2000 {
		return market.Offer{}, invalid("Keep the reason under 2,000 characters.")
	}
	if err := badText("note", note, true); err != nil {
		return market.Offer{}, err
	}
	tx, err := db.begin(ctx)
	if err != nil {
		return market.Offer{}, fail(op, err, "")
	}
	defer tx.Rollback()

	o, edit, err := setReview(ctx, tx, offerID, decision, note, now)
	if err != nil {
		return market.Offer{}, fail(op, err, "")
	}
	auditNote := note
	if edit {
		auditNote = strings.TrimSpace("an edit of the listed offer. " + note)
		switch decision {
		case market.ReviewRejected:
			notice = market.NoticeEditRejected
		case market.ReviewChangesRequested:
			notice = market.NoticeEditChanges
		}
	}
	before := reviewState{Review: o.Review, Note: o.ReviewNote}
	if err := insertAudit(ctx, tx, AuditEntry{At: now, ActorID: adminID, Action: action, SubjectKind: AuditSubjectOffer,
		SubjectID: offerID, Before: AuditJSON(before), After: AuditJSON(reviewState{decision, note}), Note: auditNote}); err != nil {
		return market.Offer{}, fail(op, err, "")
	}
	if err := insertNotification(ctx, tx, Notification{UserID: o.ProviderID, Kind: kind,
		Notice: market.Notice{Kind: notice, Params: market.NoticeParams{Title: o.Title, Text: note}},
		URL:    "/provider/offers", CreatedAt: now}); err != nil {
		return market.Offer{}, fail(op, err, "")
	}
	stored, err := getOffer(ctx, tx, offerID)
	if err != nil {
		return market.Offer{}, fail(op, err, "")
	}
	if err := tx.Commit(); err != nil {
		return market.Offer{}, fail(op, err, "")
	}
	return stored, nil
}

// setReview changes an offer's review and returns the offer as it was
// before. A withdrawn offer is a conflict. When the listed offer has an
// edit held for review (a revision), the decision is on the edit, and
// edit reports it: approving writes the edit over the offer; rejecting or
// asking for changes drops it, and the listed version stays as it was.
func setReview(ctx context.Context, tx *sql.Tx, offerID int64, review market.ReviewState, note string, now time.Time) (o market.Offer, edit bool, err error) {
	o, err = getOffer(ctx, tx, offerID)
	if err != nil {
		return market.Offer{}, false, err
	}
	if o.State == market.OfferWithdrawn {
		return market.Offer{}, false, conflict("This offer has been withdrawn by its provider.")
	}
	if review == market.ReviewApproved {
		applied, err := applyRevision(ctx, tx, offerID, now)
		if err != nil || applied {
			return o, applied, err
		}
	} else if _, held, err := loadRevision(ctx, tx, offerID); err != nil || held {
		if err == nil {
			err = dropRevision(ctx, tx, offerID)
		}
		return o, held, err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE offers SET review = ?, review_note = ?, updated_at = ? WHERE id = ?`,
		string(review), note, unix(now), offerID); err != nil {
		return market.Offer{}, false, err
	}
	return o, false, nil
}

// AutoApproveOffer approves a pending offer without an admin, for a
// provider with a clean track record whose offer raised no red flag (the
// caller decides with market.AutoApprove). The audit entry names the
// system as the actor. It reports whether it approved: an offer no longer
// pending (edited again, withdrawn) is left alone.
func (db *DB) AutoApproveOffer(ctx context.Context, offerID int64, now time.Time) (bool, error) {
	const op = "auto-approve offer"
	tx, err := db.begin(ctx)
	if err != nil {
		return false, fail(op, err, "")
	}
	defer tx.Rollback()

	o, err := getOffer(ctx, tx, offerID)
	if err != nil {
		return false, fail(op, err, "")
	}
	_, held, err := loadRevision(ctx, tx, offerID)
	if err != nil {
		return false, fail(op, err, "")
	}
	if (o.Review != market.ReviewPending && !held) || o.State == market.OfferWithdrawn {
		return false, nil
	}
	if _, _, err := setReview(ctx, tx, offerID, market.ReviewApproved, "", now); err != nil {
		return false, fail(op, err, "")
	}
	if err := insertAudit(ctx, tx, AuditEntry{At: now, Action: AuditOfferAutoApprove, SubjectKind: AuditSubjectOffer, SubjectID: offerID,
		Before: AuditJSON(reviewState{Review: o.Review}), After: AuditJSON(reviewState{Review: market.ReviewApproved}),
		Note: "clean track record, no red flags"}); err != nil {
		return false, fail(op, err, "")
	}
	if err := insertNotification(ctx, tx, Notification{UserID: o.ProviderID, Kind: NotifyListingApproved, URL: "/provider/offers", CreatedAt: now,
		Notice: market.Notice{Kind: market.NoticeListingAutoApproved, Params: market.NoticeParams{Title: o.Title}}}); err != nil {
		return false, fail(op, err, "")
	}
	return true, fail(op, tx.Commit(), "")
}

// figureState is a figure as the audit trail records it.
type figureState struct {
	Kind  market.FigureKind  `json:"kind"`
	Value int64              `json:"value"`
	Basis market.FigureBasis `json:"basis"`
	Note  string             `json:"verified_note,omitempty"`
}

// VerifyFigure marks the offer's figure of the given kind verified by the
// platform with the admin's evidence note, and records it in the audit
// trail, in one transaction. The offer must state such a figure (else not
// found).
func (db *DB) VerifyFigure(ctx context.Context, adminID, offerID int64, kind market.FigureKind, note string, now time.Time) error {
	const op = "verify figure"
	note = strings.TrimSpace(note)
	if note == "" {
		return &market.Error{Code: market.CodeInvalid, Message: "Say what evidence the verification rests on.",
			Fields: map[string]string{"verified_note": "Say what evidence the verification rests on."}}
	}
	if err := badText("verified_note", note, true); err != nil {
		return err
	}
	tx, err := db.begin(ctx)
	if err != nil {
		return fail(op, err, "")
	}
	defer tx.Rollback()

	o, err := getOffer(ctx, tx, offerID)
	if err != nil {
		return fail(op, err, "")
	}
	f, ok := o.Figure(kind)
	if !ok {
		return notFound("That offer states no such figure.")
	}
	if _, err := tx.ExecContext(ctx, `UPDATE offer_figures SET basis = ?, verified_note = ? WHERE offer_id = ? AND kind = ?`,
		string(market.FigureVerified), note, offerID, string(kind)); err != nil {
		return fail(op, err, "")
	}
	if _, err := tx.ExecContext(ctx, `UPDATE offers SET updated_at = ? WHERE id = ?`, unix(now), offerID); err != nil {
		return fail(op, err, "")
	}
	if err := insertAudit(ctx, tx, AuditEntry{At: now, ActorID: adminID, Action: AuditFigureVerify, SubjectKind: AuditSubjectOffer, SubjectID: offerID,
		Before: AuditJSON(figureState{f.Kind, f.Value, f.Basis, f.VerifiedNote}),
		After:  AuditJSON(figureState{f.Kind, f.Value, market.FigureVerified, note}), Note: note}); err != nil {
		return fail(op, err, "")
	}
	return fail(op, tx.Commit(), "")
}

// Suspension is the outcome of suspending or reinstating a provider.
type Suspension struct {
	// OfferIDs are all of the provider's offers, for the caller to take out
	// of (or put back into) the matcher's index.
	OfferIDs []int64
	// Flagged counts the open reservations newly flagged for review.
	Flagged int
	// RevokedTokens counts the API tokens revoked by the suspension; they
	// stay revoked when the provider is reinstated.
	RevokedTokens int
	// RevokedHostTokens counts the agents' host tokens revoked; they too
	// stay revoked.
	RevokedHostTokens int
}

// suspensionState is a user's suspension as the audit trail records it.
type suspensionState struct {
	Suspended           bool `json:"suspended"`
	FlaggedReservations int  `json:"flagged_reservations,omitempty"`
	RevokedTokens       int  `json:"revoked_tokens,omitempty"`
}

// openReservationStates are the states in which a reservation still has
// something to deliver or settle.
var openReservationStates = []market.ReservationState{
	market.ReservationHeld, market.ReservationConfirmed, market.ReservationActive, market.ReservationCompleted,
}

// SuspendProvider suspends a provider in one transaction: the account is
// marked suspended (the catalogue, the booking transaction and API token
// lookups all refuse it from then on), every session ends, each of their
// reservations that is not finished (held, confirmed, active or completed
// and unsettled) is flagged for an admin's review, and the audit trail and
// the provider's notifications record it. Admins and an already suspended
// account are conflicts; the reason is required.
func (db *DB) SuspendProvider(ctx context.Context, adminID, userID int64, reason string, now time.Time) (Suspension, error) {
	const op = "suspend provider"
	reason = strings.TrimSpace(reason)
	if reason == "" {
		return Suspension{}, &market.Error{Code: market.CodeInvalid, Message: "Say why the provider is suspended.",
			Fields: map[string]string{"reason": "Say why the provider is suspended."}}
	}
	if err := badText("reason", reason, true); err != nil {
		return Suspension{}, err
	}
	tx, err := db.begin(ctx)
	if err != nil {
		return Suspension{}, fail(op, err, "")
	}
	defer tx.Rollback()

	u, err := findUserIn(ctx, tx, userID)
	if err != nil {
		return Suspension{}, fail(op, err, "")
	}
	switch {
	case u.IsAdmin:
		return Suspension{}, conflict("Administrators cannot be suspended here.")
	case u.Suspended:
		return Suspension{}, conflict("This account is already suspended.")
	}
	if _, err := tx.ExecContext(ctx, `UPDATE users SET suspended = 1 WHERE id = ?`, userID); err != nil {
		return Suspension{}, fail(op, err, "")
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM sessions WHERE user_id = ?`, userID); err != nil {
		return Suspension{}, fail(op, err, "")
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO provider_suspensions (user_id, reason, suspended_by, suspended_at) VALUES (?, ?, ?, ?)
		ON CONFLICT (user_id) DO UPDATE SET reason = excluded.reason, suspended_by = excluded.suspended_by, suspended_at = excluded.suspended_at`,
		userID, reason, adminID, unix(now)); err != nil {
		return Suspension{}, fail(op, err, "")
	}
	args := []any{"Provider suspended: " + reason, adminID, unix(now), userID}
	for _, s := range openReservationStates {
		args = append(args, string(s))
	}
	res, err := tx.ExecContext(ctx, `INSERT INTO reservation_flags (reservation_id, reason, created_by, created_at)
		SELECT r.id, ?, ?, ? FROM reservations r
		WHERE r.id IN (SELECT p.reservation_id FROM reservation_pieces p WHERE p.provider_id = ?)
		AND r.state IN (`+placeholders(len(openReservationStates))+`)
		AND NOT EXISTS (SELECT 1 FROM reservation_flags f WHERE f.reservation_id = r.id AND f.cleared_at IS NULL)`, args...)
	if err != nil {
		return Suspension{}, fail(op, err, "")
	}
	n, err := res.RowsAffected()
	if err != nil {
		return Suspension{}, fail(op, err, "")
	}
	out := Suspension{Flagged: int(n)}
	if out.OfferIDs, err = providerOfferIDs(ctx, tx, userID); err != nil {
		return Suspension{}, fail(op, err, "")
	}
	// Revoked, not merely refused while suspended: a token that may have
	// been misused must not come back to life at reinstatement.
	if out.RevokedTokens, err = revokeAPITokens(ctx, tx, userID, now); err != nil {
		return Suspension{}, fail(op, err, "")
	}
	// The agents' host tokens too (issue 23): a reinstated provider makes
	// new ones on the hosts page.
	if out.RevokedHostTokens, err = execCount(ctx, tx, `UPDATE host_tokens SET revoked_at = ?
		WHERE revoked_at IS NULL AND offer_id IN (SELECT id FROM offers WHERE provider_id = ?)`, unix(now), userID); err != nil {
		return Suspension{}, fail(op, err, "")
	}
	if err := insertAudit(ctx, tx, AuditEntry{At: now, ActorID: adminID, Action: AuditProviderSuspend, SubjectKind: AuditSubjectUser, SubjectID: userID,
		Before: AuditJSON(suspensionState{}), After: AuditJSON(suspensionState{Suspended: true, FlaggedReservations: out.Flagged, RevokedTokens: out.RevokedTokens}), Note: reason}); err != nil {
		return Suspension{}, fail(op, err, "")
	}
	if err := insertNotification(ctx, tx, Notification{UserID: userID, Kind: NotifyAccountSuspended, CreatedAt: now,
		Notice: market.Notice{Kind: market.NoticeAccountSuspended, Params: market.NoticeParams{Text: reason}}}); err != nil {
		return Suspension{}, fail(op, err, "")
	}
	if err := tx.Commit(); err != nil {
		return Suspension{}, fail(op, err, "")
	}
	return out, nil
}

// ReinstateProvider lifts a suspension, with an audit entry and a
// notification, in one transaction. Flags raised on the provider's
// reservations stay until an admin clears them. An account that is not
// suspended is a conflict.
func (db *DB) ReinstateProvider(ctx context.Context, adminID, userID int64, note string, now time.Time) (Suspension, error) {
	const op = "reinstate provider"
	note = strings.TrimSpace(note)
	if err := badText("note", note, true); err != nil {
		return Suspension{}, err
	}
	tx, err := db.begin(ctx)
	if err != nil {
		return Suspension{}, fail(op, err, "")
	}
	defer tx.Rollback()

	u, err := findUserIn(ctx, tx, userID)
	if err != nil {
		return Suspension{}, fail(op, err, "")
	}
	if !u.Suspended {
		return Suspension{}, conflict("This account is not suspended.")
	}
	if _, err := tx.ExecContext(ctx, `UPDATE users SET suspended = 0 WHERE id = ?`, userID); err != nil {
		return Suspension{}, fail(op, err, "")
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM provider_suspensions WHERE user_id = ?`, userID); err != nil {
		return Suspension{}, fail(op, err, "")
	}
	var out Suspension
	if out.OfferIDs, err = providerOfferIDs(ctx, tx, userID); err != nil {
		return Suspension{}, fail(op, err, "")
	}
	if err := insertAudit(ctx, tx, AuditEntry{At: now, ActorID: adminID, Action: AuditProviderReinstate, SubjectKind: AuditSubjectUser, SubjectID: userID,
		Before: AuditJSON(suspensionState{Suspended: true}), After: AuditJSON(suspensionState{}), Note: note}); err != nil {
		return Suspension{}, fail(op, err, "")
	}
	if err := insertNotification(ctx, tx, Notification{UserID: userID, Kind: NotifyAccountReinstated, CreatedAt: now,
		Notice: market.Notice{Kind: market.NoticeAccountReinstated}}); err != nil {
		return Suspension{}, fail(op, err, "")
	}
	if err := tx.Commit(); err != nil {
		return Suspension{}, fail(op, err, "")
	}
	return out, nil
}

func providerOfferIDs(ctx context.Context, q querier, providerID int64) ([]int64, error) {
	rows, err := q.QueryContext(ctx, `SELECT id FROM offers WHERE provider_id = ? ORDER BY id`, providerID)
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

// ProviderSummary is a provider as the admin's provider list shows it.
type ProviderSummary struct {
	User             market.User
	Record           market.ProviderRecord
	Offers           int
	SuspensionReason string
	SuspendedAt      time.Time
}

// ListProviders returns every provider account with its record, by name.
func (db *DB) ListProviders(ctx context.Context, now time.Time) ([]ProviderSummary, error) {
	const op = "list providers"
	tx, err := db.read(ctx)
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer tx.Rollback()

	rows, err := tx.QueryContext(ctx, `SELECT `+prefixed("u.", userColumns)+`,
			(SELECT COUNT(*) FROM offers o WHERE o.provider_id = u.id), COALESCE(s.reason, ''), COALESCE(s.suspended_at, 0)
		FROM users u LEFT JOIN provider_suspensions s ON s.user_id = u.id
		WHERE u.is_provider = 1`)
	if err != nil {
		return nil, fail(op, err, "")
	}
	var out []ProviderSummary
	for rows.Next() {
		var p ProviderSummary
		var at int64
		u, err := scanUser(rows, &p.Offers, &p.SuspensionReason, &at)
		if err != nil {
			rows.Close()
			return nil, fail(op, err, "")
		}
		p.User = u
		if at != 0 {
			p.SuspendedAt = fromUnix(at)
		}
		out = append(out, p)
	}
	if err := closeRows(rows); err != nil {
		return nil, fail(op, err, "")
	}
	records, err := providerRecords(ctx, tx, 0, now)
	if err != nil {
		return nil, fail(op, err, "")
	}
	for i := range out {
		r := records[out[i].User.ID]
		r.ProviderID, r.Suspended = out[i].User.ID, out[i].User.Suspended
		out[i].Record = r
	}
	slices.SortFunc(out, func(a, b ProviderSummary) int {
		return compareNames(a.User.DisplayName, a.User.ID, b.User.DisplayName, b.User.ID)
	})
	return out, nil
}

// compareNames orders names as lists shown to people are ordered, the same
// on both engines: an ORDER BY on text follows the database's collation —
// byte order in SQLite, the server's locale in PostgreSQL — so text is
// ordered here instead. Names compare case-insensitively (Unicode simple
// case folding, so "bob" sits beside "Bob"), then by their bytes, then by
// id; accented letters come after the unaccented alphabet (code point
// order: "Zoë" after "Zoe", "Émile" after "zed").
func compareNames(a string, aID int64, b string, bID int64) int {
	if c := strings.Compare(strings.ToLower(a), strings.ToLower(b)); c != 0 {
		return c
	}
	if c := strings.Compare(a, b); c != 0 {
		return c
	}
	return cmp.Compare(aID, bID)
}

// prefixed qualifies each column of a comma-separated list.
func prefixed(prefix, cols string) string {
	parts := strings.Split(cols, ",")
	for i, p := range parts {
		parts[i] = prefix + strings.TrimSpace(p)
	}
	return strings.Join(parts, ", ")
}

// ReservationFlag is a reservation waiting for an admin's look.
type ReservationFlag struct {
	ID            int64
	ReservationID int64
	Reason        string
	BuyerName     string
	State         market.ReservationState
	AmountCents   market.Cents
	CreatedAt     time.Time
}

// ListOpenReservationFlags returns the flags no admin has cleared, oldest first.
func (db *DB) ListOpenReservationFlags(ctx context.Context) ([]ReservationFlag, error) {
	const op = "list reservation flags"
	rows, err := db.reader.QueryContext(ctx, `SELECT f.id, f.reservation_id, f.reason, u.display_name, r.state, r.amount_cents, f.created_at
		FROM reservation_flags f JOIN reservations r ON r.id = f.reservation_id JOIN users u ON u.id = r.buyer_id
		WHERE f.cleared_at IS NULL ORDER BY f.created_at, f.id`)
	if err != nil {
		return nil, fail(op, err, "")
	}
	var out []ReservationFlag
	for rows.Next() {
		var f ReservationFlag
		var state string
		var amount, created int64
		if err := rows.Scan(&f.ID, &f.ReservationID, &f.Reason, &f.BuyerName, &state, &amount, &created); err != nil {
			rows.Close()
			return nil, fail(op, err, "")
		}
		f.State, f.AmountCents, f.CreatedAt = market.ReservationState(state), market.Cents(amount), fromUnix(created)
		out = append(out, f)
	}
	if err := closeRows(rows); err != nil {
		return nil, fail(op, err, "")
	}
	return out, nil
}

// ClearReservationFlag records that an admin has looked at a flagged
// reservation, with an audit entry. A flag already cleared is a conflict.
func (db *DB) ClearReservationFlag(ctx context.Context, adminID, flagID int64, note string, now time.Time) error {
	const op = "clear reservation flag"
	if err := badText("note", note, true); err != nil {
		return err
	}
	tx, err := db.begin(ctx)
	if err != nil {
		return fail(op, err, "")
	}
	defer tx.Rollback()
	var resID int64
	var cleared sql.NullInt64
	err = tx.QueryRowContext(ctx, `SELECT reservation_id, cleared_at FROM reservation_flags WHERE id = ?`, flagID).Scan(&resID, &cleared)
	if errors.Is(err, sql.ErrNoRows) {
		return notFound(msgFlagNotFound)
	}
	if err != nil {
		return fail(op, err, "")
	}
	if cleared.Valid {
		return conflict("This flag was already cleared.")
	}
	if _, err := tx.ExecContext(ctx, `UPDATE reservation_flags SET cleared_by = ?, cleared_at = ? WHERE id = ?`, adminID, unix(now), flagID); err != nil {
		return fail(op, err, "")
	}
	if err := insertAudit(ctx, tx, AuditEntry{At: now, ActorID: adminID, Action: AuditReservationFlagClear, SubjectKind: AuditSubjectReservation,
		SubjectID: resID, Before: `{"flagged":true}`, After: `{"flagged":false}`, Note: strings.TrimSpace(note)}); err != nil {
		return fail(op, err, "")
	}
	return fail(op, tx.Commit(), "")
}

// ProviderRecord returns one provider's record as of now (see
// market.ProviderRecord); a provider with no history has a zero record.
func (db *DB) ProviderRecord(ctx context.Context, providerID int64, now time.Time) (market.ProviderRecord, error) {
	const op = "provider record"
	tx, err := db.read(ctx)
	if err != nil {
		return market.ProviderRecord{}, fail(op, err, "")
	}
	defer tx.Rollback()
	rs, err := providerRecords(ctx, tx, providerID, now)
	if err != nil {
		return market.ProviderRecord{}, fail(op, err, "")
	}
	r := rs[providerID]
	r.ProviderID = providerID
	if err := tx.QueryRowContext(ctx, `SELECT suspended FROM users WHERE id = ?`, providerID).Scan(&r.Suspended); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return market.ProviderRecord{}, fail(op, err, "")
	}
	return r, nil
}

// ProviderRecords returns the record of every provider with any history,
// by provider id, in a few grouped queries (for the matcher's index, which
// feeds market.ReliabilityBP of each into its candidates). Providers absent
// from the map have no history.
func (db *DB) ProviderRecords(ctx context.Context, now time.Time) (map[int64]market.ProviderRecord, error) {
	const op = "provider records"
	tx, err := db.read(ctx)
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer tx.Rollback()
	rs, err := providerRecords(ctx, tx, 0, now)
	return rs, fail(op, err, "")
}

// providerRecords computes records for one provider, or all (providerID 0),
// with one grouped query per source: offers, delivered pieces, incidents
// and upheld disputes in the trailing window market.ReliabilityWindow, and
// the pieces the provider's agents measured (measuredRecords).
func providerRecords(ctx context.Context, q querier, providerID int64, now time.Time) (map[int64]market.ProviderRecord, error) {
	out := map[int64]market.ProviderRecord{}
	since := unix(now.Add(-market.ReliabilityWindow))
	filter := func(col string) (string, []any) {
		if providerID == 0 {
			return "", nil
		}
		return " AND " + col + " = ?", []any{providerID}
	}
	each := func(query string, args []any, scan func(rows *sql.Rows, r *market.ProviderRecord) (int64, error)) error {
		rows, err := q.QueryContext(ctx, query, args...)
		if err != nil {
			return err
		}
		for rows.Next() {
			var r market.ProviderRecord
			id, err := scan(rows, &r)
			if err != nil {
				rows.Close()
				return err
			}
			cur := out[id]
			mergeRecord(&cur, r)
			cur.ProviderID = id
			out[id] = cur
		}
		return closeRows(rows)
	}

	f, fa := filter("o.provider_id")
	if err := each(`SELECT o.provider_id, COUNT(*) FROM offers o WHERE o.review = ?`+f+` GROUP BY o.provider_id`,
		append([]any{string(market.ReviewApproved)}, fa...),
		func(rows *sql.Rows, r *market.ProviderRecord) (int64, error) {
			var id int64
			return id, rows.Scan(&id, &r.ApprovedOffers)
		}); err != nil {
		return nil, err
	}

	f, fa = filter("p.provider_id")
	args := []any{since, unix(now), string(market.ReservationCompleted), string(market.ReservationSettled)}
	if err := each(`SELECT p.provider_id, COUNT(DISTINCT p.reservation_id), MAX(p.devices),
			SUM(CASE WHEN p.end_at > ? AND p.end_at <= ? THEN p.devices * (p.end_at - p.start_at) ELSE 0 END)
		FROM reservation_pieces p JOIN reservations r ON r.id = p.reservation_id
		WHERE r.state IN (?, ?) AND r.resale_of IS NULL`+f+` GROUP BY p.provider_id`, append(args, fa...),
		func(rows *sql.Rows, r *market.ProviderRecord) (int64, error) {
			var id int64
			return id, rows.Scan(&id, &r.DeliveredReservations, &r.MaxDeliveredDevices, &r.PromisedDeviceSeconds)
		}); err != nil {
		return nil, err
	}

	// Device-time lost to acknowledged outages, clipped to the piece.
	args = nil
	for _, k := range market.OutageKinds() {
		args = append(args, string(k))
	}
	outageIn := "(?" + strings.Repeat(", ?", len(args)-1) + ")"
	args = append(args, since)
	if err := each(`SELECT p.provider_id, SUM(CASE WHEN i.acknowledged = 1 THEN 1 ELSE 0 END),
			SUM(CASE WHEN i.acknowledged = 1 AND i.kind IN `+outageIn+` THEN `+incidentLostSeconds+` ELSE 0 END)
		FROM incidents i JOIN reservation_pieces p ON p.id = i.piece_id
		WHERE i.start_at >= ? AND i.end_at > i.start_at`+f+` GROUP BY p.provider_id`, append(args, fa...),
		func(rows *sql.Rows, r *market.ProviderRecord) (int64, error) {
			var id int64
			return id, rows.Scan(&id, &r.RecentIncidents, &r.LostDeviceSeconds)
		}); err != nil {
		return nil, err
	}

	if err := each(`SELECT p.provider_id, COUNT(DISTINCT d.id)
		FROM disputes d JOIN reservation_pieces p ON p.reservation_id = d.reservation_id
		WHERE d.status = ?`+f+` GROUP BY p.provider_id`, append([]any{DisputeGranted}, fa...),
		func(rows *sql.Rows, r *market.ProviderRecord) (int64, error) {
			var id int64
			return id, rows.Scan(&id, &r.UpheldDisputes)
		}); err != nil {
		return nil, err
	}
	if err := measuredRecords(ctx, q, providerID, since, unix(now), out); err != nil {
		return nil, err
	}
	return out, nil
}

// mergeRecord adds the non-zero parts of r to into.
func mergeRecord(into *market.ProviderRecord, r market.ProviderRecord) {
	into.ApprovedOffers += r.ApprovedOffers
	into.DeliveredReservations += r.DeliveredReservations
	into.UpheldDisputes += r.UpheldDisputes
	into.MaxDeliveredDevices = max(into.MaxDeliveredDevices, r.MaxDeliveredDevices)
	into.RecentIncidents += r.RecentIncidents
	into.PromisedDeviceSeconds += r.PromisedDeviceSeconds
	into.LostDeviceSeconds += r.LostDeviceSeconds
	into.MeasuredDeviceSeconds += r.MeasuredDeviceSeconds
	into.MeasuredLostDeviceSeconds += r.MeasuredLostDeviceSeconds
	into.ReportedLostOnMeasured += r.ReportedLostOnMeasured
}

// ListedPrice is the on-demand price of one listed offer.
type ListedPrice struct {
	OfferID int64
	Price   market.Cents
}

// ListedPrices returns the prices of the offers listed at now, by
// accelerator model (one model, or all when acceleratorID is ""), for the
// price red flag.
func (db *DB) ListedPrices(ctx context.Context, acceleratorID string, now time.Time) (map[string][]ListedPrice, error) {
	const op = "listed prices"
	args := listedArgs(now)
	cond := ""
	if acceleratorID != "" {
		cond, args = " AND o.accelerator_id = ?", append(args, acceleratorID)
	}
	rows, err := db.reader.QueryContext(ctx, `SELECT o.accelerator_id, o.id, o.price_cents_per_device_hour FROM offers o
		WHERE `+listedWhere+cond+` ORDER BY o.id`, args...)
	if err != nil {
		return nil, fail(op, err, "")
	}
	out := map[string][]ListedPrice{}
	for rows.Next() {
		var acc string
		var p ListedPrice
		var price int64
		if err := rows.Scan(&acc, &p.OfferID, &price); err != nil {
			rows.Close()
			return nil, fail(op, err, "")
		}
		p.Price = market.Cents(price)
		out[acc] = append(out[acc], p)
	}
	if err := closeRows(rows); err != nil {
		return nil, fail(op, err, "")
	}
	return out, nil
}
