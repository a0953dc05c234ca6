package store

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// The SLA measured from heartbeats (docs/agent.md): outages of the nodes
// serving reservation pieces, opened and closed as heartbeats arrive or
// fail to, and recorded as incidents reported by the agent once they end.

// measuredOutage is a row of measured_outages.
type measuredOutage struct {
	ID         int64
	PieceID    int64
	Node       int
	Kind       market.IncidentKind
	Start, End time.Time // End zero while open
	Devices    int
	SeverityBP int    // an underperformance's shortfall
	Note       string // an underperformance's evidence
}

const outageColumns = `id, piece_id, node, kind, start_at, COALESCE(end_at, 0), devices, severity_bp, note`

func scanOutage(s scanner) (measuredOutage, error) {
	var o measuredOutage
	var kind string
	var start, end int64
	if err := s.Scan(&o.ID, &o.PieceID, &o.Node, &kind, &start, &end, &o.Devices, &o.SeverityBP, &o.Note); err != nil {
		return measuredOutage{}, err
	}
	o.Kind, o.Start = market.IncidentKind(kind), fromUnix(start)
	if end != 0 {
		o.End = fromUnix(end)
	}
	return o, nil
}

// runningAt reports whether a rental's piece runs at now.
func runningAt(r HostRental, now time.Time) bool {
	return (r.State == market.ReservationConfirmed || r.State == market.ReservationActive) &&
		!now.Before(r.Piece.Start) && now.Before(r.Piece.End)
}

