package web

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// TestMarketForwardCurve books capacity three weeks ahead on a small known
// market and reads the forward curve back from the page, JSON and CSV.
// testNow is Tuesday 1 December 2026 09:00 UTC: week 0 starts Monday 30
// November, week 3 (the bookings) Monday 21 December. The offers are
// available until 1 February 2027 09:00, so they ask in weeks 0–9 (week 9
// starts 1 February: 9 hours ≥ the 1-hour minimum) and not in weeks 10–11.
func TestMarketForwardCurve(t *testing.T) {
	app := newTestApp(t)
	ctx := context.Background()
	c := app.client()

	// Before anything is listed: the empty state, and empty downloads.
	r := c.get("/market")
	mustContain(t, r.body, `data-testid="forward-curve"`, `data-testid="forward-empty"`)

	east := app.listedOffer("nvidia-h100-80gb-sxm", 8, 1, "us-east-va", 219)
	west := app.listedOffer("nvidia-h100-80gb-sxm", 8, 1, "us-west-or", 239)
	app.listedOffer("nvidia-h100-80gb-sxm", 8, 1, "eu-north-se", 259)
	a100 := app.listedOffer("nvidia-a100-80gb-sxm", 8, 1, "us-east-va", 149)
	var buyers []int64
	for _, email := range []string{"fwd1@example.com", "fwd2@example.com"} {
		u, err := app.db.CreateUser(ctx, market.User{Email: email, DisplayName: "Forward buyer", IsBuyer: true}, []byte("x"), testNow)
		if err != nil {
			t.Fatal(err)
		}
		buyers = append(buyers, u.ID)
	}
	start := time.Date(2026, 12, 22, 10, 0, 0, 0, time.UTC) // week 3
	bookPaid := func(buyer int64, o market.Offer, devices, hours int) {
		t.Helper()
		p := market.ReservationPiece{OfferID: o.ID, Devices: devices, Start: start, End: start.Add(time.Duration(hours) * time.Hour),
			PriceCents: o.PriceCentsPerDeviceHour, AmountCents: o.PriceCentsPerDeviceHour * market.Cents(devices*hours)}
		res, err := app.db.CreateReservation(ctx, buyer, []market.ReservationPiece{p}, `{}`, testNow, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := app.db.ConfirmReservation(ctx, res.ID, testNow); err != nil {
			t.Fatal(err)
		}
	}
	// H100, North America, week 3: 2×3 = 6 device-hours at $2.19 and
	// 2×1 + 4×1 = 6 at $2.39, two buyers, two providers: published, VWAP
	// (6×219 + 6×239) / 12 = 229, volume 12 device-hours.
	bookPaid(buyers[0], east, 2, 3)
	bookPaid(buyers[1], west, 1, 2)
	bookPaid(buyers[0], west, 4, 1)
	// One A100 booking is one party's trade: withheld.
	bookPaid(buyers[1], a100, 1, 5)

	r = c.get("/market")
	if r.status != http.StatusOK {
		t.Fatalf("status %d", r.status)
	}
	mustNotContain(t, r.body, `data-testid="forward-empty"`)
	mustContain(t, r.body, "Forward curve · All regions", "physically settled forward", `href="/market/forward.json"`, `href="/market/forward.csv"`,
		`href="/market/methodology#forward"`)
	table := func(body, class string) string {
		t.Helper()
		i := strings.Index(body, `data-testid="forward-table" data-class="`+class+`"`)
		if i < 0 {
			t.Fatalf("no forward table for %s", class)
		}
		s := body[i:]
		return s[:strings.Index(s, "</table>")]
	}
	week := func(tbl, day string) string {
		t.Helper()
		i := strings.Index(tbl, `data-week="`+day+`"`)
		if i < 0 {
			t.Fatalf("no week %s", day)
		}
		s := tbl[i:]
		return s[:strings.Index(s, "</tr>")]
	}
	h100 := table(r.body, "nvidia-h100-80gb-sxm:on-demand")
	mustContain(t, h100, "asks from $2.19 · 3 trades in 1 week")
	mustNotContain(t, r.body, `class="card forward-card" open`)
	mustContain(t, c.get("/market?class=nvidia-h100-80gb-sxm:on-demand").body, `class="card forward-card" open`)
	if n := strings.Count(h100, `data-testid="forward-week"`); n != 12 {
		t.Errorf("%d weeks in the H100 table", n)
	}
	// All regions: three offers, 24 devices, lowest $2.19.
	mustContain(t, week(h100, "2026-11-30"), "30 Nov 2026", "$2.19", ">3<", ">24<")
	w3 := week(h100, "2026-12-21")
	mustContain(t, w3, "$2.19", ">24<", "$2.29", "$2.19 – $2.39", ">12<", ">3<")
	mustContain(t, week(h100, "2027-02-01"), "$2.19")
	mustNotContain(t, week(h100, "2027-02-08"), "$")
	mustNotContain(t, week(h100, "2026-12-14"), "$2.29")
	a100w3 := week(table(r.body, "nvidia-a100-80gb-sxm:on-demand"), "2026-12-21")
	mustContain(t, a100w3, "$1.49")
	mustNotContain(t, a100w3, "$1.49 –")

	// JSON, North America.
	resp, err := http.Get(app.srv.URL + "/market/forward.json?region=North+America")
	if err != nil {
		t.Fatal(err)
	}
	var doc forwardMarketJSON
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("json: %v %d", err, resp.StatusCode)
	}
	resp.Body.Close()
	if doc.From != "2026-11-30" || doc.Weeks != 12 || doc.Settlement != "physical" || doc.Currency != "USD" || len(doc.Curves) != 2 {
		t.Fatalf("json %+v", doc)
	}
	cv := doc.Curves[1]
	if cv.Class != "nvidia-h100-80gb-sxm:on-demand" || cv.RegionGroup != "North America" || len(cv.Weeks) != 12 {
		t.Fatalf("curve %+v", cv)
	}
	w := cv.Weeks[3]
	if w.WeekStart != "2026-12-21" || w.AskOffers != 2 || w.AskDevices != 16 || w.AskMinCents == nil || *w.AskMinCents != 219 ||
		w.Trades != 3 || w.VWAPCents == nil || *w.VWAPCents != 229 || *w.LowCents != 219 || *w.HighCents != 239 ||
		w.VolumeDeviceHours != 12 || w.VolumeDeviceSeconds != 12*3600 {
		t.Errorf("week 3 %+v", w)
	}
	if w := cv.Weeks[2]; w.Trades != 0 || w.VWAPCents != nil || w.AskOffers != 2 {
		t.Errorf("week 2 %+v", w)
	}
	if w := cv.Weeks[10]; w.WeekStart != "2027-02-08" || w.AskOffers != 0 || w.AskMinCents != nil {
		t.Errorf("week 10 %+v", w)
	}
	if a := doc.Curves[0]; a.Class != "nvidia-a100-80gb-sxm:on-demand" || a.Weeks[3].Trades != 0 || a.Weeks[3].VWAPCents != nil {
		t.Errorf("a100 curve %+v", a.Weeks[3])
	}

	// CSV, all regions: a header and twelve weeks for each of two curves.
	resp, err = http.Get(app.srv.URL + "/market/forward.csv")
	if err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(resp.Body).ReadAll()
	resp.Body.Close()
	if err != nil || len(rows) != 25 || rows[0][0] != "week_start" || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/csv") {
		t.Fatalf("csv: %d rows %v", len(rows), err)
	}
	want := []string{"2026-12-21", "nvidia-h100-80gb-sxm:on-demand", "H100 80GB SXM, on-demand", market.AllRegions,
		"3", "24", "219", "3", "229", "219", "239", "12", "43200"}
	if got := rows[13+3]; strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("csv week 3:\n got %v\nwant %v", got, want)
	}
	if got := rows[13+11]; got[0] != "2027-02-15" || got[4] != "0" || got[6] != "" || got[8] != "" {
		t.Errorf("csv week 11 %v", got)
	}

	// A region with nothing: the empty state; bad filters as the index.
	mustContain(t, c.get("/market?region=Asia-Pacific").body, `data-testid="forward-empty"`)
	resp, err = http.Get(app.srv.URL + "/market/forward.json?class=nope")
	if err != nil {
		t.Fatal(err)
	}
	if eb := read(t, resp); eb.status != http.StatusBadRequest || !strings.Contains(eb.body, `"class"`) {
		t.Errorf("bad class: %d %s", eb.status, eb.body)
	}

	m := c.get("/market/methodology")
	mustContain(t, m.body, `id="forward"`, "physically settled forward contract", "Out of scope: cash-settled futures", "regulated financial instruments",
		"Monday 00:00 UTC", "at least its minimum rental")
}
