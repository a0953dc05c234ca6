package store

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

func TestOfferAccessStoredAndFiltered(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	prov := createUser(t, db, "access-prov@example.com", true)
	agent := validOffer(prov.ID)
	agent.Title = "agent box"
	manual := validOffer(prov.ID)
	manual.Title = "hand-run box"
	manual.Access, manual.AccessInstructions = market.AccessManual, "Mail me your key;\nI add it."
	var ids []int64
	for _, o := range []market.Offer{agent, manual} {
		if err := market.ValidateOffer(&o, t0); err != nil {
			t.Fatal(err)
		}
		stored, err := db.CreateOffer(ctx, o, t0)
		if err != nil {
			t.Fatal(err)
		}
		if err := db.ReviewOffer(ctx, stored.ID, market.ReviewApproved, "", t0); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, stored.ID)
	}
	got, err := db.FindProviderOffer(ctx, prov.ID, ids[1])
	if err != nil || got.Access != market.AccessManual || got.AccessInstructions != "Mail me your key;\nI add it." {
		t.Fatalf("stored %q %q %v", got.Access, got.AccessInstructions, err)
	}
	// An offer built without a mode (an import, a test) is the agent's.
	bare := validOffer(prov.ID)
	bare.Access = ""
	if o, err := db.CreateOffer(ctx, bare, t0); err != nil || o.Access != market.AccessAgent {
		t.Fatalf("no mode: %q %v", o.Access, err)
	}
	for _, c := range []struct {
		q    string
		want int64
	}{{"agent=yes", ids[0]}, {"agent=no", ids[1]}} {
		s, err := market.ParseSearch(c.q)
		if err != nil {
			t.Fatal(err)
		}
		ls, total, err := db.FindOffers(ctx, OfferFilter{Now: t0, OfferSearch: s})
		if err != nil || total != 1 || ls[0].Offer.ID != c.want {
			t.Errorf("%s: %d offers %+v %v, want offer %d", c.q, total, ls, err, c.want)
		}
	}
}

func TestReservationMessagesParties(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	prov := createUser(t, db, "msg-prov@example.com", true)
	buyer := createUser(t, db, "msg-buyer@example.com", false)
	other := createUser(t, db, "msg-other@example.com", true)
	o, err := db.CreateOffer(ctx, validOffer(prov.ID), t0)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.ReviewOffer(ctx, o.ID, market.ReviewApproved, "", t0); err != nil {
		t.Fatal(err)
	}
	r := book(t, db, buyer.ID, t0, piece(o, 2, t0.Add(2*time.Hour), 2))
	at := t0.Add(time.Minute)

	_, err = db.PostReservationMessage(ctx, other.ID, r.ID, "let me in", at)
	wantCode(t, err, market.CodeNotFound)
	_, err = db.ReservationThread(ctx, other.ID, r.ID)
	wantCode(t, err, market.CodeNotFound)
	_, err = db.PostReservationMessage(ctx, buyer.ID, r.ID+1000, "no such", at)
	wantCode(t, err, market.CodeNotFound)
	_, err = db.PostReservationMessage(ctx, buyer.ID, r.ID, "  ", at)
	if market.FieldErrors(err)["body"] == "" {
		t.Fatalf("an empty message: %v", err)
	}

	m1, err := db.PostReservationMessage(ctx, buyer.ID, r.ID, "  When can I log in?  ", at)
	if err != nil || m1.Body != "When can I log in?" || m1.AuthorRole != market.MessageBuyer {
		t.Fatalf("buyer's message %+v %v", m1, err)
	}
	m2, err := db.PostReservationMessage(ctx, prov.ID, r.ID, "Now: ssh -p 2222 ubuntu@gpu1", at.Add(time.Minute))
	if err != nil || m2.AuthorRole != market.MessageProvider {
		t.Fatalf("provider's message %+v %v", m2, err)
	}
	for _, reader := range []int64{buyer.ID, prov.ID} {
		th, err := db.ReservationThread(ctx, reader, r.ID)
		if err != nil || len(th.Messages) != 2 || th.Messages[0].ID != m1.ID || th.Messages[1].ID != m2.ID ||
			th.Messages[1].AuthorName != prov.DisplayName || !th.Messages[0].CreatedAt.Equal(at) {
			t.Fatalf("thread for %d: %+v %v", reader, th, err)
		}
	}
	if th, err := db.AdminReservationThread(ctx, r.ID); err != nil || th.Role != "" || len(th.Messages) != 2 {
		t.Fatalf("admin thread: %+v %v", th, err)
	}

	// Each side is notified of the other's message, with its start, and mailed.
	for _, c := range []struct {
		user int64
		kind market.NoticeKind
		text string
	}{{prov.ID, market.NoticeMessageFromBuyer, "When can I log in?"}, {buyer.ID, market.NoticeMessageFromProvider, "ssh -p 2222"}} {
		ns, err := db.ListNotifications(ctx, c.user, 10)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, x := range ns {
			if x.Kind == NotifyReservationMessage {
				n++
				if x.Notice.Kind != c.kind || x.Notice.Params.Reservation != r.ID || !strings.Contains(x.Notice.Text(), c.text) || x.URL != MessagesPath(r.ID) {
					t.Errorf("notification %+v", x)
				}
			}
		}
		if n != 1 {
			t.Errorf("user %d has %d message notifications, want 1", c.user, n)
		}
		mail, err := db.ListMail(ctx, c.user, 10)
		if err != nil || len(mail) == 0 || mail[0].Kind != NotifyReservationMessage || !strings.Contains(mail[0].Notice.Text(), c.text) {
			t.Errorf("mail to %d: %+v %v", c.user, mail, err)
		}
	}

	// A thread holds at most market.MaxMessages.
	for i := 2; i < market.MaxMessages; i++ {
		if _, err := db.PostReservationMessage(ctx, buyer.ID, r.ID, "again", at); err != nil {
			t.Fatal(err)
		}
	}
	_, err = db.PostReservationMessage(ctx, prov.ID, r.ID, "one more", at)
	wantMessage(t, err, market.CodeConflict, "the most it can take")
}
