package workflow

import (
	"context"

	"github.com/gpumarket/gpumarket/store"
)

// ReportIncident records an incident reported by the buyer or the provider
// of a reservation; it is settled under the reservation's frozen SLA terms.
func (s *Service) ReportIncident(ctx context.Context, in store.Incident) (store.Incident, error) {
	return s.db.ReportIncident(ctx, in, s.now())
}

// AcknowledgeIncident records the provider acknowledging a buyer's report
// (before IncidentAckDeadline, after which it becomes a dispute).
func (s *Service) AcknowledgeIncident(ctx context.Context, providerID, incidentID int64) (store.Incident, error) {
	inc, err := s.db.AcknowledgeIncident(ctx, providerID, incidentID, s.now())
	if err != nil {
		return store.Incident{}, err
	}
	s.log.Info("incident acknowledged", "incident_id", inc.ID, "reservation_id", inc.ReservationID)
	return inc, nil
}

// AnnotateIncident adds the provider's note to an incident on their
// reservation.
func (s *Service) AnnotateIncident(ctx context.Context, providerID, incidentID int64, body string) (store.IncidentNote, error) {
	return s.db.AnnotateIncident(ctx, providerID, incidentID, body, s.now())
}
