package store

import (
	"context"
	"strings"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// The measured part of a provider's record (issue 11): the delivered
// pieces that the provider's agents measured throughout
// (market.AgentMeasured), with the device-time their heartbeats showed
// lost to outages and the device-time the parties reported lost on them,
// which the measurement replaces in the reliability score
// (market.ProviderRecord.ScoredLostDeviceSeconds).

// deliveredPiece selects the pieces whose device-time the record counts as
// promised: of reservations that ran to the end, ending in (since, now].
const deliveredPiece = `r.state IN (?, ?) AND p.end_at > ? AND p.end_at <= ?`

// incidentLostSeconds is the device-time an incident i took from its piece
// p, clipped to the piece.
const incidentLostSeconds = `i.devices_affected * (
	(CASE WHEN i.end_at < p.end_at THEN i.end_at ELSE p.end_at END) -
	(CASE WHEN i.start_at > p.start_at THEN i.start_at ELSE p.start_at END))`

// firstHeartbeat is the first heartbeat kept of a node of an offer.
type firstHeartbeat struct {
	offerID int64
	node    int
	at      int64
}

// measuredRecords adds the measured part to the records in out, for one
// provider or all (providerID 0), with plain grouped queries: the
// delivered pieces on offers whose nodes have reported, the first
// heartbeat kept of each of those nodes, and per piece the device-time
// lost to measured outages and to acknowledged outage incidents (as
// LostDeviceSeconds counts them: started in the window). The rule that
// says which pieces were measured is market.AgentMeasured.
func measuredRecords(ctx context.Context, q querier, providerID int64, since, now int64, out map[int64]market.ProviderRecord) error {
	provider, pa := "", []any(nil)
	if providerID != 0 {
		provider, pa = " AND p.provider_id = ?", []any{providerID}
	}
	delivered := []any{string(market.ReservationCompleted), string(market.ReservationSettled), since, now}
	hasAgent := ` AND EXISTS (SELECT 1 FROM hosts h WHERE h.offer_id = p.offer_id)`

	pieces, err := collect(ctx, q, func(s scanner) (market.ReservationPiece, error) {
		var p market.ReservationPiece
		var start, end int64
		var nodes string
		if err := s.Scan(&p.ProviderID, &p.ID, &p.OfferID, &p.Devices, &start, &end, &nodes); err != nil {
			return p, err
		}
		p.Start, p.End = fromUnix(start), fromUnix(end)
		var err error
		p.Nodes, err = parseNodes(nodes)
		return p, err
	}, `SELECT p.provider_id, p.id, p.offer_id, p.devices, p.start_at, p.end_at, p.nodes
		FROM reservation_pieces p JOIN reservations r ON r.id = p.reservation_id
		WHERE `+deliveredPiece+hasAgent+provider+` ORDER BY p.id`, append(delivered, pa...)...)
	if err != nil || len(pieces) == 0 {
		return err
	}

	offerFilter := ""
	if providerID != 0 {
		offerFilter = " WHERE o.provider_id = ?"
	}
	firsts, err := collect(ctx, q, func(s scanner) (firstHeartbeat, error) {
		var f firstHeartbeat
		return f, s.Scan(&f.offerID, &f.node, &f.at)
	}, `SELECT h.offer_id, h.node, MIN(h.first_at) FROM host_heartbeat_runs h JOIN offers o ON o.id = h.offer_id`+
		offerFilter+` GROUP BY h.offer_id, h.node`, pa...)
	if err != nil {
		return err
	}
	first := map[int64]map[int]time.Time{}
	for _, f := range firsts {
		if first[f.offerID] == nil {
			first[f.offerID] = map[int]time.Time{}
		}
		first[f.offerID][f.node] = fromUnix(f.at)
	}

	var kinds []any
	for _, k := range market.OutageKinds() {
		kinds = append(kinds, string(k))
	}
	kindIn := "(?" + strings.Repeat(", ?", len(kinds)-1) + ")"
	perPiece := func(query string, args ...any) (map[int64]int64, error) {
		rows, err := collect(ctx, q, func(s scanner) ([2]int64, error) {
			var v [2]int64
			return v, s.Scan(&v[0], &v[1])
		}, query, args...)
		if err != nil {
			return nil, err
		}
		out := make(map[int64]int64, len(rows))
		for _, r := range rows {
			out[r[0]] = r[1]
		}
		return out, nil
	}
	// A measured outage still open when its piece ended lasted to the end.
	measuredLost, err := perPiece(`SELECT m.piece_id, SUM(m.devices * (
			(CASE WHEN COALESCE(m.end_at, p.end_at) < p.end_at THEN COALESCE(m.end_at, p.end_at) ELSE p.end_at END) -
			(CASE WHEN m.start_at > p.start_at THEN m.start_at ELSE p.start_at END)))
		FROM measured_outages m JOIN reservation_pieces p ON p.id = m.piece_id JOIN reservations r ON r.id = p.reservation_id
		WHERE m.kind IN `+kindIn+` AND m.start_at < p.end_at AND COALESCE(m.end_at, p.end_at) > p.start_at
			AND COALESCE(m.end_at, p.end_at) > m.start_at AND `+deliveredPiece+hasAgent+provider+` GROUP BY m.piece_id`,
		append(append(kinds, delivered...), pa...)...)
	if err != nil {
		return err
	}
	reportedLost, err := perPiece(`SELECT i.piece_id, SUM(`+incidentLostSeconds+`)
		FROM incidents i JOIN reservation_pieces p ON p.id = i.piece_id JOIN reservations r ON r.id = p.reservation_id
		WHERE i.acknowledged = 1 AND i.reported_by <> ? AND i.kind IN `+kindIn+` AND i.start_at >= ? AND i.end_at > i.start_at
			AND `+deliveredPiece+hasAgent+provider+` GROUP BY i.piece_id`,
		append(append(append(append([]any{ReportedByBuyer}, kinds...), since), delivered...), pa...)...)
	if err != nil {
		return err
	}

	for _, p := range pieces {
		if !market.AgentMeasured(p, first[p.OfferID]) {
			continue
		}
		r := out[p.ProviderID]
		r.ProviderID = p.ProviderID
		r.MeasuredDeviceSeconds += int64(p.Devices) * int64(p.End.Sub(p.Start)/time.Second)
		r.MeasuredLostDeviceSeconds += measuredLost[p.ID]
		r.ReportedLostOnMeasured += reportedLost[p.ID]
		out[p.ProviderID] = r
	}
	return nil
}
