package workflow

import (
	"io"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/mail"
	"github.com/gpumarket/gpumarket/mail/mailtest"
	"github.com/gpumarket/gpumarket/store"
)

// mailService is a second service over the fixture's database that sends
// mail through srv: the process after a restart with -smtp-url.
func (f *fixture) mailService(srv *mailtest.Server) *Service {
	f.t.Helper()
	sender, err := mail.New(mail.Config{URL: srv.URL, From: "GPU Market <gpus@market.example>", BaseURL: "https://market.example", TLS: srv.TLS})
	if err != nil {
		f.t.Fatal(err)
	}
	s, err := New(f.ctx, Config{Billing: f.proc, PlatformFeeBP: feeBP, Now: func() time.Time { return f.now }, Mail: sender,
		BaseURL: "https://market.example"}, f.db, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		f.t.Fatal(err)
	}
	return s
}

func (f *fixture) mailTo(userID int64) []store.OutboxMail {
	f.t.Helper()
	ms, err := f.db.ListMail(f.ctx, userID, 100)
	if err != nil {
		f.t.Fatal(err)
	}
	return ms
}

// A message committed with its event but not sent before the process
// stopped goes out once, from the next process; one sent but not recorded
// (a crash between the two) goes out again with the same Message-ID.
func TestMailCommittedButUnsentGoesOutOnceAfterRestart(t *testing.T) {
	f := newFixture(t, nil)
	srv := mailtest.Start(t, false)

	// The first process has no SMTP server: the booking's mail waits.
	r := f.book(f.now.Add(48 * time.Hour))
	f.tick(f.now)
	held := f.mailTo(f.buyer.ID)
	if len(held) != 1 || held[0].Kind != store.NotifyBookingHeld || held[0].Sent() || held[0].Attempts != 0 {
		t.Fatalf("buyer's mail after booking without SMTP: %+v", held)
	}
	if f.wf.SendsMail() {
		t.Fatal("a service without a sender says it sends mail")
	}

	// The next process sends it, once.
	wf := f.mailService(srv)
	wf.Tick(f.ctx, f.now)
	wf.Tick(f.ctx, f.now.Add(time.Second))
	got := srv.Messages()
	if len(got) != 1 {
		t.Fatalf("server received %d messages, want exactly 1", len(got))
	}
	m := got[0]
	if m.Header.Get("To") != "<buyer@example.com>" || m.Header.Get("Subject") != store.MailSubject(store.NotifyBookingHeld) ||
		m.Header.Get("Message-Id") != "<outbox-"+itoa(held[0].ID)+"@market.example>" ||
		!strings.Contains(m.Text, "https://market.example/reservations/"+itoa(r.ID)) || m.Header.Get("List-Unsubscribe") == "" {
		t.Fatalf("received %v\n%s", m.Header, m.Text)
	}
	if after := f.mailTo(f.buyer.ID); !after[0].Sent() || after[0].Attempts != 1 || after[0].LastError != "" {
		t.Fatalf("after sending: %+v", after[0])
	}

	// A crash between sending and recording: the message went out but the
	// outbox does not know; the next tick sends it again, recognisably.
	if err := f.db.Notify(f.ctx, store.Notification{UserID: f.buyer.ID, Kind: store.NotifyRefundSent, Message: "A refund.", CreatedAt: f.now}); err != nil {
		t.Fatal(err)
	}
	due, err := f.db.DueMail(f.ctx, f.now, 10)
	if err != nil || len(due) != 1 {
		t.Fatalf("due %v, %v", due, err)
	}
	sender, _ := mail.New(mail.Config{URL: srv.URL, From: "gpus@market.example", BaseURL: "https://market.example", TLS: srv.TLS})
	if errs := sender.Send(f.ctx, []mail.Message{MailMessage(due[0])}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	f.mailService(srv).Tick(f.ctx, f.now.Add(2*time.Second))
	got = srv.Messages()
	if len(got) != 3 || got[1].Header.Get("Message-Id") != got[2].Header.Get("Message-Id") || got[1].Text != got[2].Text {
		t.Fatalf("%d messages; the resend should repeat the Message-ID: %q, %q", len(got), got[1].Header.Get("Message-Id"), got[len(got)-1].Header.Get("Message-Id"))
	}
}

// A refused message is retried with a doubling backoff and goes out later;
// one refused MailMaxAttempts times is given up and can be queued again.
func TestMailRetriedWithBackoffThenGivenUp(t *testing.T) {
	f := newFixture(t, nil)
	srv := mailtest.Start(t, false)
	wf := f.mailService(srv)
	if err := f.db.Notify(f.ctx, store.Notification{UserID: f.prov.ID, Kind: store.NotifyPayoutSent, Message: "Payout of $10.00 sent.", CreatedAt: f.now}); err != nil {
		t.Fatal(err)
	}
	srv.Refuse(2)
	start := f.now
	wf.Tick(f.ctx, start)
	m := f.mailTo(f.prov.ID)[0]
	if m.Sent() || m.Attempts != 1 || !strings.Contains(m.LastError, "451") || !m.NextAttemptAt.Equal(start.Add(time.Minute)) {
		t.Fatalf("after a refusal: %+v", m)
	}
	wf.Tick(f.ctx, start.Add(59*time.Second)) // not due yet: no attempt
	wf.Tick(f.ctx, start.Add(time.Minute))    // refused again: 2 min more
	m = f.mailTo(f.prov.ID)[0]
	if m.Attempts != 2 || !m.NextAttemptAt.Equal(start.Add(3*time.Minute)) {
		t.Fatalf("after the second refusal: %+v", m)
	}
	wf.Tick(f.ctx, start.Add(3*time.Minute))
	m = f.mailTo(f.prov.ID)[0]
	if !m.Sent() || m.Attempts != 3 || m.LastError != "" || len(srv.Messages()) != 1 {
		t.Fatalf("after the third attempt: %+v, %d received", m, len(srv.Messages()))
	}

	// Refused every time: given up after MailMaxAttempts, no longer due.
	if err := f.db.Notify(f.ctx, store.Notification{UserID: f.buyer.ID, Kind: store.NotifyRefundSent, Message: "A refund.", CreatedAt: f.now}); err != nil {
		t.Fatal(err)
	}
	srv.Refuse(1000)
	at := f.now
	var waits []time.Duration
	for i := 0; i < MailMaxAttempts+2; i++ {
		wf.Tick(f.ctx, at)
		m = f.mailTo(f.buyer.ID)[0]
		if m.Failed() {
			break
		}
		waits = append(waits, m.NextAttemptAt.Sub(at))
		at = m.NextAttemptAt
	}
	want := []time.Duration{time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute, 16 * time.Minute, 32 * time.Minute, time.Hour, time.Hour, time.Hour}
	if !m.Failed() || m.Attempts != MailMaxAttempts || !strings.Contains(m.LastError, "451") || len(waits) != len(want) {
		t.Fatalf("after %d refusals: %+v, waits %v", MailMaxAttempts, m, waits)
	}
	for i := range want {
		if waits[i] != want[i] {
			t.Fatalf("waits %v, want %v", waits, want)
		}
	}
	if due, _ := f.db.DueMail(f.ctx, at.Add(24*time.Hour), 10); len(due) != 0 {
		t.Fatalf("a message given up on is still due: %+v", due)
	}
	// An admin queues it again; it goes out.
	srv.Refuse(0)
	if err := f.db.RetryMail(f.ctx, m.ID, at); err != nil {
		t.Fatal(err)
	}
	wf.Tick(f.ctx, at)
	if m = f.mailTo(f.buyer.ID)[0]; !m.Sent() || len(srv.Messages()) != 2 {
		t.Fatalf("after the admin's retry: %+v", m)
	}
}

// Mail that waited more than MailMaxAge for an SMTP server is given up
// rather than sent late.
func TestMailTooOldIsGivenUp(t *testing.T) {
	f := newFixture(t, nil)
	srv := mailtest.Start(t, false)
	if err := f.db.Notify(f.ctx, store.Notification{UserID: f.buyer.ID, Kind: store.NotifyRefundSent, Message: "Old news.", CreatedAt: f.now}); err != nil {
		t.Fatal(err)
	}
	f.mailService(srv).Tick(f.ctx, f.now.Add(MailMaxAge+time.Minute))
	m := f.mailTo(f.buyer.ID)[0]
	if !m.Failed() || m.Attempts != 0 || !strings.Contains(m.LastError, "72 hours") || len(srv.Messages()) != 0 {
		t.Fatalf("old mail: %+v, %d received", m, len(srv.Messages()))
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
