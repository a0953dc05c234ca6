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

// OfferListing is an offer as the catalogue shows it: with its provider's
// display name and organisation.
type OfferListing struct {
	Offer        market.Offer
	ProviderName string
	ProviderOrg  string
	// ProviderSuspended: the provider is suspended, so the offer is not
	// listed whatever its review and state.
	ProviderSuspended bool
	// Listed, in the review queue, is the version on the market when
	// Offer is an edit of it held for review (ID 0 otherwise).
	Listed market.Offer
	// SharedHostUserReported: an agent of the offer's nodes reports that
	// every renter of its node is the same Unix user (market.IsolationSharedUser),
	// whatever the provider declared.
	SharedHostUserReported bool
}

// SharedHostUser reports whether buyers are told "shared host user": the
// provider declared it or an agent of the offer reports it.
func (l OfferListing) SharedHostUser() bool {
	return l.Offer.Containers.SharedHostUser || l.SharedHostUserReported
}

// offerFields returns the provider-editable columns of an offer and their
// values, in one order shared by INSERT and UPDATE so they cannot drift.
func offerFields(o market.Offer) ([]string, []any) {
	cols := []string{
		"title", "accelerator_id", "memory_gb", "devices_per_node", "nodes", "interconnect", "network_id",
		"placement_group", "cpu_cores", "ram_gb", "storage_gb",
		"driver_version", "cuda_version", "os_image", "container_runtime",
		"region_id", "carbon_g_per_kwh", "power_note",
		"available_from", "available_until", "min_rental_hours", "max_rental_hours", "provisioning_mins", "preempt_notice_mins",
		"price_cents_per_device_hour", "interruptible", "interruptible_cents_per_dh", "storage_cents_per_gb_month", "egress_cents_per_gb",
		"billing_basis", "uptime_bp", "credit_cap_bp", "free_cancel_hours", "cancel_fee_bp", "reject_minutes",
		"container_engine", "container_cdi", "container_max_image_gb", "container_image_cache", "shared_host_user",
		"access_mode", "access_instructions",
	}
	args := []any{
		o.Title, o.AcceleratorID, o.MemoryGB, o.DevicesPerNode, o.Nodes, string(o.Interconnect), o.NetworkID,
		boolInt(o.PlacementGroup), o.CPUCores, o.RAMGB, o.StorageGB,
		o.DriverVersion, o.CUDAVersion, o.OSImage, o.ContainerRuntime,
		o.RegionID, o.CarbonGPerKWh, o.PowerNote,
		unix(o.AvailableFrom), unix(o.AvailableUntil), o.MinRentalHours, o.MaxRentalHours, o.ProvisioningMins, o.PreemptNoticeMins,
		int64(o.PriceCentsPerDeviceHour), boolInt(o.Interruptible), int64(o.InterruptibleCentsPerDH), int64(o.StorageCentsPerGBMonth), int64(o.EgressCentsPerGB),
		string(o.BillingBasis), o.UptimeBP, o.CreditCapBP, o.FreeCancelHours, o.CancelFeeBP, o.RejectMinutes,
		string(o.Containers.Engine), boolInt(o.Containers.CDI), o.Containers.MaxImageGB, boolInt(o.Containers.ImageCache), boolInt(o.Containers.SharedHostUser),
		string(accessMode(o.Access)), o.AccessInstructions,
	}
	return cols, args
}

// offerColumns is the SELECT list scanOffer reads, for the offers table
// aliased o; listingColumns adds the provider's name and organisation.
const (
	offerColumns = `o.id, o.provider_id, o.title, o.accelerator_id, o.memory_gb, o.devices_per_node, o.nodes,
		o.interconnect, o.network_id, o.placement_group, o.cpu_cores, o.ram_gb, o.storage_gb,
		o.driver_version, o.cuda_version, o.os_image, o.container_runtime,
		o.region_id, o.carbon_g_per_kwh, o.power_note,
		o.available_from, o.available_until, o.min_rental_hours, o.max_rental_hours, o.provisioning_mins, o.preempt_notice_mins,
		o.price_cents_per_device_hour, o.interruptible, o.interruptible_cents_per_dh, o.storage_cents_per_gb_month, o.egress_cents_per_gb,
		o.billing_basis, o.uptime_bp, o.credit_cap_bp, o.free_cancel_hours, o.cancel_fee_bp, o.reject_minutes,
		o.container_engine, o.container_cdi, o.container_max_image_gb, o.container_image_cache, o.shared_host_user,
		o.access_mode, o.access_instructions,
		o.review, o.review_note, o.state, o.created_at, o.updated_at`
	listingColumns = offerColumns + `, u.display_name, u.organisation, u.suspended,
		EXISTS (SELECT 1 FROM hosts hi WHERE hi.offer_id = o.id AND hi.isolation = '` + string(market.IsolationSharedUser) + `')`
	listingFrom = ` FROM offers o JOIN users u ON u.id = o.provider_id`
)

