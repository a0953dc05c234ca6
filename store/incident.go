package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// Who reported an incident.
const (
	ReportedByProvider = "provider"
	ReportedByBuyer    = "buyer"
	// ReportedByAgent: measured from the provider agent's heartbeats
	// (store/measure.go); applies at once, like a provider's report.
	ReportedByAgent = "agent"
)

// Incident is a reported incident with who reported it and where it stands.
type Incident struct {
	market.Incident
	ReservationID  int64
	ReportedBy     string // ReportedByProvider, ReportedByBuyer or ReportedByAgent
	ReporterID     int64
	AcknowledgedAt time.Time // zero until acknowledged (provider reports: at once)
	DisputedAt     time.Time // zero unless an unacknowledged buyer report became a dispute
	CreatedAt      time.Time
}

const incidentColumns = `id, reservation_id, piece_id, kind, start_at, end_at, devices_affected, degradation_bp, note,
	reported_by, reporter_id, acknowledged, COALESCE(acknowledged_at, 0), COALESCE(disputed_at, 0), created_at`

func scanIncident(s scanner) (Incident, error) {
	var i Incident
	var kind string
	var start, end, acked, disputed, created int64
	if err := s.Scan(&i.ID, &i.ReservationID, &i.PieceID, &kind, &start, &end, &i.DevicesAffected, &i.DegradationBP, &i.Note,
		&i.ReportedBy, &i.ReporterID, &i.Acknowledged, &acked, &disputed, &created); err != nil {
		return Incident{}, err
	}
	i.Kind = market.IncidentKind(kind)
	i.Start, i.End, i.CreatedAt = fromUnix(start), fromUnix(end), fromUnix(created)
	if acked != 0 {
		i.AcknowledgedAt = fromUnix(acked)
	}
	if disputed != 0 {
		i.DisputedAt = fromUnix(disputed)
	}
	return i, nil
}

func queryIncidents(ctx context.Context, q querier, where string, args ...any) ([]Incident, error) {
	return collect(ctx, q, scanIncident, `SELECT `+incidentColumns+` FROM incidents `+where+` ORDER BY id`, args...)
}

// ReportIncident records an incident on a piece of a reservation. The
// reporter must be the reservation's buyer (ReportedByBuyer) or the
// provider of that piece (ReportedByProvider); anyone else gets not found.
// Incidents can be reported while the reservation runs and after it ends,
// until settlement starts. A provider's report applies at once; a buyer's
// waits for the provider's acknowledgement.
func (db *DB) ReportIncident(ctx context.Context, in Incident, now time.Time) (Incident, error) {
	const op = "report incident"
	tx, err := db.begin(ctx)
	if err != nil {
		return Incident{}, fail(op, err, "")
	}
	defer tx.Rollback()
	r, err := getReservation(ctx, tx, in.ReservationID)
	if err != nil {
		return Incident{}, fail(op, err, "")
	}
	var piece *market.ReservationPiece
	for i := range r.Pieces {
		p := &r.Pieces[i]
		mine := (in.ReportedBy == ReportedByBuyer && r.BuyerID == in.ReporterID) ||
			(in.ReportedBy == ReportedByProvider && p.ProviderID == in.ReporterID)
		if mine && (piece == nil || p.ID == in.PieceID) {
			piece = p
		}
	}
	if piece == nil {
		return Incident{}, notFound(msgReservationNotFound)
	}
	if in.PieceID == 0 {
		in.PieceID = piece.ID
	}
	if err := incidentsOpen(ctx, tx, r); err != nil {
		return Incident{}, err
	}
	// On resold time only up to the resale: the rest is the buyer's, on
	// their own pieces (market.AccessEnd).
	if err := market.ValidateHeldIncident(&in.Incident, r, *piece); err != nil {
		return Incident{}, err
	}
	in.Acknowledged = in.ReportedBy == ReportedByProvider
	in.CreatedAt = truncate(now)
	var acked any
	if in.Acknowledged {
		in.AcknowledgedAt = in.CreatedAt
		acked = unix(now)
	}
	if err := tx.QueryRowContext(ctx, `INSERT INTO incidents (reservation_id, piece_id, kind, start_at, end_at, devices_affected,
		degradation_bp, note, reported_by, reporter_id, acknowledged, acknowledged_at, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id`,
		r.ID, in.PieceID, string(in.Kind), unix(in.Start), unix(in.End), in.DevicesAffected, in.DegradationBP, in.Note,
		in.ReportedBy, in.ReporterID, boolInt(in.Acknowledged), acked, unix(now)).Scan(&in.ID); err != nil {
		return Incident{}, fail(op, err, "")
	}
	// The other party hears of it (admin issue: notifications).
	n := Notification{UserID: piece.ProviderID, Kind: NotifyIncidentReported, CreatedAt: now, URL: fmt.Sprintf("/provider/bookings/%d", r.ID),
		Notice: market.Notice{Kind: market.NoticeIncidentByBuyer, Params: market.NoticeParams{Reservation: r.ID, Incident: in.Kind}}}
	if in.ReportedBy == ReportedByProvider {
		n.UserID, n.URL = r.BuyerID, fmt.Sprintf("/reservations/%d", r.ID)
		n.Notice.Kind = market.NoticeIncidentByProvider
	}
	if err := insertNotification(ctx, tx, n); err != nil {
		return Incident{}, fail(op, err, "")
	}
	return in, fail(op, tx.Commit(), "")
}

