package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// AcceptanceRecord is an acceptance result as stored: what the agent of a
// node measured for a piece, and how it compares with the offer's
// guaranteed figure then.
type AcceptanceRecord struct {
	PieceID      int64
	Node         int
	OfferID      int64
	Result       market.AcceptanceResult
	Guaranteed   int64 // the offer's guaranteed figure for the metric; 0: none
	DevicesBelow int
	ShortfallBP  int
	CreatedAt    time.Time
}

const acceptanceColumns = `piece_id, node, offer_id, metric, per_device_json, duration_seconds, error, guaranteed,
	devices_below, shortfall_bp, created_at`

func scanAcceptance(s scanner) (AcceptanceRecord, error) {
	var a AcceptanceRecord
	var metric, perDevice string
	var created int64
	if err := s.Scan(&a.PieceID, &a.Node, &a.OfferID, &metric, &perDevice, &a.Result.DurationSeconds, &a.Result.Error,
		&a.Guaranteed, &a.DevicesBelow, &a.ShortfallBP, &created); err != nil {
		return AcceptanceRecord{}, err
	}
	a.Result.Metric, a.CreatedAt = market.FigureKind(metric), fromUnix(created)
	if err := json.Unmarshal([]byte(perDevice), &a.Result.PerDeviceMilli); err != nil {
		return AcceptanceRecord{}, fmt.Errorf("acceptance of piece %d: %w", a.PieceID, err)
	}
	return a, nil
}

// hasAcceptance reports whether a piece's acceptance result on a node is in.
func hasAcceptance(ctx context.Context, q querier, pieceID int64, node int) (bool, error) {
	var n int
	err := q.QueryRowContext(ctx, `SELECT COUNT(*) FROM acceptance_results WHERE piece_id = ? AND node = ?`, pieceID, node).Scan(&n)
	return n > 0, err
}