func scanOffer(s scanner, extra ...any) (market.Offer, error) {
	var o market.Offer
	var interconnect, basis, review, state, engine, access string
	var from, until, created, updated int64
	var price, intPrice, storagePrice, egressPrice int64
	dest := append([]any{
		&o.ID, &o.ProviderID, &o.Title, &o.AcceleratorID, &o.MemoryGB, &o.DevicesPerNode, &o.Nodes,
		&interconnect, &o.NetworkID, &o.PlacementGroup, &o.CPUCores, &o.RAMGB, &o.StorageGB,
		&o.DriverVersion, &o.CUDAVersion, &o.OSImage, &o.ContainerRuntime,
		&o.RegionID, &o.CarbonGPerKWh, &o.PowerNote,
		&from, &until, &o.MinRentalHours, &o.MaxRentalHours, &o.ProvisioningMins, &o.PreemptNoticeMins,
		&price, &o.Interruptible, &intPrice, &storagePrice, &egressPrice,
		&basis, &o.UptimeBP, &o.CreditCapBP, &o.FreeCancelHours, &o.CancelFeeBP, &o.RejectMinutes,
		&engine, &o.Containers.CDI, &o.Containers.MaxImageGB, &o.Containers.ImageCache, &o.Containers.SharedHostUser,
		&access, &o.AccessInstructions,
		&review, &o.ReviewNote, &state, &created, &updated,
	}, extra...)
	if err := s.Scan(dest...); err != nil {
		return market.Offer{}, err
	}
	o.Interconnect = market.Interconnect(interconnect)
	o.Containers.Engine = market.ContainerEngine(engine)
	o.Access = market.AccessMode(access)
	o.BillingBasis = market.BillingBasis(basis)
	o.Review = market.ReviewState(review)
	o.State = market.OfferState(state)
	o.AvailableFrom, o.AvailableUntil = fromUnix(from), fromUnix(until)
	o.CreatedAt, o.UpdatedAt = fromUnix(created), fromUnix(updated)
	o.PriceCentsPerDeviceHour = market.Cents(price)
	o.InterruptibleCentsPerDH = market.Cents(intPrice)
	o.StorageCentsPerGBMonth = market.Cents(storagePrice)
	o.EgressCentsPerGB = market.Cents(egressPrice)
	return o, nil
}

func scanListing(s scanner) (OfferListing, error) {
	var l OfferListing
	o, err := scanOffer(s, &l.ProviderName, &l.ProviderOrg, &l.ProviderSuspended, &l.SharedHostUserReported)
	l.Offer = o
	return l, err
}

// accessMode is the mode as stored: an offer built without one (tests,
// imports) runs the agent, as market.AccessMode.Agent reads it.
func accessMode(m market.AccessMode) market.AccessMode {
	if m.Agent() {
		return market.AccessAgent
	}
	return market.AccessManual
}

const msgDuplicateFigure = "Each performance figure may be stated once."

// CreateOffer stores a new offer of o.ProviderID, pending review and active,
// and returns it as stored. The provider cannot claim a verified figure.
// Validate with market.ValidateOffer first.
func (db *DB) CreateOffer(ctx context.Context, o market.Offer, now time.Time) (market.Offer, error) {
	const op = "create offer"
	for _, f := range o.Figures {
		if f.Basis == market.FigureVerified {
			return market.Offer{}, verifiedClaim(f.Kind)
		}
	}
	tx, err := db.begin(ctx)
	if err != nil {
		return market.Offer{}, fail(op, err, "")
	}
	defer tx.Rollback()
	if err := mayAct(ctx, tx, o.ProviderID); err != nil {
		return market.Offer{}, fail(op, err, "")
	}

	o.Review, o.ReviewNote, o.State = market.ReviewPending, "", market.OfferActive
	cols, args := offerFields(o)
	cols = append(cols, "provider_id", "review", "review_note", "state", "created_at", "updated_at")
	args = append(args, o.ProviderID, string(o.Review), o.ReviewNote, string(o.State), unix(now), unix(now))
	var id int64
	err = tx.QueryRowContext(ctx, `INSERT INTO offers (`+strings.Join(cols, ", ")+`) VALUES (`+placeholders(len(cols))+`) RETURNING id`,
		args...).Scan(&id)
	if err != nil {
		return market.Offer{}, fail(op, err, "")
	}
	if err := writeOfferChildren(ctx, tx, id, o.Figures, o.CreditSchedule); err != nil {
		return market.Offer{}, fail(op, err, msgDuplicateFigure)
	}
	stored, err := getOffer(ctx, tx, id)
	if err != nil {
		return market.Offer{}, fail(op, err, "")
	}
	if err := tx.Commit(); err != nil {
		return market.Offer{}, fail(op, err, "")
	}
	return stored, nil
}