// openOutage starts an outage unless the same one (piece, node, kind,
// start) is already recorded.
func openOutage(ctx context.Context, tx querier, pieceID int64, node int, kind market.IncidentKind, start time.Time, devices int, now time.Time) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO measured_outages (piece_id, node, kind, start_at, devices, created_at)
		VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (piece_id, node, kind, start_at) DO NOTHING`,
		pieceID, node, string(kind), unix(start), devices, unix(now))
	return err
}

// closeOutages ends the open outages of a kind of a piece on a node at end
// (never before they started).
func closeOutages(ctx context.Context, tx querier, pieceID int64, node int, kind market.IncidentKind, end time.Time) error {
	_, err := tx.ExecContext(ctx, `UPDATE measured_outages SET end_at = CASE WHEN start_at > ? THEN start_at ELSE ? END
		WHERE piece_id = ? AND node = ? AND kind = ? AND end_at IS NULL`, unix(end), unix(end), pieceID, node, string(kind))
	return err
}

// measurable reports whether a rental's outages are still measured: its
// reservation is paid and not yet settled.
func measurable(r HostRental) bool {
	switch r.State {
	case market.ReservationConfirmed, market.ReservationActive, market.ReservationCompleted:
		return true
	}
	return false
}

// openSilence opens the host failure a node's silence since last is for a
// rental at until, if it is one, counted only while the market itself was
// up (market.MarketSilence over the server runs recorded).
func openSilence(ctx context.Context, tx querier, r HostRental, node int, last, until, now time.Time) error {
	runs, err := serverRuns(ctx, tx, last)
	if err != nil {
		return err
	}
	start, ok := market.MarketSilence(r.Piece, runs, last, until)
	if !ok || !measurable(r) {
		return nil
	}
	if err := closeOutages(ctx, tx, r.Piece.ID, node, market.IncidentFewerDevices, last); err != nil {
		return err
	}
	return openOutage(ctx, tx, r.Piece.ID, node, market.IncidentHostFailure, start, r.Piece.DevicesOnNode(node), now)
}

// measureHeartbeat applies an accepted heartbeat of a node at now to the
// pieces placed on it. A silence since the node's previous heartbeat
// (prev, when reported) that was a host failure ends with this heartbeat,
// whether or not a round of MeasureHosts saw it (or at the piece's end).
// On the pieces running now, it starts, changes or ends a "fewer devices"
// outage when the healthy devices fall short of what the piece holds on
// the node (a probe that failed counts no healthy device).
func measureHeartbeat(ctx context.Context, tx querier, offerID int64, node int, prev HostStatus, reported bool, hb market.Heartbeat, now time.Time) error {
	rentals, err := offerRentals(ctx, tx, offerID, node, now)
	if err != nil {
		return err
	}
	for _, r := range rentals {
		p := r.Piece
		if reported {
			if err := openSilence(ctx, tx, r, node, prev.LastHeartbeatAt, now, now); err != nil {
				return err
			}
		}
		if err := closeHostFailures(ctx, tx, p.ID, node, minTime(now, p.End)); err != nil {
			return err
		}
		if !runningAt(r, now) {
			continue
		}
		missing := market.MissingDevices(p.DevicesOnNode(node), hb.HealthyDevices())
		open, err := collect(ctx, tx, scanOutage, `SELECT `+outageColumns+` FROM measured_outages
			WHERE piece_id = ? AND node = ? AND kind = ? AND end_at IS NULL`, p.ID, node, string(market.IncidentFewerDevices))
		if err != nil {
			return err
		}
		if len(open) > 0 && open[0].Devices == missing {
			continue
		}
		if err := closeOutages(ctx, tx, p.ID, node, market.IncidentFewerDevices, now); err != nil {
			return err
		}
		if missing > 0 {
			if err := openOutage(ctx, tx, p.ID, node, market.IncidentFewerDevices, now, missing, now); err != nil {
				return err
			}
		}
	}
	return nil
}

// closeHostFailures ends the open host failures of a piece on a node at
// end, or, for one that began before the market itself went down, when it
// went down (market.MarketDownAfter): the time the market was down is not
// the provider's; a silence still going on after the restart is a new
// outage from the restart (openSilence).
func closeHostFailures(ctx context.Context, tx querier, pieceID int64, node int, end time.Time) error {
	open, err := collect(ctx, tx, scanOutage, `SELECT `+outageColumns+` FROM measured_outages
		WHERE piece_id = ? AND node = ? AND kind = ? AND end_at IS NULL`, pieceID, node, string(market.IncidentHostFailure))
	if err != nil {
		return err
	}
	for _, o := range open {
		at := end
		runs, err := serverRuns(ctx, tx, o.Start)
		if err != nil {
			return err
		}
		if down, ok := market.MarketDownAfter(runs, o.Start); ok && down.Before(at) {
			at = down
		}
		if _, err := tx.ExecContext(ctx, `UPDATE measured_outages SET end_at = CASE WHEN start_at > ? THEN start_at ELSE ? END WHERE id = ?`,
			unix(at), unix(at), o.ID); err != nil {
			return err
		}
	}
	return nil
}

// serverRuns returns the server runs (market.ServerRun) that were up at
// or after since.
func serverRuns(ctx context.Context, q querier, since time.Time) ([]market.ServerRun, error) {
	return collect(ctx, q, func(s scanner) (market.ServerRun, error) {
		var start, seen int64
		err := s.Scan(&start, &seen)
		return market.ServerRun{Start: fromUnix(start), Seen: fromUnix(seen)}, err
	}, `SELECT started_at, seen_at FROM server_runs WHERE seen_at >= ? ORDER BY started_at`, unix(since.Add(-market.ServerUpSlack)))
}

// RecordServerBeat records that the server process replica, started at
// started, is up at now (docs/agent.md): its run's last-seen time. The
// background loop of every replica calls it every
// market.ServerBeatInterval.
func (db *DB) RecordServerBeat(ctx context.Context, replica string, started, now time.Time) error {
	const op = "record server beat"
	tx, err := db.begin(ctx)
	if err != nil {
		return fail(op, err, "")
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `INSERT INTO server_runs (replica, started_at, seen_at) VALUES (?, ?, ?)
		ON CONFLICT (replica, started_at) DO UPDATE SET seen_at = excluded.seen_at`, replica, unix(started), unix(now)); err != nil {
		return fail(op, err, "")
	}
	// Runs a month old bound no silence any more.
	if _, err := tx.ExecContext(ctx, `DELETE FROM server_runs WHERE seen_at < ?`, unix(now.Add(-30*24*time.Hour))); err != nil {
		return fail(op, err, "")
	}
	return fail(op, tx.Commit(), "")
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// MeasureHosts is the periodic part of the measured SLA at now, in one
// transaction. A node that has reported and has been silent longer than
// the grace period opens a host failure on each piece on it the silence
// is one of (market.SilenceOutage); a "fewer devices" outage open on that
// piece ends at the last heartbeat. Outages still open when their
// piece ends end with it. Then every outage that has ended is recorded
// once as an incident on its piece, reported by the agent and acknowledged
// at once, with the heartbeat timeline as its note, and both parties are
// told; one whose reservation is already settling, or with nothing left of
// it within the piece, is marked as skipped. It returns the incidents
// recorded.
func (db *DB) MeasureHosts(ctx context.Context, now time.Time) ([]Incident, error) {
	const op = "measure hosts"
	tx, err := db.begin(ctx)
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer tx.Rollback()
	grace := market.HeartbeatGrace(market.HeartbeatInterval)
	silent, err := collect(ctx, tx, scanHost, `SELECT `+hostColumns+` FROM hosts h WHERE h.last_heartbeat_at < ?`, unix(now.Add(-grace)))
	if err != nil {
		return nil, fail(op, err, "")
	}
	for _, h := range silent {
		if !market.HostSilent(h.LastHeartbeatAt, now) {
			continue
		}
		rentals, err := offerRentals(ctx, tx, h.OfferID, h.Node, now)
		if err != nil {
			return nil, fail(op, err, "")
		}
		for _, r := range rentals {
			if err := openSilence(ctx, tx, r, h.Node, h.LastHeartbeatAt, now, now); err != nil {
				return nil, fail(op, err, "")
			}
		}
	}
	// The pieces' ends are never before their outages' starts (SilenceOutage,
	// measureHeartbeat open them within the piece).
	if _, err := tx.ExecContext(ctx, `UPDATE measured_outages SET end_at = (SELECT p.end_at FROM reservation_pieces p WHERE p.id = piece_id)
		WHERE end_at IS NULL AND piece_id IN (SELECT p.id FROM reservation_pieces p WHERE p.end_at <= ?)`, unix(now)); err != nil {
		return nil, fail(op, err, "")
	}
	ended, err := collect(ctx, tx, scanOutage, `SELECT `+outageColumns+` FROM measured_outages
		WHERE recorded_at IS NULL AND end_at IS NOT NULL ORDER BY id`)
	if err != nil {
		return nil, fail(op, err, "")
	}
	var out []Incident
	for _, o := range ended {
		inc, skipped, err := recordOutage(ctx, tx, o, now)
		if err != nil {
			return nil, fail(op, err, "")
		}
		var incID any
		if skipped == "" {
			incID = inc.ID
			out = append(out, inc)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE measured_outages SET incident_id = ?, recorded_at = ?, skipped = ? WHERE id = ?`,
			incID, unix(now), skipped, o.ID); err != nil {
			return nil, fail(op, err, "")
		}
	}
	return out, fail(op, tx.Commit(), "")
}

