package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// ObservationRecord is a buyer's observation as stored: what the buyer's
// machine saw on a node of a piece, the agent's report then, and the
// mismatches between them (none: it agreed).
type ObservationRecord struct {
	ID            int64
	ReservationID int64
	Node          int
	OfferID       int64
	ProviderID    int64
	BuyerID       int64
	Observation   market.Observation
	AgentSummary  string
	Reasons       []string
	CreatedAt     time.Time
}

// Mismatch reports whether the observation contradicts the listing or the
// agent: a red flag.
func (o ObservationRecord) Mismatch() bool { return len(o.Reasons) > 0 }

const observationColumns = `id, reservation_id, piece_id, node, offer_id, provider_id, buyer_id, devices_json,
	bench_kind, bench_milli, bench_seconds, agent_summary, reasons_json, created_at`

func scanObservation(s scanner) (ObservationRecord, error) {
	var o ObservationRecord
	var devices, reasons string
	var created int64
	if err := s.Scan(&o.ID, &o.ReservationID, &o.Observation.PieceID, &o.Node, &o.OfferID, &o.ProviderID, &o.BuyerID, &devices,
		&o.Observation.BenchKind, &o.Observation.BenchMilli, &o.Observation.BenchSeconds, &o.AgentSummary, &reasons, &created); err != nil {
		return ObservationRecord{}, err
	}
	o.CreatedAt = fromUnix(created)
	if err := json.Unmarshal([]byte(devices), &o.Observation.Devices); err != nil {
		return ObservationRecord{}, fmt.Errorf("observation %d devices: %w", o.ID, err)
	}
	if err := json.Unmarshal([]byte(reasons), &o.Reasons); err != nil {
		return ObservationRecord{}, fmt.Errorf("observation %d reasons: %w", o.ID, err)
	}
	return o, nil
}