// UpdateOffer saves a provider's edit of offer o.ID, which must belong to
// providerID (else not found) and must not be withdrawn (conflict). On an
// approved offer, an edit that cannot mislead a buyer (a lower price, a
// longer window: market.EditNeedsReview) applies at once, recorded in the
// audit trail with its before and after; any other edit is held as the
// offer's revision for review while the listed version stays on the
// market, and UpdateOffer reports held. An offer not approved yet takes
// the edit and goes (back) to pending review with no review note. A figure
// the platform has verified stays verified when the provider resubmits
// the same kind with the same value; a changed value replaces it and loses
// the verification. Review, State, ProviderID and the times in o are
// ignored. It returns the offer as edited (for a held edit, the revision).
func (db *DB) UpdateOffer(ctx context.Context, providerID int64, o market.Offer, now time.Time) (market.Offer, bool, error) {
	const op = "update offer"
	tx, err := db.begin(ctx)
	if err != nil {
		return market.Offer{}, false, fail(op, err, "")
	}
	defer tx.Rollback()

	cur, err := getOwnOffer(ctx, tx, providerID, o.ID)
	if err != nil {
		return market.Offer{}, false, fail(op, err, "")
	}
	if cur.State == market.OfferWithdrawn {
		return market.Offer{}, false, conflict("A withdrawn offer cannot be edited.")
	}
	figures, err := mergeFigures(cur.Figures, o.Figures)
	if err != nil {
		return market.Offer{}, false, err
	}

	o.Figures = figures
	if cur.Review == market.ReviewApproved && market.EditNeedsReview(cur, o) {
		rev := o
		rev.ProviderID, rev.Review, rev.ReviewNote, rev.State = cur.ProviderID, market.ReviewPending, "", cur.State
		rev.CreatedAt, rev.UpdatedAt = cur.CreatedAt, now
		if err := putRevision(ctx, tx, rev, now); err != nil {
			return market.Offer{}, false, fail(op, err, "")
		}
		return rev, true, fail(op, tx.Commit(), "")
	}
	review, note := market.ReviewPending, ""
	atOnce := cur.Review == market.ReviewApproved
	if atOnce {
		review, note = cur.Review, cur.ReviewNote
	}
	// An offer not listed takes the edit itself: a revision held from
	// when it was listed is superseded.
	if err := dropRevision(ctx, tx, o.ID); err != nil {
		return market.Offer{}, false, fail(op, err, "")
	}
	cols, args := offerFields(o)
	set := make([]string, 0, len(cols)+3)
	for _, c := range cols {
		set = append(set, c+" = ?")
	}
	set = append(set, "review = ?", "review_note = ?", "updated_at = ?")
	args = append(args, string(review), note, unix(now), o.ID)
	if _, err := tx.ExecContext(ctx, `UPDATE offers SET `+strings.Join(set, ", ")+` WHERE id = ?`, args...); err != nil {
		return market.Offer{}, false, fail(op, err, "")
	}
	if err := writeOfferChildren(ctx, tx, o.ID, figures, o.CreditSchedule); err != nil {
		return market.Offer{}, false, fail(op, err, msgDuplicateFigure)
	}
	stored, err := getOffer(ctx, tx, o.ID)
	if err != nil {
		return market.Offer{}, false, fail(op, err, "")
	}
	if atOnce {
		if err := insertAudit(ctx, tx, AuditEntry{At: now, ActorID: providerID, Action: AuditOfferEditAtOnce, SubjectKind: AuditSubjectOffer,
			SubjectID: o.ID, Before: AuditJSON(offerTermsOf(cur)), After: AuditJSON(offerTermsOf(stored)),
			Note: "a lower price or a longer window: listed at once"}); err != nil {
			return market.Offer{}, false, fail(op, err, "")
		}
	}
	if err := tx.Commit(); err != nil {
		return market.Offer{}, false, fail(op, err, "")
	}
	return stored, false, nil
}

