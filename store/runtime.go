package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// The buyer's environment on a reservation (market.Runtime,
// docs/runtime.md): stored with the booking, secrets included, sent only
// to the agents of the reservation's nodes; and what those agents report
// of each piece's container.

// CreateReservationWithRuntime books pieces as CreateReservation does and
// keeps the runtime with the reservation in the same transaction; the
// template it came from (rt.TemplateID) counts one more use. A zero
// runtime books as CreateReservation.
func (db *DB) CreateReservationWithRuntime(ctx context.Context, buyerID int64, pieces []market.ReservationPiece, requestJSON string, rt market.Runtime, now time.Time, hold time.Duration) (market.Reservation, error) {
	if rt.IsZero() {
		return db.CreateReservation(ctx, buyerID, pieces, requestJSON, now, hold)
	}
	const op = "create reservation with runtime"
	if hold <= 0 {
		return market.Reservation{}, fmt.Errorf("store: %s: hold %s must be positive", op, hold)
	}
	if len(pieces) == 0 {
		return market.Reservation{}, invalid("Choose a quote to reserve.")
	}
	r, offerIDs, byOffer := newHold(buyerID, pieces, now, hold)
	r.RequestJSON = requestJSON
	locks := bookingLocks{offers: offerIDs, buyers: []int64{buyerID}}
	if rt.TemplateID != 0 {
		locks.templates = []int64{rt.TemplateID}
	}
	err := db.book(ctx, locks, func(ctx context.Context, tx preparedTx) error {
		if err := holdReservation(ctx, tx, &r, offerIDs, byOffer, now); err != nil {
			return err
		}
		if err := notifyHeld(ctx, tx, r, now); err != nil {
			return err
		}
		return insertReservationRuntime(ctx, tx, r.ID, rt)
	})
	if err != nil {
		return market.Reservation{}, fail(op, err, "")
	}
	return r, nil
}

// insertReservationRuntime keeps rt with a new reservation; the template
// it came from counts one more use. A zero runtime is none.
func insertReservationRuntime(ctx context.Context, q querier, reservationID int64, rt market.Runtime) error {
	if rt.IsZero() {
		return nil
	}
	doc, err := market.EncodeRuntimeStored(rt)
	if err != nil {
		return err
	}
	if _, err := q.ExecContext(ctx, `INSERT INTO reservation_runtimes (reservation_id, runtime_json) VALUES (?, ?)`, reservationID, string(doc)); err != nil {
		return err
	}
	if rt.TemplateID != 0 {
		if _, err := q.ExecContext(ctx, `UPDATE runtime_templates SET used_by = used_by + 1 WHERE id = ?`, rt.TemplateID); err != nil {
			return err
		}
	}
	return nil
}

// getReservationRuntime reads a reservation's runtime with its secrets;
// ok is false when it has none.
func getReservationRuntime(ctx context.Context, q querier, reservationID int64) (market.Runtime, bool, error) {
	var doc string
	err := q.QueryRowContext(ctx, `SELECT runtime_json FROM reservation_runtimes WHERE reservation_id = ?`, reservationID).Scan(&doc)
	if errors.Is(err, sql.ErrNoRows) {
		return market.Runtime{}, false, nil
	}
	if err != nil {
		return market.Runtime{}, false, err
	}
	rt, err := market.DecodeRuntimeStored([]byte(doc))
	return rt, err == nil, err
}

const msgNoRuntime = "This reservation runs on the host's own environment, not a container."

// FindReservationRuntime returns the runtime a buyer's reservation was
// booked with, secrets' values removed (what may be shown). Another
// buyer's reservation, or one without a runtime, is not found.
func (db *DB) FindReservationRuntime(ctx context.Context, buyerID, reservationID int64) (market.Runtime, error) {
	const op = "find reservation runtime"
	tx, err := db.read(ctx)
	if err != nil {
		return market.Runtime{}, fail(op, err, "")
	}
	defer tx.Rollback()
	if _, err := getBuyerReservation(ctx, tx, buyerID, reservationID); err != nil {
		return market.Runtime{}, fail(op, err, "")
	}
	rt, ok, err := getReservationRuntime(ctx, tx, reservationID)
	if err != nil {
		return market.Runtime{}, fail(op, err, "")
	}
	if !ok {
		return market.Runtime{}, notFound(msgNoRuntime)
	}
	return rt.WithoutSecrets(), nil
}

// PieceContainer is what a node's agent last reported of a piece's
// container, with the device indices the server gave the piece there.
type PieceContainer struct {
	PieceID   int64
	Node      int
	Devices   []int
	Phase     market.ContainerPhase
	Message   string
	Progress  int
	Ports     []market.PortMapping
	UpdatedAt time.Time
}

const pieceContainerColumns = `piece_id, node, devices_json, phase, message, ports_json, progress, updated_at`

