package web

import (
	"context"
	"encoding/json"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

var orderRequestRe = regexp.MustCompile(`(?s)data-testid="standing-order-form".*?name="request" value="([^"]*)"`)

// orderForm is a valid standing order form for the request on the quotes.
func orderForm(t *testing.T, quotesPage string) url.Values {
	t.Helper()
	m := orderRequestRe.FindStringSubmatch(quotesPage)
	if m == nil {
		t.Fatal("no standing order form under the quotes")
	}
	return url.Values{"request": {html.UnescapeString(m[1])}, "limit_kind": {"price"}, "limit": {"50.00"},
		"fill_by": {"2026-12-05T09:00"}, "on_fill": {"hold"}}
}

// Through real HTTP: the form under the quotes (nothing fits yet); 422
// with the input kept and a message by each bad field; no CSRF, 403;
// another buyer can neither see nor cancel the order; a listing fills it
// with no tick and the list links its reservation; the open-order limit is
// a 409 with the reason; the owner cancels.
func TestStandingOrderPages(t *testing.T) {
	app := newTestApp(t)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); app.handler.wf.MatchOrders(ctx) }()
	t.Cleanup(func() { stop(); <-done })

	buyer := app.client()
	buyer.signUp("buyer@example.com", false)
	quotes := buyer.get("/requests?" + trainingQuery().Encode())
	mustContain(t, quotes.body, `data-testid="no-quotes"`, `data-testid="standing-order-form"`, "Place a standing order",
		"After 2 lapsed fills within 30 days you cannot place standing orders for 7 days.", "save a payment method on your account page")
	form := orderForm(t, quotes.body)

	bad := url.Values{}
	for k, v := range form {
		bad[k] = v
	}
	bad.Set("limit", "lots")
	bad.Set("fill_by", "2026-12-01T09:30")
	bad.Set("on_fill", "pay")
	r := buyer.post("/requests", "/orders", bad)
	if r.status != http.StatusUnprocessableEntity {
		t.Fatalf("bad order: %d", r.status)
	}
	mustContain(t, r.body, `data-testid="error-limit"`, "Enter the limit in US dollars", `value="lots"`,
		`data-testid="error-fill_by"`, "at least an hour from now", `value="2026-12-01T09:30"`)
	bad.Set("limit", "50")
	bad.Set("fill_by", "2026-12-05T09:00")
	r = buyer.post("/requests", "/orders", bad)
	if r.status != http.StatusUnprocessableEntity {
		t.Fatalf("pay at once without a card: %d", r.status)
	}
	mustContain(t, r.body, `data-testid="error-on_fill"`, "Add a payment method on your account page first")
	if got := buyer.postRaw("/orders", form); got.status != http.StatusForbidden {
		t.Fatalf("without CSRF: %d", got.status)
	}
	if rows, _ := app.db.ListStandingOrders(context.Background(), buyer.userID()); len(rows) != 0 {
		t.Fatalf("refused forms stored %d orders", len(rows))
	}

	r = buyer.post("/requests", "/orders", form)
	if r.status != http.StatusSeeOther || !strings.HasPrefix(r.location, "/orders#order-") {
		t.Fatalf("place: %d → %q\n%s", r.status, r.location, r.body)
	}
	id, _ := strconv.ParseInt(strings.TrimPrefix(r.location, "/orders#order-"), 10, 64)
	list := buyer.get("/orders")
	mustContain(t, list.body, `data-state="open"`, "$50.00 per reference device-hour", "8 × H100, training, 24 hours", "Standing order #"+itoa(id)+" placed", "Hold for payment")

	other := app.client()
	other.signUp("other@example.com", false)
	mustNotContain(t, other.get("/orders").body, `data-testid="order-row"`)
	if got := other.post("/orders", "/orders/"+itoa(id)+"/cancel", url.Values{}); got.status != http.StatusNotFound {
		t.Fatalf("another buyer's cancel: %d", got.status)
	}

	// A provider lists matching capacity: the order fills, no tick.
	off := app.listedOffer("nvidia-h100-80gb-sxm", 8, 1, "us-east-va", 219)
	deadline := time.Now().Add(10 * time.Second)
	var o market.StandingOrder
	for time.Now().Before(deadline) {
		row, err := app.db.FindStandingOrder(context.Background(), buyer.userID(), id)
		if err != nil {
			t.Fatal(err)
		}
		if o = row.StandingOrder; o.State != market.OrderOpen {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if o.State != market.OrderFilled {
		t.Fatalf("after the listing: %s", o.State)
	}
	list = buyer.get("/orders")
	mustContain(t, list.body, `data-state="filled"`, `href="/reservations/`+itoa(o.ReservationID)+`"`, "Reservation #"+itoa(o.ReservationID))
	res := buyer.get("/reservations/" + itoa(o.ReservationID))
	if res.status != http.StatusOK {
		t.Fatalf("the fill's reservation page: %d", res.status)
	}
	mustContain(t, res.body, off.Title)
	mustNotContain(t, list.body, `data-testid="order-cancel"`)
	if got := buyer.post("/orders", "/orders/"+itoa(id)+"/cancel", url.Values{}); got.status != http.StatusSeeOther {
		t.Fatalf("cancelling a filled order: %d", got.status)
	} else if page := buyer.get("/orders"); !strings.Contains(page.body, "can no longer be cancelled") {
		t.Fatal("no reason shown for the refused cancel")
	}

	// Five open orders at most (limit 1¢: they never fill); the sixth: 409.
	form.Set("limit", "0.01")
	for i := range market.MaxOpenStandingOrders {
		if got := buyer.post("/requests", "/orders", form); got.status != http.StatusSeeOther {
			t.Fatalf("order %d: %d", i, got.status)
		}
	}
	r = buyer.post("/requests", "/orders", form)
	if r.status != http.StatusConflict {
		t.Fatalf("sixth order: %d", r.status)
	}
	mustContain(t, r.body, `data-testid="standing-order-message"`, "5 open standing orders", `value="0.01"`)

	rows, _ := app.db.ListStandingOrders(context.Background(), buyer.userID())
	last := rows[0]
	r = buyer.post("/orders", "/orders/"+itoa(last.ID)+"/cancel", url.Values{})
	if r.status != http.StatusSeeOther || r.location != "/orders" {
		t.Fatalf("cancel: %d → %q", r.status, r.location)
	}
	mustContain(t, buyer.get("/orders").body, "Standing order #"+itoa(last.ID)+" cancelled", `data-state="cancelled"`)
	mustContain(t, buyer.get("/notifications").body, "You cancelled standing order #"+itoa(last.ID))
}

// The JSON API: 400 with field messages (the API's invalid), 201 with the order, the list, a
// read token refused, another buyer's cancel not found, the owner's done.
func TestStandingOrderAPI(t *testing.T) {
	app := newTestApp(t)
	buyer := app.client()
	buyer.signUp("api@example.com", false)
	write, read := buyer.createToken("orders", "write"), buyer.createToken("look", "read")
	form := orderForm(t, buyer.get("/requests?"+trainingQuery().Encode()).body)
	body := func(limit int64, fillBy string) string {
		return `{"request":` + form.Get("request") + `,"limit_kind":"budget","limit_cents":` + itoa(limit) +
			`,"fill_by":"` + fillBy + `","on_fill":"hold"}`
	}
	r := app.apiCall("POST", "/api/v1/orders", write, body(0, "2026-12-01T09:10:00Z"))
	if r.status != http.StatusBadRequest || !strings.Contains(r.body, `"limit"`) || !strings.Contains(r.body, `"fill_by"`) {
		t.Fatalf("bad order: %d %s", r.status, r.body)
	}
	if r := app.apiCall("POST", "/api/v1/orders", read, body(5000, "2026-12-03T09:00:00Z")); r.status != http.StatusForbidden {
		t.Fatalf("read token placing: %d", r.status)
	}
	r = app.apiCall("POST", "/api/v1/orders", write, body(5000, "2026-12-03T09:00:00Z"))
	if r.status != http.StatusCreated {
		t.Fatalf("place: %d %s", r.status, r.body)
	}
	var o apiOrder
	if err := json.Unmarshal([]byte(r.body), &o); err != nil || o.ID == 0 || o.State != "open" || o.LimitCents != 5000 ||
		o.LimitKind != "budget" || !o.FillBy.Equal(time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)) {
		t.Fatalf("placed: %+v %v", o, err)
	}
	var list struct{ Orders []apiOrder }
	r = app.apiCall("GET", "/api/v1/orders", read, "")
	if err := json.Unmarshal([]byte(r.body), &list); err != nil || len(list.Orders) != 1 || list.Orders[0].ID != o.ID {
		t.Fatalf("list: %s %v", r.body, err)
	}
	other := app.client()
	other.signUp("other-api@example.com", false)
	if r := app.apiCall("POST", "/api/v1/orders/"+itoa(o.ID)+"/cancel", other.createToken("x", "write"), ""); r.status != http.StatusNotFound {
		t.Fatalf("another buyer's cancel: %d", r.status)
	}
	r = app.apiCall("POST", "/api/v1/orders/"+itoa(o.ID)+"/cancel", write, "")
	if r.status != http.StatusOK || !strings.Contains(r.body, `"state":"cancelled"`) {
		t.Fatalf("cancel: %d %s", r.status, r.body)
	}
}