// offerTerms is what an edit applied at once may change, for the audit
// trail.
type offerTerms struct {
	PriceCents             market.Cents `json:"price_cents_per_device_hour"`
	InterruptibleCents     market.Cents `json:"interruptible_cents_per_device_hour"`
	StorageCentsPerGBMonth market.Cents `json:"storage_cents_per_gb_month"`
	EgressCentsPerGB       market.Cents `json:"egress_cents_per_gb"`
	AvailableFrom          time.Time    `json:"available_from"`
	AvailableUntil         time.Time    `json:"available_until"`
}

func offerTermsOf(o market.Offer) offerTerms {
	return offerTerms{PriceCents: o.PriceCentsPerDeviceHour, InterruptibleCents: o.InterruptibleCentsPerDH,
		StorageCentsPerGBMonth: o.StorageCentsPerGBMonth, EgressCentsPerGB: o.EgressCentsPerGB,
		AvailableFrom: o.AvailableFrom, AvailableUntil: o.AvailableUntil}
}

// mergeFigures returns the figures to store when a provider resubmits
// figures over the current ones: an existing verified figure of the same
// kind and value is kept as verified; any other figure is the provider's,
// who cannot claim verification.
func mergeFigures(current, submitted []market.Figure) ([]market.Figure, error) {
	out := make([]market.Figure, 0, len(submitted))
	for _, f := range submitted {
		if old, ok := findFigure(current, f.Kind); ok && old.Basis == market.FigureVerified && old.Value == f.Value {
			out = append(out, old)
			continue
		}
		if f.Basis == market.FigureVerified {
			return nil, verifiedClaim(f.Kind)
		}
		out = append(out, f)
	}
	return out, nil
}

func findFigure(fs []market.Figure, k market.FigureKind) (market.Figure, bool) {
	for _, f := range fs {
		if f.Kind == k {
			return f, true
		}
	}
	return market.Figure{}, false
}

func verifiedClaim(k market.FigureKind) error {
	return &market.Error{
		Code:    market.CodeInvalid,
		Message: "Please correct the highlighted fields.",
		Fields:  map[string]string{"figure_" + string(k): "Only the platform can mark a figure verified."},
	}
}

// writeOfferChildren replaces the figures and credit tiers of an offer.
func writeOfferChildren(ctx context.Context, tx *sql.Tx, offerID int64, figures []market.Figure, tiers []market.CreditTier) error {
	if _, err := tx.ExecContext(ctx, `DELETE FROM offer_figures WHERE offer_id = ?`, offerID); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM offer_credit_tiers WHERE offer_id = ?`, offerID); err != nil {
		return err
	}
	for i, f := range figures {
		if _, err := tx.ExecContext(ctx, `
			INSERT INTO offer_figures (offer_id, kind, position, value, basis, method, verified_note)
			VALUES (?, ?, ?, ?, ?, ?, ?)`,
			offerID, string(f.Kind), i, f.Value, string(f.Basis), f.Method, f.VerifiedNote); err != nil {
			return err
		}
	}
	for i, t := range tiers {
		if _, err := tx.ExecContext(ctx, `
			INSERT INTO offer_credit_tiers (offer_id, position, below_bp, credit_bp) VALUES (?, ?, ?, ?)`,
			offerID, i, t.BelowBP, t.CreditBP); err != nil {
			return err
		}
	}
	return nil
}

// getOffer loads one offer with its figures and credit schedule.
func getOffer(ctx context.Context, q querier, id int64) (market.Offer, error) {
	o, err := scanOffer(q.QueryRowContext(ctx, `SELECT `+offerColumns+` FROM offers o WHERE o.id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return market.Offer{}, notFound(msgOfferNotFound)
	}
	if err != nil {
		return market.Offer{}, err
	}
	offers := []market.Offer{o}
	if err := loadOfferChildren(ctx, q, offers); err != nil {
		return market.Offer{}, err
	}
	return offers[0], nil
}

