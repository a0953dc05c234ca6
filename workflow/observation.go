package workflow

import (
	"context"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
)

// RecordObservation keeps what the buyer's own machine reported during the
// rental, compared with the provider's agent (store.RecordObservation); a
// contradiction is logged for the admins' attention as well.
func (s *Service) RecordObservation(ctx context.Context, buyerID, reservationID int64, obs market.Observation) (store.ObservationRecord, error) {
	rec, err := s.db.RecordObservation(ctx, buyerID, reservationID, obs, s.now())
	if err != nil {
		return store.ObservationRecord{}, err
	}
	if len(rec.Reasons) > 0 {
		s.log.Warn("buyer's machine contradicts the provider's agent", "reservation_id", reservationID, "reasons", len(rec.Reasons))
	}
	return rec, nil
}

// RecordWorkReport keeps a buyer's measurement of the work their rental
// did; it counts in the offer's measured figures (store.CreateWorkReport
// checks it belongs to the buyer's reservation).
func (s *Service) RecordWorkReport(ctx context.Context, r market.WorkReport) (market.WorkReport, error) {
	return s.db.CreateWorkReport(ctx, r, s.now())
}
