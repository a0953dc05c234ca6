package workflow

import "context"

// MarkNotificationsRead marks every notification of the user read.
func (s *Service) MarkNotificationsRead(ctx context.Context, userID int64) error {
	return s.db.MarkNotificationsRead(ctx, userID, s.now())
}

// SetMailOptOuts records which kinds of notification the user does not
// want by e-mail (store.MailedNotificationKinds lists the kinds).
func (s *Service) SetMailOptOuts(ctx context.Context, userID int64, off map[string]bool) error {
	return s.db.SetMailOptOuts(ctx, userID, off)
}

// RetryMail queues a failed message to be sent again (an admin's retry).
func (s *Service) RetryMail(ctx context.Context, id int64) error {
	return s.db.RetryMail(ctx, id, s.now())
}