// getOwnOffer loads an offer of the provider; another provider's offer is
// not found, exactly as a missing one, so its existence does not leak.
func getOwnOffer(ctx context.Context, q querier, providerID, offerID int64) (market.Offer, error) {
	o, err := getOffer(ctx, q, offerID)
	if err != nil {
		return market.Offer{}, err
	}
	if o.ProviderID != providerID {
		return market.Offer{}, notFound(msgOfferNotFound)
	}
	return o, nil
}

// checkOwnOffer is getOwnOffer's check alone: nil when offerID is the
// provider's, not found otherwise (a missing offer or another provider's,
// alike).
func checkOwnOffer(ctx context.Context, q querier, providerID, offerID int64) error {
	var owner int64
	err := q.QueryRowContext(ctx, `SELECT provider_id FROM offers WHERE id = ?`, offerID).Scan(&owner)
	if errors.Is(err, sql.ErrNoRows) || (err == nil && owner != providerID) {
		return notFound(msgOfferNotFound)
	}
	return err
}

// childChunk bounds the ids in one IN list, well under SQLite's and
// PostgreSQL's limits on bound parameters.
const childChunk = 500

// loadOfferChildren fills the figures and credit schedules of offers.
func loadOfferChildren(ctx context.Context, q querier, offers []market.Offer) error {
	index := make(map[int64]int, len(offers))
	for i := range offers {
		index[offers[i].ID] = i
	}
	for start := 0; start < len(offers); start += childChunk {
		chunk := offers[start:min(start+childChunk, len(offers))]
		ids := make([]any, len(chunk))
		for i, o := range chunk {
			ids[i] = o.ID
		}
		in := placeholders(len(ids))

		rows, err := q.QueryContext(ctx, `
			SELECT offer_id, kind, value, basis, method, verified_note FROM offer_figures
			WHERE offer_id IN (`+in+`) ORDER BY offer_id, position`, ids...)
		if err != nil {
			return err
		}
		for rows.Next() {
			var id int64
			var f market.Figure
			var kind, basis string
			if err := rows.Scan(&id, &kind, &f.Value, &basis, &f.Method, &f.VerifiedNote); err != nil {
				rows.Close()
				return err
			}
			f.Kind, f.Basis = market.FigureKind(kind), market.FigureBasis(basis)
			o := &offers[index[id]]
			o.Figures = append(o.Figures, f)
		}
		if err := closeRows(rows); err != nil {
			return err
		}

		rows, err = q.QueryContext(ctx, `
			SELECT offer_id, below_bp, credit_bp FROM offer_credit_tiers
			WHERE offer_id IN (`+in+`) ORDER BY offer_id, position`, ids...)
		if err != nil {
			return err
		}
		for rows.Next() {
			var id int64
			var t market.CreditTier
			if err := rows.Scan(&id, &t.BelowBP, &t.CreditBP); err != nil {
				rows.Close()
				return err
			}
			o := &offers[index[id]]
			o.CreditSchedule = append(o.CreditSchedule, t)
		}
		if err := closeRows(rows); err != nil {
			return err
		}
	}
	return nil
}

// collect runs query and scans every row with scan, closing the rows: the
// one loop every list query shares.
func collect[T any](ctx context.Context, q querier, scan func(scanner) (T, error), query string, args ...any) ([]T, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			rows.Close()
			return nil, err
		}
		out = append(out, v)
	}
	return out, closeRows(rows)
}

func closeRows(rows *sql.Rows) error {
	return errors.Join(rows.Err(), rows.Close())
}

// FindOfferByID returns any offer, listed or not, with its provider's
// name. Callers decide who may see an unlisted offer.
func (db *DB) FindOfferByID(ctx context.Context, id int64) (OfferListing, error) {
	const op = "find offer"
	tx, err := db.read(ctx)
	if err != nil {
		return OfferListing{}, fail(op, err, "")
	}
	defer tx.Rollback()

	ls, err := queryListings(ctx, tx, `SELECT `+listingColumns+listingFrom+` WHERE o.id = ?`, id)
	if err != nil {
		return OfferListing{}, fail(op, err, "")
	}
	if len(ls) == 0 {
		return OfferListing{}, notFound(msgOfferNotFound)
	}
	return ls[0], nil
}

