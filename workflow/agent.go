package workflow

import (
	"context"
	"time"
)

// measureTick is the periodic part of the SLA measured from the provider
// agents' heartbeats (store.MeasureHosts): silent hosts open host
// failures, outages end with their pieces, and ended outages become
// incidents reported by the agent. It runs after the reservations move on
// and before settlement, so an outage that lasts to a rental's end is on
// the reservation when it settles.
func (s *Service) measureTick(ctx context.Context, now time.Time) {
	incs, err := s.db.MeasureHosts(ctx, now)
	if err != nil {
		s.log.Error("background: measure hosts", "err", err)
		return
	}
	for _, i := range incs {
		s.log.Info("measured outage recorded", "reservation_id", i.ReservationID, "piece_id", i.PieceID, "incident_id", i.ID,
			"kind", string(i.Kind), "devices", i.DevicesAffected, "start", i.Start, "end", i.End)
	}
}
