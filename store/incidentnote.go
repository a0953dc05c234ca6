package store

import (
	"context"
	"fmt"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// IncidentNote is a provider's note on an incident its agent measured: its
// side of what happened, shown to the buyer and admins beside the
// measurement, which it does not change (an admin can, through a dispute).
type IncidentNote struct {
	ID         int64
	IncidentID int64
	AuthorID   int64
	Body       string
	CreatedAt  time.Time
}

func scanIncidentNote(s scanner) (IncidentNote, error) {
	var n IncidentNote
	var created int64
	if err := s.Scan(&n.ID, &n.IncidentID, &n.AuthorID, &n.Body, &created); err != nil {
		return IncidentNote{}, err
	}
	n.CreatedAt = fromUnix(created)
	return n, nil
}

const incidentNoteColumns = `n.id, n.incident_id, n.author_id, n.body, n.created_at`

// reservationIncidentNotes returns the notes on a reservation's incidents
// by incident, each incident's in the order written.
func reservationIncidentNotes(ctx context.Context, q querier, reservationID int64) (map[int64][]IncidentNote, error) {
	ns, err := collect(ctx, q, scanIncidentNote, `SELECT `+incidentNoteColumns+` FROM incident_notes n
		JOIN incidents i ON i.id = n.incident_id WHERE i.reservation_id = ? ORDER BY n.id`, reservationID)
	if err != nil {
		return nil, err
	}
	out := map[int64][]IncidentNote{}
	for _, n := range ns {
		out[n.IncidentID] = append(out[n.IncidentID], n)
	}
	return out, nil
}

// ListIncidentNotes returns the notes on a reservation's incidents, by
// incident.
func (db *DB) ListIncidentNotes(ctx context.Context, reservationID int64) (map[int64][]IncidentNote, error) {
	const op = "list incident notes"
	tx, err := db.read(ctx)
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer tx.Rollback()
	ns, err := reservationIncidentNotes(ctx, tx, reservationID)
	return ns, fail(op, err, "")
}

// AnnotateIncident adds, at now, the provider's note (checked by
// market.ValidateIncidentNote) to an incident its agent measured on one
// of its pieces, in one transaction with the buyer's notification and an
// audit row. Another provider's incident, or one on no piece of theirs, is
// not found; a report by a person (buyer or provider) is a conflict, as is
// a note past market.MaxIncidentNotes.
func (db *DB) AnnotateIncident(ctx context.Context, providerID, incidentID int64, body string, now time.Time) (IncidentNote, error) {
	const op = "annotate incident"
	body, err := market.ValidateIncidentNote(body)
	if err != nil {
		return IncidentNote{}, err
	}
	tx, err := db.begin(ctx)
	if err != nil {
		return IncidentNote{}, fail(op, err, "")
	}
	defer tx.Rollback()
	inc, r, err := findProvidersIncident(ctx, tx, providerID, incidentID)
	if err != nil {
		return IncidentNote{}, fail(op, err, "")
	}
	if inc.ReportedBy != ReportedByAgent {
		return IncidentNote{}, conflict("Only incidents your agent measured take notes; answer a buyer's report by acknowledging it or in a dispute.")
	}
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM incident_notes WHERE incident_id = ?`, inc.ID).Scan(&n); err != nil {
		return IncidentNote{}, fail(op, err, "")
	}
	if n >= market.MaxIncidentNotes {
		return IncidentNote{}, conflict(fmt.Sprintf("This incident already has %d notes, the most it can take.", market.MaxIncidentNotes))
	}
	note := IncidentNote{IncidentID: inc.ID, AuthorID: providerID, Body: body, CreatedAt: truncate(now)}
	if err := tx.QueryRowContext(ctx, `INSERT INTO incident_notes (incident_id, author_id, body, created_at) VALUES (?, ?, ?, ?) RETURNING id`,
		inc.ID, providerID, body, unix(now)).Scan(&note.ID); err != nil {
		return IncidentNote{}, fail(op, err, "")
	}
	if err := insertNotification(ctx, tx, Notification{UserID: r.BuyerID, Kind: NotifyIncidentReported, CreatedAt: now,
		URL:    fmt.Sprintf("/reservations/%d", r.ID),
		Notice: market.Notice{Kind: market.NoticeIncidentNote, Params: market.NoticeParams{Reservation: r.ID, Incident: inc.Kind}}}); err != nil {
		return IncidentNote{}, fail(op, err, "")
	}
	if err := insertAudit(ctx, tx, AuditEntry{At: now, ActorID: providerID, Action: AuditIncidentNote, SubjectKind: AuditSubjectReservation,
		SubjectID: r.ID, After: AuditJSON(struct {
			IncidentID int64 `json:"incident_id"`
			NoteID     int64 `json:"note_id"`
		}{inc.ID, note.ID}), Note: fmt.Sprintf("incident %d: %s", inc.ID, body)}); err != nil {
		return IncidentNote{}, fail(op, err, "")
	}
	return note, fail(op, tx.Commit(), "")
}