// FindProviderOffer returns an offer of the provider; another provider's
// offer is not found.
func (db *DB) FindProviderOffer(ctx context.Context, providerID, offerID int64) (market.Offer, error) {
	const op = "find provider offer"
	tx, err := db.read(ctx)
	if err != nil {
		return market.Offer{}, fail(op, err, "")
	}
	defer tx.Rollback()

	o, err := getOwnOffer(ctx, tx, providerID, offerID)
	if err != nil {
		return market.Offer{}, fail(op, err, "")
	}
	return o, nil
}

// ListProviderOffers returns all offers of the provider, newest first,
// whatever their review and state.
func (db *DB) ListProviderOffers(ctx context.Context, providerID int64) ([]market.Offer, error) {
	const op = "list provider offers"
	tx, err := db.read(ctx)
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer tx.Rollback()

	offers, err := collect(ctx, tx, func(s scanner) (market.Offer, error) { return scanOffer(s) }, `SELECT `+offerColumns+` FROM offers o
		WHERE o.provider_id = ? ORDER BY o.created_at DESC, o.id DESC`, providerID)
	if err != nil {
		return nil, fail(op, err, "")
	}
	if err := loadOfferChildren(ctx, tx, offers); err != nil {
		return nil, fail(op, err, "")
	}
	return offers, nil
}