func scanPieceContainer(s scanner) (PieceContainer, error) {
	var c PieceContainer
	var devices, ports, phase string
	var updated int64
	if err := s.Scan(&c.PieceID, &c.Node, &devices, &phase, &c.Message, &ports, &c.Progress, &updated); err != nil {
		return PieceContainer{}, err
	}
	c.Phase, c.UpdatedAt = market.ContainerPhase(phase), fromUnix(updated)
	if err := json.Unmarshal([]byte(devices), &c.Devices); err != nil {
		return PieceContainer{}, err
	}
	if err := json.Unmarshal([]byte(ports), &c.Ports); err != nil {
		return PieceContainer{}, err
	}
	return c, nil
}

// nodeDeviceIndices gives each rental on the token's node its device
// indices there (market.DeviceIndices).
func nodeDeviceIndices(ctx context.Context, q querier, t HostToken, rentals []HostRental) (map[int64][]int, error) {
	var dpn int
	if err := q.QueryRowContext(ctx, `SELECT devices_per_node FROM offers WHERE id = ?`, t.OfferID).Scan(&dpn); err != nil {
		return nil, err
	}
	var ps []market.NodePiece
	for _, r := range rentals {
		if r.State == market.ReservationCancelled {
			continue
		}
		if n := r.Piece.DevicesOnNode(t.Node); n > 0 {
			ps = append(ps, market.NodePiece{PieceID: r.Piece.ID, Devices: n, Start: r.Piece.Start, End: r.Piece.End})
		}
	}
	return market.DeviceIndices(ps, dpn), nil
}

// RecordContainer records, at now, an agent's report of a piece's
// container on the token's node (docs/agent.md, container mode). A pull
// or start that failed, reported before the rental's end, opens a host
// failure incident from the start (or now, if later) to the end, applied
// at once: the buyer is not charged for time they could not use. A
// removal that failed notifies the provider and is listed for the admins
// (ListContainerRemovalFailures). A piece not on the token's node is not
// found; one without a runtime is a conflict.
func (db *DB) RecordContainer(ctx context.Context, tokenID, pieceID int64, rep market.ContainerReport, now time.Time) (PieceContainer, error) {
	const op = "record container"
	if err := market.ValidateContainerReport(&rep); err != nil {
		return PieceContainer{}, err
	}
	tx, err := db.begin(ctx)
	if err != nil {
		return PieceContainer{}, fail(op, err, "")
	}
	defer tx.Rollback()
	t, err := liveHostToken(ctx, tx, tokenID)
	if err != nil {
		return PieceContainer{}, fail(op, err, "")
	}
	r, p, err := nodePiece(ctx, tx, t, pieceID)
	if err != nil {
		return PieceContainer{}, fail(op, err, "")
	}
	if _, ok, err := getReservationRuntime(ctx, tx, r.ID); err != nil {
		return PieceContainer{}, fail(op, err, "")
	} else if !ok {
		return PieceContainer{}, conflict(fmt.Sprintf("Piece %d has no container to report on.", p.ID))
	}
	rentals, err := offerRentals(ctx, tx, t.OfferID, t.Node, now)
	if err != nil {
		return PieceContainer{}, fail(op, err, "")
	}
	idx, err := nodeDeviceIndices(ctx, tx, t, rentals)
	if err != nil {
		return PieceContainer{}, fail(op, err, "")
	}
	prev, err := collect(ctx, tx, scanPieceContainer, `SELECT `+pieceContainerColumns+` FROM piece_containers WHERE piece_id = ? AND node = ?`, p.ID, t.Node)
	if err != nil {
		return PieceContainer{}, fail(op, err, "")
	}
	c := PieceContainer{PieceID: p.ID, Node: t.Node, Devices: idx[p.ID], Phase: rep.Phase, Message: rep.Message, Progress: rep.Progress,
		Ports: rep.Ports, UpdatedAt: truncate(now)}
	if c.Devices == nil {
		c.Devices = []int{}
	}
	if c.Ports == nil {
		c.Ports = []market.PortMapping{}
	}
	devices, _ := json.Marshal(c.Devices)
	ports, _ := json.Marshal(c.Ports)
	if _, err := tx.ExecContext(ctx, `INSERT INTO piece_containers (`+pieceContainerColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (piece_id, node) DO UPDATE SET devices_json = excluded.devices_json, phase = excluded.phase, message = excluded.message,
			ports_json = excluded.ports_json, progress = excluded.progress, updated_at = excluded.updated_at`,
		c.PieceID, c.Node, string(devices), string(c.Phase), c.Message, string(ports), c.Progress, unix(now)); err != nil {
		return PieceContainer{}, fail(op, err, "")
	}
	// Each failure is acted on once, on the report that changes the phase.
	changed := len(prev) == 0 || prev[0].Phase != rep.Phase
	switch {
	case changed && rep.Phase == market.PhaseFailed && now.Before(p.End):
		if err := containerFailureIncident(ctx, tx, r, p, t.Node, rep.Message, now); err != nil {
			return PieceContainer{}, fail(op, err, "")
		}
	case changed && rep.Phase == market.PhaseRemoveFailed:
		if err := insertNotification(ctx, tx, Notification{UserID: p.ProviderID, Kind: NotifyIncidentReported, CreatedAt: now,
			URL: fmt.Sprintf("/provider/bookings/%d", r.ID),
			Message: fmt.Sprintf("Booking #%d, piece %d, node %d: the agent could not remove the buyer's container (%s). Remove it by hand: the next renter of the node must not see it.",
				r.ID, p.ID, t.Node, rep.Message)}); err != nil {
			return PieceContainer{}, fail(op, err, "")
		}
	}
	return c, fail(op, tx.Commit(), "")
}

// containerFailureIncident opens the host failure incident of a container
// that could not be made ready: from the start (or now, if later) to the
// piece's end, all the piece's devices on the node, acknowledged.
func containerFailureIncident(ctx context.Context, tx querier, r market.Reservation, p market.ReservationPiece, node int, msg string, now time.Time) error {
	start := p.Start
	if now.After(start) {
		start = truncate(now)
	}
	in := Incident{ReservationID: r.ID, ReportedBy: ReportedByAgent, ReporterID: p.ProviderID, CreatedAt: truncate(now), AcknowledgedAt: truncate(now),
		Incident: market.Incident{PieceID: p.ID, Kind: market.IncidentHostFailure, Start: start, End: p.End,
			DevicesAffected: p.DevicesOnNode(node), Note: market.ContainerFailureNote(node, msg), Acknowledged: true}}
	if err := market.ValidateIncident(&in.Incident, p); err != nil {
		return fmt.Errorf("container failure incident: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO incidents (reservation_id, piece_id, kind, start_at, end_at, devices_affected,
		degradation_bp, note, reported_by, reporter_id, acknowledged, acknowledged_at, created_at)
		VALUES (?, ?, ?, ?, ?, ?, 0, ?, ?, ?, 1, ?, ?)`,
		r.ID, p.ID, string(in.Kind), unix(in.Start), unix(in.End), in.DevicesAffected, in.Note,
		in.ReportedBy, in.ReporterID, unix(now), unix(now)); err != nil {
		return err
	}
	for _, n := range []Notification{
		{UserID: r.BuyerID, Kind: NotifyIncidentReported, CreatedAt: now, URL: fmt.Sprintf("/reservations/%d", r.ID),
			Message: fmt.Sprintf("Reservation #%d: %s", r.ID, in.Note)},
		{UserID: p.ProviderID, Kind: NotifyIncidentReported, CreatedAt: now, URL: fmt.Sprintf("/provider/bookings/%d", r.ID),
			Message: fmt.Sprintf("Booking #%d: %s It counts in settlement.", r.ID, in.Note)},
	} {
		if err := insertNotification(ctx, tx, n); err != nil {
			return err
		}
	}
	return nil
}

