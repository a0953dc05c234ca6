package workflow

import (
	"context"

	"github.com/gpumarket/gpumarket/store"
)

// PostMessage adds a message of the reservation's buyer or one of its
// providers to its thread and notifies (and mails) the other side; the
// store checks who is a party.
func (s *Service) PostMessage(ctx context.Context, userID, reservationID int64, body string) (store.ReservationMessage, error) {
	m, err := s.db.PostReservationMessage(ctx, userID, reservationID, body, s.now())
	if err != nil {
		return store.ReservationMessage{}, err
	}
	s.log.Info("reservation message", "reservation_id", m.ReservationID, "message_id", m.ID, "role", string(m.AuthorRole))
	return m, nil
}