// SetOfferState pauses, resumes or withdraws an offer of the provider.
// Another provider's offer is not found; a withdrawn offer stays withdrawn
// (conflict).
func (db *DB) SetOfferState(ctx context.Context, providerID, offerID int64, state market.OfferState, now time.Time) error {
	const op = "set offer state"
	if err := market.ChangeOfferState("", state); err != nil {
		return err
	}
	tx, err := db.begin(ctx)
	if err != nil {
		return fail(op, err, "")
	}
	defer tx.Rollback()

	var owner int64
	var cur string
	err = tx.QueryRowContext(ctx, `SELECT provider_id, state FROM offers WHERE id = ?`, offerID).Scan(&owner, &cur)
	if errors.Is(err, sql.ErrNoRows) || (err == nil && owner != providerID) {
		return notFound(msgOfferNotFound)
	}
	if err != nil {
		return fail(op, err, "")
	}
	if err := market.ChangeOfferState(market.OfferState(cur), state); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE offers SET state = ?, updated_at = ? WHERE id = ?`,
		string(state), unix(now), offerID); err != nil {
		return fail(op, err, "")
	}
	return fail(op, tx.Commit(), "")
}

// ReviewOffer records an admin's decision on an offer: approved, rejected
// (with a note the provider sees) or back to pending; on an offer with an
// edit held for review the decision is on the edit (setReview). A
// withdrawn offer cannot be reviewed (conflict).
func (db *DB) ReviewOffer(ctx context.Context, offerID int64, review market.ReviewState, note string, now time.Time) error {
	const op = "review offer"
	switch review {
	case market.ReviewApproved, market.ReviewRejected, market.ReviewPending:
	default:
		return invalid("Choose approve or reject.")
	}
	tx, err := db.begin(ctx)
	if err != nil {
		return fail(op, err, "")
	}
	defer tx.Rollback()

	var cur string
	err = tx.QueryRowContext(ctx, `SELECT state FROM offers WHERE id = ?`, offerID).Scan(&cur)
	if errors.Is(err, sql.ErrNoRows) {
		return notFound(msgOfferNotFound)
	}
	if err != nil {
		return fail(op, err, "")
	}
	if market.OfferState(cur) == market.OfferWithdrawn {
		return conflict("This offer has been withdrawn by its provider.")
	}
	if _, _, err := setReview(ctx, tx, offerID, review, note, now); err != nil {
		return fail(op, err, "")
	}
	return fail(op, tx.Commit(), "")
}

// ListOffersForReview returns the offers pending review and the edits of
// listed offers held for review (withdrawn ones excluded), the longest
// waiting first. For an edit, Offer is the edit and Listed the version on
// the market.
func (db *DB) ListOffersForReview(ctx context.Context) ([]OfferListing, error) {
	const op = "list offers for review"
	tx, err := db.read(ctx)
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer tx.Rollback()

	ls, err := queryListings(ctx, tx, `SELECT `+listingColumns+listingFrom+`
		WHERE o.review = ? AND o.state <> ? ORDER BY o.updated_at, o.id`,
		string(market.ReviewPending), string(market.OfferWithdrawn))
	if err != nil {
		return nil, fail(op, err, "")
	}
	edits, err := queryListings(ctx, tx, `SELECT `+listingColumns+listingFrom+`
		JOIN offer_revisions r ON r.offer_id = o.id WHERE o.state <> ? ORDER BY r.submitted_at, o.id`,
		string(market.OfferWithdrawn))
	if err != nil {
		return nil, fail(op, err, "")
	}
	for _, l := range edits {
		rev, ok, err := loadRevision(ctx, tx, l.Offer.ID)
		if err != nil {
			return nil, fail(op, err, "")
		}
		if ok {
			l.Listed, l.Offer = l.Offer, rev
			ls = append(ls, l)
		}
	}
	sort.SliceStable(ls, func(i, j int) bool { return ls[i].Offer.UpdatedAt.Before(ls[j].Offer.UpdatedAt) })
	return ls, nil
}

// queryListings runs a listing query and loads the children of its offers.
func queryListings(ctx context.Context, q querier, query string, args ...any) ([]OfferListing, error) {
	ls, err := collect(ctx, q, scanListing, query, args...)
	if err != nil {
		return nil, err
	}
	offers := make([]market.Offer, len(ls))
	for i := range ls {
		offers[i] = ls[i].Offer
	}
	if err := loadOfferChildren(ctx, q, offers); err != nil {
		return nil, err
	}
	for i := range ls {
		ls[i].Offer = offers[i]
	}
	return ls, nil
}

// OfferFilter selects listed offers for the catalogue: what the search
// asks (compiled from the filter form or a query by market.CompileSearch),
// in which order, which page.
type OfferFilter struct {
	Now time.Time // offers whose window has ended by Now are not listed
	market.OfferSearch
	Sort          string // "price_asc" (default), "price_desc", "memory_desc", "devices_desc", "newest"
	Limit, Offset int    // Limit 0 = no limit
}

// Sort orders of OfferFilter.Sort.
const (
	SortPriceAsc    = "price_asc"
	SortPriceDesc   = "price_desc"
	SortMemoryDesc  = "memory_desc"
	SortDevicesDesc = "devices_desc"
	SortNewest      = "newest"
)

// offerOrder maps OfferFilter.Sort to ORDER BY; ties break by id so paging
// is stable.
var offerOrder = map[string]string{
	SortPriceAsc:    "o.price_cents_per_device_hour, o.id",
	SortPriceDesc:   "o.price_cents_per_device_hour DESC, o.id",
	SortMemoryDesc:  "o.memory_gb DESC, o.price_cents_per_device_hour, o.id",
	SortDevicesDesc: "o.devices_per_node * o.nodes DESC, o.price_cents_per_device_hour, o.id",
	SortNewest:      "o.created_at DESC, o.id DESC",
}

// listedWhere is the condition for an offer to appear in the catalogue,
// matching market.Offer.Listed plus the end of the availability window and
// a provider who is not suspended.
const listedWhere = `o.review = ? AND o.state = ? AND o.available_until > ?
	AND NOT EXISTS (SELECT 1 FROM users su WHERE su.id = o.provider_id AND su.suspended = 1)`

func listedArgs(now time.Time) []any {
	return []any{string(market.ReviewApproved), string(market.OfferActive), unix(now)}
}

// FindOffers returns one page of listed offers matching f, and how many
// listed offers match in all. An empty sort is price ascending (web refuses
// an unknown one before it gets here).
func (db *DB) FindOffers(ctx context.Context, f OfferFilter) ([]OfferListing, int, error) {
	const op = "find offers"
	where := []string{listedWhere}
	args := listedArgs(f.Now)
	in := func(col string, vals []string) {
		if len(vals) == 0 {
			where = append(where, "1 = 0")
			return
		}
		where = append(where, col+" IN ("+placeholders(len(vals))+")")
		for _, v := range vals {
			args = append(args, v)
		}
	}
	// A nil list is any; an empty one is none.
	if f.AcceleratorIDs != nil {
		in("o.accelerator_id", f.AcceleratorIDs)
	}
	if f.RegionIDs != nil {
		in("o.region_id", f.RegionIDs)
	}
	if f.NetworkIDs != nil {
		in("o.network_id", f.NetworkIDs)
	}
	between := func(col string, r market.Range) {
		if r.Min > 0 {
			where, args = append(where, col+" >= ?"), append(args, r.Min)
		}
		if r.HasMax {
			where, args = append(where, col+" <= ?"), append(args, r.Max)
		}
	}
	between("o.devices_per_node * o.nodes", f.Devices)
	between("o.price_cents_per_device_hour", f.PriceCents)
	if f.Interruptible != nil {
		where, args = append(where, "o.interruptible = ?"), append(args, boolInt(*f.Interruptible))
	}
	if f.Agent != nil {
		mode := market.AccessManual
		if *f.Agent {
			mode = market.AccessAgent
		}
		where, args = append(where, "o.access_mode = ?"), append(args, string(mode))
	}
	order, ok := offerOrder[f.Sort]
	if !ok {
		order = offerOrder[SortPriceAsc]
	}
	cond := " WHERE " + strings.Join(where, " AND ")

	tx, err := db.read(ctx)
	if err != nil {
		return nil, 0, fail(op, err, "")
	}
	defer tx.Rollback()

	if f.Free != nil {
		ls, total, err := findFreeOffers(ctx, tx, f, cond, args, order)
		if err != nil {
			return nil, 0, fail(op, err, "")
		}
		return ls, total, nil
	}
	var total int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM offers o`+cond, args...).Scan(&total); err != nil {
		return nil, 0, fail(op, err, "")
	}
	query := `SELECT ` + listingColumns + listingFrom + cond + ` ORDER BY ` + order
	if f.Limit > 0 {
		query += ` LIMIT ? OFFSET ?`
		args = append(args, f.Limit, max(f.Offset, 0))
	} else if f.Offset > 0 {
		return nil, 0, fmt.Errorf("store: %s: offset %d without a limit", op, f.Offset)
	}
	ls, err := queryListings(ctx, tx, query, args...)
	if err != nil {
		return nil, 0, fail(op, err, "")
	}
	return ls, total, nil
}