// recordOutage turns an ended outage into an incident reported by the
// agent, or says why it cannot be (skipped).
func recordOutage(ctx context.Context, tx *sql.Tx, o measuredOutage, now time.Time) (Incident, string, error) {
	var resID int64
	if err := tx.QueryRowContext(ctx, `SELECT reservation_id FROM reservation_pieces WHERE id = ?`, o.PieceID).Scan(&resID); err != nil {
		return Incident{}, "", err
	}
	r, err := getReservation(ctx, tx, resID)
	if err != nil {
		return Incident{}, "", err
	}
	p := pieceOfReservation(r, o.PieceID)
	start, end := o.Start, o.End
	if start.Before(p.Start) {
		start = p.Start
	}
	if end.After(p.End) {
		end = p.End
	}
	if !end.After(start) {
		return Incident{}, "nothing of it within the rental", nil
	}
	if err := incidentsOpen(ctx, tx, r); err != nil {
		if market.ErrorCode(err) == market.CodeConflict {
			return Incident{}, market.ErrorMessage(err), nil
		}
		return Incident{}, "", err
	}
	note := o.Note
	if note == "" {
		if note, err = outageNote(ctx, tx, p, o, start, end); err != nil {
			return Incident{}, "", err
		}
	}
	in := Incident{ReservationID: r.ID, ReportedBy: ReportedByAgent, ReporterID: p.ProviderID, CreatedAt: truncate(now), AcknowledgedAt: truncate(now),
		Incident: market.Incident{PieceID: p.ID, Kind: o.Kind, Start: start, End: end, DevicesAffected: min(o.Devices, p.Devices),
			DegradationBP: o.SeverityBP, Note: note, Acknowledged: true}}
	if err := market.ValidateIncident(&in.Incident, p); err != nil {
		return Incident{}, "", fmt.Errorf("measured outage %d: %w", o.ID, err)
	}
	if err := tx.QueryRowContext(ctx, `INSERT INTO incidents (reservation_id, piece_id, kind, start_at, end_at, devices_affected,
		degradation_bp, note, reported_by, reporter_id, acknowledged, acknowledged_at, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?) RETURNING id`,
		r.ID, p.ID, string(in.Kind), unix(in.Start), unix(in.End), in.DevicesAffected, in.DegradationBP, in.Note,
		in.ReportedBy, in.ReporterID, unix(now), unix(now)).Scan(&in.ID); err != nil {
		return Incident{}, "", err
	}
	what := market.NoticeParams{Reservation: r.ID, Incident: in.Kind, Devices: in.DevicesAffected, Start: in.Start, End: in.End}
	if in.Kind == market.IncidentUnderperformance {
		what.ShortBP = in.DegradationBP
	}
	for _, n := range []Notification{
		{UserID: r.BuyerID, Kind: NotifyIncidentReported, CreatedAt: now, URL: fmt.Sprintf("/reservations/%d", r.ID),
			Notice: market.Notice{Kind: market.NoticeOutageToBuyer, Params: what}},
		{UserID: p.ProviderID, Kind: NotifyIncidentReported, CreatedAt: now, URL: fmt.Sprintf("/provider/bookings/%d", r.ID),
			Notice: market.Notice{Kind: market.NoticeOutageToProvider, Params: what}},
	} {
		if err := insertNotification(ctx, tx, n); err != nil {
			return Incident{}, "", err
		}
	}
	return in, "", nil
}