// incidentsOpen checks that incidents may still be reported on or
// acknowledged for r: it has started (active or completed) and settlement
// has not begun.
func incidentsOpen(ctx context.Context, tx querier, r market.Reservation) error {
	if r.State != market.ReservationActive && r.State != market.ReservationCompleted {
		return conflict(fmt.Sprintf("Incidents can be reported only while a reservation runs or after it ends, before settlement; this one is %s.", r.State.Label()))
	}
	var n int
	settles := r.ID
	if r.ResaleOf != 0 {
		settles = r.ResaleOf // time bought on resale settles with its original
	}
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM settlements WHERE reservation_id = ?`, settles).Scan(&n); err != nil {
		return err
	}
	if n > 0 {
		return conflict("This reservation is being settled; incidents can no longer change.")
	}
	return nil
}

// findProvidersIncident reads an incident on one of the provider's pieces
// and its reservation inside the caller's transaction; an incident that is
// missing or on another provider's piece is not found.
func findProvidersIncident(ctx context.Context, tx querier, providerID, incidentID int64) (Incident, market.Reservation, error) {
	inc, err := scanIncident(tx.QueryRowContext(ctx, `SELECT `+incidentColumns+` FROM incidents WHERE id = ?`, incidentID))
	if errors.Is(err, sql.ErrNoRows) {
		return Incident{}, market.Reservation{}, notFound(msgIncidentNotFound)
	}
	if err != nil {
		return Incident{}, market.Reservation{}, err
	}
	r, err := getReservation(ctx, tx, inc.ReservationID)
	if err != nil {
		return Incident{}, market.Reservation{}, err
	}
	if p := pieceOfReservation(r, inc.PieceID); p.ID == 0 || p.ProviderID != providerID {
		return Incident{}, market.Reservation{}, notFound(msgIncidentNotFound)
	}
	return inc, r, nil
}

// AcknowledgeIncident records the provider's acknowledgement of a buyer's
// report on one of the provider's pieces, so it counts in settlement.
// Another provider's incident is not found; one already acknowledged is
// left as it is; one that became a dispute is for admins to decide.
func (db *DB) AcknowledgeIncident(ctx context.Context, providerID, incidentID int64, now time.Time) (Incident, error) {
	const op = "acknowledge incident"
	tx, err := db.begin(ctx)
	if err != nil {
		return Incident{}, fail(op, err, "")
	}
	defer tx.Rollback()
	inc, r, err := findProvidersIncident(ctx, tx, providerID, incidentID)
	if err != nil {
		return Incident{}, fail(op, err, "")
	}
	if inc.Acknowledged {
		return inc, nil
	}
	if !inc.DisputedAt.IsZero() {
		return Incident{}, conflict("This report was not acknowledged in time and is now a dispute for the admins to decide.")
	}
	if err := incidentsOpen(ctx, tx, r); err != nil {
		return Incident{}, fail(op, err, "")
	}
	if _, err := tx.ExecContext(ctx, `UPDATE incidents SET acknowledged = 1, acknowledged_at = ? WHERE id = ?`, unix(now), inc.ID); err != nil {
		return Incident{}, fail(op, err, "")
	}
	inc.Acknowledged, inc.AcknowledgedAt = true, truncate(now)
	if err := insertNotification(ctx, tx, Notification{UserID: r.BuyerID, Kind: NotifyIncidentAcknowledged, CreatedAt: now,
		URL:    fmt.Sprintf("/reservations/%d", r.ID),
		Notice: market.Notice{Kind: market.NoticeIncidentAcked, Params: market.NoticeParams{Reservation: r.ID, Incident: inc.Kind}}}); err != nil {
		return Incident{}, fail(op, err, "")
	}
	return inc, fail(op, tx.Commit(), "")
}

// ListIncidents returns a reservation's incidents in the order reported.
func (db *DB) ListIncidents(ctx context.Context, reservationID int64) ([]Incident, error) {
	const op = "list incidents"
	tx, err := db.read(ctx)
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer tx.Rollback()
	is, err := queryIncidents(ctx, tx, `WHERE reservation_id = ?`, reservationID)
	return is, fail(op, err, "")
}

// EscalateIncidents turns every buyer report still unacknowledged that was
// made at or before cutoff into an open dispute for admins, in one
// transaction, and returns the disputes opened. The dispute freezes the
// reservation's provider payouts; settlement goes ahead without the report.
func (db *DB) EscalateIncidents(ctx context.Context, cutoff, now time.Time) ([]Dispute, error) {
	const op = "escalate incidents"
	tx, err := db.begin(ctx)
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer tx.Rollback()
	incs, err := queryIncidents(ctx, tx, `WHERE reported_by = ? AND acknowledged = 0 AND disputed_at IS NULL AND created_at <= ?`,
		ReportedByBuyer, unix(cutoff))
	if err != nil {
		return nil, fail(op, err, "")
	}
	var out []Dispute
	for _, inc := range incs {
		d := Dispute{ReservationID: inc.ReservationID, Source: DisputeSourceIncident, IncidentID: inc.ID, Status: DisputeOpen,
			CreatedAt: truncate(now),
			Statement: fmt.Sprintf("The provider did not acknowledge the buyer's incident report (%s, %d devices, %s) within the deadline. Buyer's evidence: %s",
				inc.Kind.Label(), inc.DevicesAffected, market.FormatSpan(inc.Start, inc.End), inc.Note)}
		if err := tx.QueryRowContext(ctx, `INSERT INTO disputes (reservation_id, source, incident_id, status, statement, created_at)
			VALUES (?, ?, ?, ?, ?, ?) RETURNING id`, d.ReservationID, d.Source, d.IncidentID, d.Status, d.Statement, unix(now)).Scan(&d.ID); err != nil {
			return nil, fail(op, err, "")
		}
		if _, err := tx.ExecContext(ctx, `UPDATE incidents SET disputed_at = ? WHERE id = ?`, unix(now), inc.ID); err != nil {
			return nil, fail(op, err, "")
		}
		if err := freezePayouts(ctx, tx, inc.ReservationID); err != nil {
			return nil, fail(op, err, "")
		}
		out = append(out, d)
	}
	return out, fail(op, tx.Commit(), "")
}