// RecordObservation stores, at now, the observation the buyer's machine
// reports for a piece of the buyer's reservation (built by
// market.NewObservation), compared (market.CompareObservation) with the
// offer's listing and what the agent of the piece's node
// (market.ObservationNode) reported: the devices of its latest heartbeat
// and its acceptance test of the piece. Another buyer's reservation, or a
// piece not of it, is not found; outside the rental
// (market.ObservationOpen), or past market.MaxObservationsPerPiece, it is
// a conflict.
func (db *DB) RecordObservation(ctx context.Context, buyerID, reservationID int64, obs market.Observation, now time.Time) (ObservationRecord, error) {
	const op = "record observation"
	tx, err := db.begin(ctx)
	if err != nil {
		return ObservationRecord{}, fail(op, err, "")
	}
	defer tx.Rollback()
	r, err := getBuyerReservation(ctx, tx, buyerID, reservationID)
	if err != nil {
		return ObservationRecord{}, fail(op, err, "")
	}
	var p market.ReservationPiece
	found := false
	for _, q := range r.Pieces {
		if q.ID == obs.PieceID {
			p, found = q, true
		}
	}
	if !found {
		return ObservationRecord{}, &market.Error{Code: market.CodeNotFound, Message: "That piece is not part of this reservation.",
			Fields: map[string]string{"piece_id": "not a piece of this reservation"}}
	}
	if !market.ObservationOpen(r, p, now) {
		return ObservationRecord{}, conflict("This rental is not under way: the buyer's machine can report only while it runs.")
	}
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM observations WHERE piece_id = ?`, p.ID).Scan(&n); err != nil {
		return ObservationRecord{}, fail(op, err, "")
	}
	if n >= market.MaxObservationsPerPiece {
		return ObservationRecord{}, conflict(fmt.Sprintf("This piece has %d reports already, the most it may have.", n))
	}
	o, err := getOffer(ctx, tx, p.OfferID)
	if err != nil {
		return ObservationRecord{}, fail(op, err, "")
	}
	node, held := market.ObservationNode(p)
	agent, err := agentReport(ctx, tx, p, node)
	if err != nil {
		return ObservationRecord{}, fail(op, err, "")
	}
	rec := ObservationRecord{ReservationID: r.ID, Node: node, OfferID: p.OfferID, ProviderID: p.ProviderID, BuyerID: buyerID,
		Observation: obs, AgentSummary: market.AgentSummary(agent), Reasons: market.CompareObservation(obs, held, o, agent), CreatedAt: truncate(now)}
	devices, err := json.Marshal(obs.Devices)
	if err != nil {
		return ObservationRecord{}, fail(op, err, "")
	}
	reasons, err := json.Marshal(rec.Reasons)
	if err != nil {
		return ObservationRecord{}, fail(op, err, "")
	}
	if rec.Reasons == nil {
		reasons = []byte("[]")
	}
	mismatch := 0
	if rec.Mismatch() {
		mismatch = 1
	}
	if err := tx.QueryRowContext(ctx, `INSERT INTO observations (reservation_id, piece_id, node, offer_id, provider_id, buyer_id,
		devices_json, bench_kind, bench_milli, bench_seconds, agent_summary, reasons_json, mismatch, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id`,
		r.ID, p.ID, node, p.OfferID, p.ProviderID, buyerID, string(devices), obs.BenchKind, obs.BenchMilli, obs.BenchSeconds,
		rec.AgentSummary, string(reasons), mismatch, unix(now)).Scan(&rec.ID); err != nil {
		return ObservationRecord{}, fail(op, err, "")
	}
	return rec, fail(op, tx.Commit(), "")
}

// agentReport reads what the agent of a node reported for a piece: its
// latest heartbeat's devices and the mean per-device figure of its BF16
// acceptance test of the piece (none: zero).
func agentReport(ctx context.Context, q querier, p market.ReservationPiece, node int) (market.AgentReport, error) {
	var a market.AgentReport
	h, err := getHost(ctx, q, p.OfferID, node)
	switch {
	case err == nil:
		a.Devices = h.Devices
	case market.ErrorCode(err) != market.CodeNotFound:
		return a, err
	}
	rs, err := collect(ctx, q, scanAcceptance, `SELECT `+acceptanceColumns+` FROM acceptance_results WHERE piece_id = ? AND node = ?`, p.ID, node)
	if err != nil {
		return a, err
	}
	for _, res := range rs {
		if res.Result.Error != "" || res.Result.Metric != market.FigureBF16TFLOPS || len(res.Result.PerDeviceMilli) == 0 {
			continue
		}
		var sum int64
		for _, m := range res.Result.PerDeviceMilli {
			sum += m
		}
		a.BenchMilli = sum / int64(len(res.Result.PerDeviceMilli))
	}
	return a, nil
}

// ListReservationObservations returns the observations of a reservation,
// oldest first, for its buyer's page and its dispute.
func (db *DB) ListReservationObservations(ctx context.Context, reservationID int64) ([]ObservationRecord, error) {
	const op = "list reservation observations"
	tx, err := db.read(ctx)
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer tx.Rollback()
	rs, err := collect(ctx, tx, scanObservation, `SELECT `+observationColumns+` FROM observations
		WHERE reservation_id = ? ORDER BY created_at, id`, reservationID)
	return rs, fail(op, err, "")
}

// CountProviderContradictions returns, per provider, the observations
// since since that contradicted the listing or the agent, for the admins'
// page.
func (db *DB) CountProviderContradictions(ctx context.Context, since time.Time) (map[int64]int, error) {
	const op = "count provider contradictions"
	rows, err := db.reader.QueryContext(ctx, `SELECT provider_id, COUNT(*) FROM observations
		WHERE mismatch = 1 AND created_at > ? GROUP BY provider_id`, unix(since))
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer rows.Close()
	out := map[int64]int{}
	for rows.Next() {
		var id int64
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			return nil, fail(op, err, "")
		}
		out[id] = n
	}
	return out, fail(op, rows.Err(), "")
}

// CountOfferContradictions returns how many observations of the offer's
// rentals since since contradicted the listing or the agent.
func (db *DB) CountOfferContradictions(ctx context.Context, offerID int64, since time.Time) (int, error) {
	var n int
	err := db.reader.QueryRowContext(ctx, `SELECT COUNT(*) FROM observations WHERE offer_id = ? AND mismatch = 1 AND created_at > ?`,
		offerID, unix(since)).Scan(&n)
	return n, fail("count offer contradictions", err, "")
}