func pieceOfReservation(r market.Reservation, pieceID int64) market.ReservationPiece {
	for _, p := range r.Pieces {
		if p.ID == pieceID {
			return p
		}
	}
	return market.ReservationPiece{}
}

// timelineLines bounds the heartbeat timeline in an incident's note: the
// runs nearest the outage's start and end.
const timelineLines = 8

// outageNote is the evidence of a measured outage: what the heartbeats
// showed, and the node's heartbeat timeline around it.
func outageNote(ctx context.Context, tx *sql.Tx, p market.ReservationPiece, o measuredOutage, start, end time.Time) (string, error) {
	var b strings.Builder
	grace := market.HeartbeatGrace(market.HeartbeatInterval)
	switch o.Kind {
	case market.IncidentHostFailure:
		fmt.Fprintf(&b, "Measured by the provider's agent on node %d: no heartbeat for longer than the %s grace period from %s",
			o.Node, durationText(grace), market.FormatTime(start))
		if end.Equal(p.End) && !o.End.Before(p.End) {
			fmt.Fprintf(&b, " to the end of the rental at %s.", market.FormatTime(end))
		} else {
			fmt.Fprintf(&b, " until heartbeats resumed at %s.", market.FormatTime(end))
		}
	default:
		fmt.Fprintf(&b, "Measured by the provider's agent on node %d: the heartbeats from %s to %s showed %d healthy device(s) fewer than the %d the piece holds there.",
			o.Node, market.FormatTime(start), market.FormatTime(end), o.Devices, p.DevicesOnNode(o.Node))
	}
	runs, err := queryRuns(ctx, tx, p.OfferID, o.Node, start.Add(-time.Hour), end.Add(time.Hour))
	if err != nil {
		return "", err
	}
	if len(runs) > timelineLines {
		runs = append(runs[:timelineLines/2:timelineLines/2], runs[len(runs)-timelineLines/2:]...)
	}
	b.WriteString(" Heartbeat timeline:")
	for _, r := range runs {
		line := fmt.Sprintf("\n- %s to %s: %d heartbeat(s), seq %d to %d, %d of %d devices healthy",
			market.FormatTime(r.FirstAt), market.FormatTime(r.LastAt), r.Heartbeats, r.FirstSeq, r.LastSeq, r.Healthy, r.Devices)
		if r.Unhealthy != "" {
			line += "; unhealthy: " + truncateText(r.Unhealthy, 120)
		}
		if r.ProbeError != "" {
			line += "; probe failed: " + truncateText(r.ProbeError, 120)
		}
		if b.Len()+len(line)+1 > market.MaxIncidentNote {
			break
		}
		b.WriteString(line)
	}
	if len(runs) == 0 {
		b.WriteString(" none kept around it.")
	} else {
		b.WriteString(".")
	}
	return b.String(), nil
}

// durationText writes a grace period: "1 minute", "90 seconds".
func durationText(d time.Duration) string {
	switch {
	case d == time.Minute:
		return "1 minute"
	case d%time.Minute == 0:
		return fmt.Sprintf("%d minutes", d/time.Minute)
	}
	return fmt.Sprintf("%d seconds", d/time.Second)
}

// truncateText shortens s to at most n runes, marking the cut.
func truncateText(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