// ListReservationContainers returns what the agents reported of the
// containers of a buyer's reservation, by piece and node. Another buyer's
// reservation is not found.
func (db *DB) ListReservationContainers(ctx context.Context, buyerID, reservationID int64) ([]PieceContainer, error) {
	const op = "list reservation containers"
	tx, err := db.read(ctx)
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer tx.Rollback()
	if _, err := getBuyerReservation(ctx, tx, buyerID, reservationID); err != nil {
		return nil, fail(op, err, "")
	}
	out, err := collect(ctx, tx, scanPieceContainer, `SELECT `+pieceContainerColumns+` FROM piece_containers
		WHERE piece_id IN (SELECT id FROM reservation_pieces WHERE reservation_id = ?) ORDER BY piece_id, node`, reservationID)
	return out, fail(op, err, "")
}

// ListContainerRemovalFailures returns the nodes whose agent reported it
// could not remove a buyer's container, for the admins, by offer and node.
func (db *DB) ListContainerRemovalFailures(ctx context.Context) ([]HostFlag, error) {
	const op = "list container removal failures"
	tx, err := db.read(ctx)
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer tx.Rollback()
	flags, err := collect(ctx, tx, scanRemovalFailure("the buyer's container could not be removed"), `SELECT o.id, o.title, u.id, u.display_name, c.node, c.message, c.updated_at, p.reservation_id, p.id
		FROM piece_containers c JOIN reservation_pieces p ON p.id = c.piece_id JOIN offers o ON o.id = p.offer_id
		JOIN users u ON u.id = o.provider_id
		WHERE c.phase = ? ORDER BY o.id, c.node`, string(market.PhaseRemoveFailed))
	return flags, fail(op, err, "")
}
