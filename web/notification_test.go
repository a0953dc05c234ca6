package web

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
)

// Notifications of one kind about one reservation, one after another,
// are one row on the page — the newest, with the earlier folded in a
// <details> (no script) — while the same kind about it after another
// kind in between is a row of its own. Five notifications, newest first:
// declined #5 (d), held #6, declined #5 (c, b, a) make three rows.
func TestNotificationsGroupConsecutiveOfOneKindAndThing(t *testing.T) {
	app := newTestApp(t)
	buyer := app.client()
	buyer.signUp("many@example.com", false)
	id := buyer.userID()
	at := testNow.Add(-time.Hour)
	declined := func(why string) market.Notice {
		return market.Notice{Kind: market.NoticePaymentFailed, Params: market.NoticeParams{Reservation: 5, Text: why, Until: testNow}}
	}
	for i, n := range []store.Notification{
		{Kind: store.NotifyPaymentFailed, URL: "/reservations/5", Notice: declined("decline a")},
		{Kind: store.NotifyPaymentFailed, URL: "/reservations/5", Notice: declined("decline b")},
		{Kind: store.NotifyPaymentFailed, URL: "/reservations/5", Notice: declined("decline c")},
		{Kind: store.NotifyBookingHeld, URL: "/reservations/6", Notice: market.Notice{Kind: market.NoticeBookingHeld,
			Params: market.NoticeParams{Reservation: 6, Start: testNow, End: testNow.Add(time.Hour), Until: testNow}}},
		{Kind: store.NotifyPaymentFailed, URL: "/reservations/5", Notice: declined("decline d")},
	} {
		n.UserID, n.CreatedAt = id, at.Add(time.Duration(i)*time.Minute)
		if err := app.db.Notify(context.Background(), n); err != nil {
			t.Fatal(err)
		}
	}
	body := buyer.get("/notifications").body
	if n := strings.Count(body, `data-testid="notification" `); n != 3 {
		t.Fatalf("%d rows, want 3:\n%s", n, body)
	}
	first, second, third := strings.Index(body, "(decline d)"), strings.Index(body, "Reservation #6"), strings.Index(body, "(decline c)")
	if first < 0 || second < first || third < second {
		t.Fatalf("rows out of order: %d %d %d", first, second, third)
	}
	if strings.Count(body, `data-testid="notification-earlier"`) != 1 || !strings.Contains(body, `data-count="2"`) ||
		strings.Count(body, `data-testid="notification-earlier-item"`) != 2 || !strings.Contains(body, "2 earlier like it") {
		t.Fatalf("the three declines of #5 are not one row with two earlier:\n%s", body)
	}
	if b, a := strings.Index(body, "(decline b)"), strings.Index(body, "(decline a)"); b < third || a < b {
		t.Fatalf("the earlier declines are not below the newest, newest first: c %d b %d a %d", third, b, a)
	}
}
