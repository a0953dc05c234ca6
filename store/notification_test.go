package store

import (
	"context"
	"strings"
	"testing"

	"github.com/gpumarket/gpumarket/market"
)

// A new notification keeps its notice kind and values, not its words:
// neither its row nor its queued mail holds the sentence, which market
// writes from them when the page or the mail is shown.
func TestNotificationWordsAreNotStored(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	admin := createUser(t, db, "admin@example.com", false)
	prov := createUser(t, db, "p@example.com", true)
	o, err := db.CreateOffer(ctx, validOffer(prov.ID), t0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.DecideOffer(ctx, admin.ID, o.ID, market.ReviewRejected, "No such GPU exists.", t0); err != nil {
		t.Fatal(err)
	}
	suspend(t, db, prov.ID)
	reinstate(t, db, prov.ID)

	// The sentences as the provider reads them, written out here.
	want := []struct{ kind, notice, params, words string }{
		{NotifyAccountReinstated, "account_reinstated", `{}`, "Your account was reinstated; your approved offers are listed again."},
		{NotifyAccountSuspended, "account_suspended", `{"text":"test"}`, "Your account was suspended: test"},
		{NotifyListingRejected, "listing_rejected", `{"title":"` + o.Title + `","text":"No such GPU exists."}`,
			"Your offer “" + o.Title + "” was rejected: No such GPU exists."},
	}
	ns, err := db.ListNotifications(ctx, prov.ID, 0)
	if err != nil || len(ns) != len(want) {
		t.Fatalf("ListNotifications = %d, %v; want %d", len(ns), err, len(want))
	}
	mail, err := db.ListMail(ctx, prov.ID, 10)
	if err != nil || len(mail) != len(want) {
		t.Fatalf("ListMail = %d, %v; want %d", len(mail), err, len(want))
	}
	for i, w := range want {
		n, m := ns[i], mail[i]
		if n.Kind != w.kind || string(n.Notice.Kind) != w.notice || n.Message != "" || n.Notice.Text() != w.words {
			t.Errorf("notification %d: kind %s, notice %s, message %q, says %q; want %s, %s, \"\", %q",
				i, n.Kind, n.Notice.Kind, n.Message, n.Notice.Text(), w.kind, w.notice, w.words)
		}
		if m.Kind != w.kind || string(m.Notice.Kind) != w.notice || m.Body != "" || m.Notice.Text() != w.words {
			t.Errorf("mail %d: kind %s, notice %s, body %q, says %q; want %s, %s, \"\", %q",
				i, m.Kind, m.Notice.Kind, m.Body, m.Notice.Text(), w.kind, w.notice, w.words)
		}
	}

	// What the tables hold: kinds and values, and no sentence anywhere.
	for _, table := range []string{"notifications", "mail_outbox"} {
		words := "message"
		if table == "mail_outbox" {
			words = "body"
		}
		rows, err := db.reader.QueryContext(ctx, `SELECT notice, params, `+words+` FROM `+table+` WHERE user_id = ? ORDER BY id DESC`, prov.ID)
		if err != nil {
			t.Fatal(err)
		}
		i := 0
		for rows.Next() {
			var notice, params, stored string
			if err := rows.Scan(&notice, &params, &stored); err != nil {
				t.Fatal(err)
			}
			if i >= len(want) || notice != want[i].notice || params != want[i].params || stored != "" {
				t.Errorf("%s row %d: notice %q, params %s, %s %q", table, i, notice, params, words, stored)
			}
			for _, w := range want {
				if strings.Contains(params, w.words) || strings.Contains(stored, w.words) {
					t.Errorf("%s row %d holds the words %q", table, i, w.words)
				}
			}
			i++
		}
		if err := rows.Close(); err != nil || i != len(want) {
			t.Fatalf("%s: %d rows, %v; want %d", table, i, err, len(want))
		}
	}
}

// A row written before notice kinds (migration 0038 gives it kind 'text')
// reads as it did: its stored words, on the page and in its mail.
func TestOldNotificationsKeepTheirWords(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	u := createUser(t, db, "ada@example.com", false)
	const words = "Reservation #3 is held for you until 3 Dec 2025 12:30 UTC."
	// The columns a row had before 0038; the new ones take their defaults,
	// as the migration gives every existing row.
	if _, err := db.writer.ExecContext(ctx, `INSERT INTO notifications (user_id, kind, message, url, created_at) VALUES (?, ?, ?, ?, ?)`,
		u.ID, NotifyBookingHeld, words, "/reservations/3", unix(t0)); err != nil {
		t.Fatal(err)
	}
	if _, err := db.writer.ExecContext(ctx, `INSERT INTO mail_outbox (user_id, to_addr, kind, subject, body, url_path, created_at, next_attempt_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, u.ID, u.Email, NotifyBookingHeld, "Held", words, "/reservations/3", unix(t0), unix(t0)); err != nil {
		t.Fatal(err)
	}
	ns, err := db.ListNotifications(ctx, u.ID, 0)
	if err != nil || len(ns) != 1 {
		t.Fatalf("ListNotifications = %+v, %v", ns, err)
	}
	if n := ns[0]; n.Kind != NotifyBookingHeld || n.Notice.Kind != market.NoticeText || n.Notice.Text() != words || n.Message != words || n.URL != "/reservations/3" {
		t.Errorf("old notification read as %+v", n)
	}
	due, err := db.DueMail(ctx, t0, 10)
	if err != nil || len(due) != 1 {
		t.Fatalf("DueMail = %+v, %v", due, err)
	}
	if m := due[0]; m.Notice.Kind != market.NoticeText || m.Notice.Text() != words || m.Body != words || m.Subject != "Held" {
		t.Errorf("old mail read as %+v", m)
	}
}
