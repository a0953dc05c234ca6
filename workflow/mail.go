package workflow

import (
	"context"
	"time"

	"github.com/gpumarket/gpumarket/mail"
	"github.com/gpumarket/gpumarket/store"
)

// Timings of the outbox's sender, kept together.
const (
	// MailMaxAttempts bounds the attempts to send one message; after that
	// it is failed, shown so on the admin's outbox page, where it can be
	// queued again.
	MailMaxAttempts = 10
	// MailMaxAge is how long a message may wait unsent before its first
	// attempt: older, it is given up rather than sent late (a server that
	// ran without SMTP for weeks does not flood people when it gets one).
	MailMaxAge = 72 * time.Hour
	// mailRetryBase and mailRetryMax shape the backoff between attempts:
	// 1 min, doubling, at most 1 h.
	mailRetryBase = time.Minute
	mailRetryMax  = time.Hour
	// mailBatch is how many messages one tick sends at most, over one
	// connection.
	mailBatch = 50
)

// mailBackoff is the wait before attempt n+1 after n failed attempts.
func mailBackoff(attempts int) time.Duration {
	d := mailRetryBase
	for i := 1; i < attempts && d < mailRetryMax; i++ {
		d *= 2
	}
	return min(d, mailRetryMax)
}

// SendsMail reports whether an SMTP server is configured; without one,
// mail stays in the outbox, readable on the admin's and the demo mailbox
// pages.
func (s *Service) SendsMail() bool { return s.mail != nil }

// MailFrom is the configured sender of mail ("" without an SMTP server).
func (s *Service) MailFrom() string {
	if s.mail == nil {
		return ""
	}
	return s.mail.From()
}

// MailComposer renders messages as they are (or would be) sent, links
// made absolute with the server's base URL.
func (s *Service) MailComposer() mail.Composer { return s.compose }

// MailMessage is the message the sender makes of an outbox row. A
// notification's mail is stored as its notice, not its words: they are
// written here (market.Notice.Text), as the notifications page writes
// them, so the mail and the page say the same.
func MailMessage(m store.OutboxMail) mail.Message {
	body := m.Body
	if m.Notice.Kind != "" {
		body = m.Notice.Text()
	}
	return mail.Message{ID: m.ID, To: m.To, Subject: m.Subject, Body: body, Path: m.URLPath,
		Notification: !store.SecurityMail(m.Kind), Date: m.CreatedAt}
}

// mailTick sends the outbox's due messages (at most mailBatch), then
// records each one sent, or failed with the next attempt after a backoff,
// or given up. It runs in Tick, under the background lease, so one replica
// sends. A crash between sending and recording sends the message again at
// the next tick, with the same Message-ID (mail.Composer.MessageID); the
// outbox never loses one, since each was committed with its event.
func (s *Service) mailTick(ctx context.Context, now time.Time) {
	if s.mail == nil {
		return
	}
	due, err := s.db.DueMail(ctx, now, mailBatch)
	if err != nil {
		s.log.Error("background: list due mail", "err", err)
		return
	}
	var send []store.OutboxMail
	for _, m := range due {
		if m.Attempts == 0 && now.Sub(m.NextAttemptAt) > MailMaxAge {
			if err := s.db.GiveUpMail(ctx, m.ID, "not sent: waited more than 72 hours for an SMTP server", false, now); err != nil {
				s.log.Error("background: give up mail", "mail_id", m.ID, "err", err)
			}
			continue
		}
		send = append(send, m)
	}
	if len(send) == 0 {
		return
	}
	msgs := make([]mail.Message, len(send))
	for i, m := range send {
		msgs[i] = MailMessage(m)
	}
	errs := s.mail.Send(ctx, msgs)
	for i, m := range send {
		if errs[i] == nil {
			if err := s.db.MarkMailSent(ctx, m.ID, now); err != nil {
				s.log.Error("background: mark mail sent (it will be sent again, with the same Message-ID)", "mail_id", m.ID, "err", err)
			}
			continue
		}
		reason := errs[i].Error()
		if m.Attempts+1 >= MailMaxAttempts {
			s.log.Error("mail given up", "mail_id", m.ID, "kind", m.Kind, "attempts", m.Attempts+1, "err", reason)
			if err := s.db.GiveUpMail(ctx, m.ID, reason, true, now); err != nil {
				s.log.Error("background: give up mail", "mail_id", m.ID, "err", err)
			}
			continue
		}
		next := now.Add(mailBackoff(m.Attempts + 1))
		s.log.Warn("mail not sent; retrying", "mail_id", m.ID, "kind", m.Kind, "attempts", m.Attempts+1, "next", next, "err", reason)
		if err := s.db.MarkMailFailed(ctx, m.ID, reason, next); err != nil {
			s.log.Error("background: mark mail failed", "mail_id", m.ID, "err", err)
		}
	}
}
