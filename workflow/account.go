package workflow

import (
	"context"
	"time"
)

// TakeCodeAttempt counts one two-factor code attempt against the account
// before its code is checked, atomically (store.TakeCodeAttempt): false,
// with the wait, when limit attempts were made within window.
func (s *Service) TakeCodeAttempt(ctx context.Context, userID int64, window time.Duration, limit int) (bool, time.Duration, error) {
	return s.db.TakeCodeAttempt(ctx, userID, s.now(), window, limit)
}
