package store

import (
	"context"

	"github.com/gpumarket/gpumarket/market"
)

// ListIncidentsAwaitingAcknowledgement returns the incident reports that
// hold up a settlement: on completed reservations whose settlement has not
// started, reports neither acknowledged nor turned into a dispute (those
// ListSettleable waits for), by id. Admins see them as settlements waiting
// on a provider.
func (db *DB) ListIncidentsAwaitingAcknowledgement(ctx context.Context) ([]Incident, error) {
	const op = "list incidents awaiting acknowledgement"
	tx, err := db.read(ctx)
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer tx.Rollback()
	is, err := queryIncidents(ctx, tx, `WHERE acknowledged = 0 AND disputed_at IS NULL AND reservation_id IN (
		SELECT r.id FROM reservations r WHERE r.state = ? AND NOT EXISTS (SELECT 1 FROM settlements s WHERE s.reservation_id = r.id))`,
		string(market.ReservationCompleted))
	return is, fail(op, err, "")
}
