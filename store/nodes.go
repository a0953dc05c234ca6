package store

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// formatNodes writes a piece's nodes as reservation_pieces.nodes stores
// them: "node:devices" pairs joined by commas (0011_piece_nodes.sql).
func formatNodes(shares []market.NodeShare) string {
	var b strings.Builder
	for i, s := range shares {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(s.Node))
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(s.Devices))
	}
	return b.String()
}

// parseNodes reads reservation_pieces.nodes.
func parseNodes(s string) ([]market.NodeShare, error) {
	if s == "" {
		return nil, nil
	}
	parts := strings.Split(s, ",")
	out := make([]market.NodeShare, len(parts))
	for i, p := range parts {
		node, devices, ok := strings.Cut(p, ":")
		n, err1 := strconv.Atoi(node)
		d, err2 := strconv.Atoi(devices)
		if !ok || err1 != nil || err2 != nil || n < 0 || d < 1 {
			return nil, fmt.Errorf("nodes %q: want node:devices pairs", s)
		}
		out[i] = market.NodeShare{Node: n, Devices: d}
	}
	return out, nil
}

// placeRecorded places a piece that is already recorded (booked before
// nodes were, or imported history) beside the earlier ones on its offer:
// where market.PlaceCommitments would, ignoring the offer's availability
// window and rental limits (which may have changed since); if that does
// not fit, spread over the nodes with the most free devices; if even that
// does not, packed from node 0, a node's devices to a node. Only the last
// may overcommit a node.
func placeRecorded(o market.Offer, earlier []market.Commitment, c market.Commitment) []market.NodeShare {
	o.AvailableFrom, o.AvailableUntil = time.Time{}, time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
	o.MinRentalHours, o.MaxRentalHours = 0, 0
	if placed, err := market.PlaceCommitments(o, earlier, []market.Commitment{c}); err == nil {
		return placed[0].Nodes
	}
	spread := c
	spread.Gang = false
	if placed, err := market.PlaceCommitments(o, earlier, []market.Commitment{spread}); err == nil {
		return placed[0].Nodes
	}
	var out []market.NodeShare
	for n, rest := 0, c.Devices; rest > 0; n++ {
		d := min(rest, o.DevicesPerNode)
		if n == o.Nodes-1 {
			d = rest
		}
		out = append(out, market.NodeShare{Node: n, Devices: d})
		rest -= d
	}
	return out
}

// overlapping returns the commitments of cs that overlap c's interval:
// the only ones that bear on where c goes.
func overlapping(cs []market.Commitment, c market.Commitment) []market.Commitment {
	var out []market.Commitment
	for _, x := range cs {
		if x.Start.Before(c.End) && x.End.After(c.Start) {
			out = append(out, x)
		}
	}
	return out
}

// placeRecordedPieces gives every piece without nodes its nodes, offer by
// offer, replaying the offer's pieces in id order (see placeRecorded);
// pieces of cancelled or expired reservations are placed but do not count
// against later ones. It runs inside migration 0011's transaction.
func placeRecordedPieces(ctx context.Context, tx *sql.Tx) error {
	rows, err := tx.QueryContext(ctx, `SELECT p.id, p.offer_id, p.devices, p.start_at, p.end_at, p.gang, p.nodes, r.state,
			o.devices_per_node, o.nodes, o.placement_group
		FROM reservation_pieces p JOIN reservations r ON r.id = p.reservation_id JOIN offers o ON o.id = p.offer_id
		WHERE p.offer_id IN (SELECT offer_id FROM reservation_pieces WHERE nodes = '')
		ORDER BY p.offer_id, p.id`)
	if err != nil {
		return err
	}
	type piece struct {
		c       market.Commitment
		counts  bool
		offer   market.Offer
		nodeTxt string
	}
	var pieces []piece
	for rows.Next() {
		var p piece
		var start, end int64
		var state string
		if err := rows.Scan(&p.c.ID, &p.c.OfferID, &p.c.Devices, &start, &end, &p.c.Gang, &p.nodeTxt, &state,
			&p.offer.DevicesPerNode, &p.offer.Nodes, &p.offer.PlacementGroup); err != nil {
			rows.Close()
			return err
		}
		p.c.Start, p.c.End = fromUnix(start), fromUnix(end)
		p.offer.ID = p.c.OfferID
		s := market.ReservationState(state)
		p.counts = s != market.ReservationCancelled && s != market.ReservationExpired
		pieces = append(pieces, p)
	}
	if err := closeRows(rows); err != nil {
		return err
	}
	var earlier []market.Commitment
	for i, p := range pieces {
		if i == 0 || p.c.OfferID != pieces[i-1].c.OfferID {
			earlier = earlier[:0]
		}
		if p.nodeTxt != "" {
			if p.c.Nodes, err = parseNodes(p.nodeTxt); err != nil {
				return fmt.Errorf("piece %d: %w", p.c.ID, err)
			}
		} else {
			p.c.Nodes = placeRecorded(p.offer, overlapping(earlier, p.c), p.c)
			if _, err := tx.ExecContext(ctx, `UPDATE reservation_pieces SET nodes = ? WHERE id = ?`, formatNodes(p.c.Nodes), p.c.ID); err != nil {
				return err
			}
		}
		if p.counts {
			earlier = append(earlier, p.c)
		}
	}
	return nil
}