// ListAllListedOffers returns every offer listed at now, by id, for building
// the matcher's index.
func (db *DB) ListAllListedOffers(ctx context.Context, now time.Time) ([]OfferListing, error) {
	const op = "list listed offers"
	tx, err := db.read(ctx)
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer tx.Rollback()

	ls, err := queryListings(ctx, tx, `SELECT `+listingColumns+listingFrom+` WHERE `+listedWhere+` ORDER BY o.id`,
		listedArgs(now)...)
	if err != nil {
		return nil, fail(op, err, "")
	}
	return ls, nil
}

// IndexedOffer is what the matcher's index is built from for one offer:
// its listing (listed or not), its provider's record and its commitments
// that hold capacity.
type IndexedOffer struct {
	Listing     OfferListing
	Record      market.ProviderRecord
	Commitments []market.Commitment
}

// FindOffersForIndex reads the offers ids names again for the matcher's
// index, in one read transaction so each offer, its provider's record and
// its commitments are of one snapshot: what a follower of the change feed
// applies for a batch of changed offers. An offer that no longer exists
// has no entry.
func (db *DB) FindOffersForIndex(ctx context.Context, ids []int64, now time.Time) (map[int64]IndexedOffer, error) {
	const op = "find offers for index"
	tx, err := db.read(ctx)
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer tx.Rollback()
	out := make(map[int64]IndexedOffer, len(ids))
	for start := 0; start < len(ids); start += childChunk {
		chunk := ids[start:min(start+childChunk, len(ids))]
		args := make([]any, len(chunk))
		for i, id := range chunk {
			args[i] = id
		}
		ls, err := queryListings(ctx, tx, `SELECT `+listingColumns+listingFrom+` WHERE o.id IN (`+placeholders(len(chunk))+`)`, args...)
		if err != nil {
			return nil, fail(op, err, "")
		}
		for _, l := range ls {
			out[l.Offer.ID] = IndexedOffer{Listing: l}
		}
	}
	records := map[int64]market.ProviderRecord{}
	found := make([]int64, 0, len(out))
	for id, io := range out {
		found = append(found, id)
		pid := io.Listing.Offer.ProviderID
		if _, ok := records[pid]; ok {
			continue
		}
		rs, err := providerRecords(ctx, tx, pid, now)
		if err != nil {
			return nil, fail(op, err, "")
		}
		r := rs[pid]
		r.ProviderID, r.Suspended = pid, io.Listing.ProviderSuspended
		records[pid] = r
	}
	cs, err := commitmentsOfOffers(ctx, tx, found, now)
	if err != nil {
		return nil, fail(op, err, "")
	}
	for id, io := range out {
		io.Record, io.Commitments = records[io.Listing.Offer.ProviderID], cs[id]
		out[id] = io
	}
	return out, nil
}
