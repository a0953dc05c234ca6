package store

import (
	"context"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

func TestNotificationsAreMailedInTheirTransaction(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	u := createUser(t, db, "ada@example.com", false)
	if err := db.Notify(ctx, Notification{UserID: u.ID, Kind: NotifyRefundSent, Message: "A refund of $12.00 was sent.", URL: "/reservations/3", CreatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	due, err := db.DueMail(ctx, t0, 10)
	if err != nil || len(due) != 1 {
		t.Fatalf("DueMail = %d messages, %v; want 1", len(due), err)
	}
	m := due[0]
	if m.UserID != u.ID || m.To != "ada@example.com" || m.Kind != NotifyRefundSent || m.Subject != "Refund sent" ||
		m.Body != "A refund of $12.00 was sent." || m.URLPath != "/reservations/3" || !m.CreatedAt.Equal(t0) || m.Sent() || m.Attempts != 0 {
		t.Fatalf("queued %+v", m)
	}

	// Turned off, the kind is not mailed; security kinds cannot be turned off.
	if err := db.SetMailOptOuts(ctx, u.ID, map[string]bool{NotifyRefundSent: true}); err != nil {
		t.Fatal(err)
	}
	wantCode(t, db.SetMailOptOuts(ctx, u.ID, map[string]bool{MailPasswordReset: true}), market.CodeInvalid)
	if off, err := db.MailOptOuts(ctx, u.ID); err != nil || len(off) != 1 || !off[NotifyRefundSent] {
		t.Fatalf("MailOptOuts = %v, %v", off, err)
	}
	if err := db.Notify(ctx, Notification{UserID: u.ID, Kind: NotifyRefundSent, Message: "Another.", CreatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	if all, _ := db.ListMail(ctx, u.ID, 10); len(all) != 1 {
		t.Fatalf("%d messages after an opted-out notification, want still 1", len(all))
	}

	// A failed attempt waits; a sent message is no longer due.
	if err := db.MarkMailFailed(ctx, m.ID, "421 try later", t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if due, _ := db.DueMail(ctx, t0.Add(30*time.Second), 10); len(due) != 0 {
		t.Fatalf("a message retried at t0+1m is due at t0+30s")
	}
	due, _ = db.DueMail(ctx, t0.Add(time.Minute), 10)
	if len(due) != 1 || due[0].Attempts != 1 || due[0].LastError != "421 try later" {
		t.Fatalf("after a failure: %+v", due)
	}
	if err := db.MarkMailSent(ctx, m.ID, t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if due, _ := db.DueMail(ctx, t0.Add(time.Hour), 10); len(due) != 0 {
		t.Fatalf("a sent message is still due")
	}
	all, _ := db.ListMail(ctx, 0, 10)
	if len(all) != 1 || !all[0].SentAt.Equal(t0.Add(time.Minute)) || all[0].Attempts != 2 || all[0].LastError != "" {
		t.Fatalf("after sending: %+v", all)
	}
}