// RecordAcceptance stores, at now, the acceptance result the agent of the
// token's node reports for a piece (checked by
// market.AcceptanceFromReport), compared with the offer's guaranteed
// figure for its metric (market.Underperformance). Devices below it by
// more than the tolerance, before the piece ends, open an underperformance
// outage from now to the piece's end, which the next round of MeasureHosts
// records as an incident reported by the agent. Only the first result of a
// piece on a node counts: one posted again returns the stored one. A piece
// not on the token's node is not found; one not started yet is a conflict.
func (db *DB) RecordAcceptance(ctx context.Context, tokenID, pieceID int64, res market.AcceptanceResult, now time.Time) (AcceptanceRecord, error) {
	const op = "record acceptance"
	tx, err := db.begin(ctx)
	if err != nil {
		return AcceptanceRecord{}, fail(op, err, "")
	}
	defer tx.Rollback()
	t, err := liveHostToken(ctx, tx, tokenID)
	if err != nil {
		return AcceptanceRecord{}, fail(op, err, "")
	}
	r, p, err := nodePiece(ctx, tx, t, pieceID)
	if err != nil {
		return AcceptanceRecord{}, fail(op, err, "")
	}
	a, err := scanAcceptance(tx.QueryRowContext(ctx, `SELECT `+acceptanceColumns+` FROM acceptance_results WHERE piece_id = ? AND node = ?`, p.ID, t.Node))
	if err == nil {
		return a, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return AcceptanceRecord{}, fail(op, err, "")
	}
	if now.Before(p.Start) || (r.State != market.ReservationConfirmed && r.State != market.ReservationActive && r.State != market.ReservationCompleted) {
		return AcceptanceRecord{}, conflict(fmt.Sprintf("The rental of piece %d is not under way; there is nothing to accept.", p.ID))
	}
	o, err := getOffer(ctx, tx, p.OfferID)
	if err != nil {
		return AcceptanceRecord{}, fail(op, err, "")
	}
	a = AcceptanceRecord{PieceID: p.ID, Node: t.Node, OfferID: p.OfferID, Result: res, CreatedAt: truncate(now)}
	if f, ok := o.Figure(res.Metric); ok && f.Basis == market.FigureGuaranteed {
		a.Guaranteed = f.Value
	}
	a.DevicesBelow, a.ShortfallBP = market.Underperformance(a.Guaranteed, res, p.DevicesOnNode(t.Node))
	perDevice, err := json.Marshal(res.PerDeviceMilli)
	if err != nil {
		return AcceptanceRecord{}, fail(op, err, "")
	}
	if res.PerDeviceMilli == nil {
		perDevice = []byte("[]")
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO acceptance_results (`+acceptanceColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		a.PieceID, a.Node, a.OfferID, string(res.Metric), string(perDevice), res.DurationSeconds, res.Error, a.Guaranteed,
		a.DevicesBelow, a.ShortfallBP, unix(now)); err != nil {
		return AcceptanceRecord{}, fail(op, err, "")
	}
	if a.DevicesBelow > 0 && now.Before(p.End) {
		if _, err := tx.ExecContext(ctx, `INSERT INTO measured_outages (piece_id, node, kind, start_at, end_at, devices, severity_bp, note, created_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (piece_id, node, kind, start_at) DO NOTHING`,
			p.ID, t.Node, string(market.IncidentUnderperformance), unix(now), unix(p.End), a.DevicesBelow, a.ShortfallBP,
			acceptanceNote(a), unix(now)); err != nil {
			return AcceptanceRecord{}, fail(op, err, "")
		}
	}
	return a, fail(op, tx.Commit(), "")
}

// acceptanceNote is the evidence of an underperformance: the figures
// measured against the guaranteed one.
func acceptanceNote(a AcceptanceRecord) string {
	k := a.Result.Metric
	figures := make([]string, len(a.Result.PerDeviceMilli))
	for i, m := range a.Result.PerDeviceMilli {
		figures[i] = market.MilliFigure(k, m)
	}
	return fmt.Sprintf("Acceptance test by the provider's agent on node %d at %s (%d s): %s measured %s against the guaranteed %s; %d device(s) more than %s%% below it, %s%% short on average.",
		a.Node, market.FormatTime(a.CreatedAt), a.Result.DurationSeconds, market.FigureKindLabel(k), truncateText(strings.Join(figures, ", "), 1200),
		market.FormatFigure(k, a.Guaranteed), a.DevicesBelow, market.FormatPercentBP(market.AcceptanceToleranceBP), market.FormatPercentBP(a.ShortfallBP))
}

// AgentFigure is a figure of an offer as its agents measured it in
// acceptance tests: the median of the devices' figures.
type AgentFigure struct {
	Metric      market.FigureKind
	MedianMilli int64
	Devices     int // device figures the median is of
	Tests       int // acceptance tests they come from
	Last        time.Time
}

// agentFigureTests bounds the acceptance tests an offer's figures come
// from: the most recent ones.
const agentFigureTests = 50

// OfferAgentFigures returns the offer's figures measured by its agents'
// acceptance tests (failed tests excluded), one per metric, in
// market.AcceptanceMetrics order.
func (db *DB) OfferAgentFigures(ctx context.Context, offerID int64) ([]AgentFigure, error) {
	const op = "offer agent figures"
	tx, err := db.read(ctx)
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer tx.Rollback()
	rs, err := collect(ctx, tx, scanAcceptance, `SELECT `+acceptanceColumns+` FROM acceptance_results
		WHERE offer_id = ? AND error = '' ORDER BY created_at DESC, piece_id DESC LIMIT ?`, offerID, agentFigureTests)
	if err != nil {
		return nil, fail(op, err, "")
	}
	by := map[market.FigureKind]*AgentFigure{}
	vals := map[market.FigureKind][]int64{}
	for _, a := range rs {
		k := a.Result.Metric
		f := by[k]
		if f == nil {
			f = &AgentFigure{Metric: k, Last: a.CreatedAt}
			by[k] = f
		}
		f.Tests++
		vals[k] = append(vals[k], a.Result.PerDeviceMilli...)
	}
	var out []AgentFigure
	for _, k := range market.AcceptanceMetrics {
		f := by[k]
		if f == nil || len(vals[k]) == 0 {
			continue
		}
		v := vals[k]
		sort.Slice(v, func(i, j int) bool { return v[i] < v[j] })
		f.MedianMilli, f.Devices = market.NearestRank(v, 50), len(v)
		out = append(out, *f)
	}
	return out, nil
}

// ListReservationAcceptance returns the acceptance results of a
// reservation's pieces, by piece and node, for its buyer's page.
func (db *DB) ListReservationAcceptance(ctx context.Context, reservationID int64) ([]AcceptanceRecord, error) {
	const op = "list reservation acceptance"
	tx, err := db.read(ctx)
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer tx.Rollback()
	rs, err := collect(ctx, tx, scanAcceptance, `SELECT `+acceptanceColumns+` FROM acceptance_results
		WHERE piece_id IN (SELECT p.id FROM reservation_pieces p WHERE p.reservation_id = ?) ORDER BY piece_id, node`, reservationID)
	return rs, fail(op, err, "")
}
