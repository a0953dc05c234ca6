package web

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"encoding/xml"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// seedTrades imports settled reservations on offers, days days of them
// before testNow: each day three trades — two buyers, every offer in turn
// (so two offers from two providers are enough parties for the index) —
// at price 200+d cents with d%4+1 devices for 2 hours.
func (a *testApp) seedTrades(offers []market.Offer, days int) {
	a.t.Helper()
	ctx := context.Background()
	var buyers []int64
	for i := range 2 {
		u, err := a.db.CreateUser(ctx, market.User{Email: "hist" + strconv.FormatInt(offers[0].ID, 10) + "-" + strconv.Itoa(i) + "@example.com", DisplayName: "History", IsBuyer: true}, []byte("x"), testNow)
		if err != nil {
			a.t.Fatal(err)
		}
		buyers = append(buyers, u.ID)
	}
	var rs []market.Reservation
	for d := 1; d <= days; d++ {
		booked := testNow.Add(-time.Duration(d) * 24 * time.Hour)
		for k := range 3 {
			p := market.ReservationPiece{OfferID: offers[k%len(offers)].ID, Devices: d%4 + 1, Start: booked.Add(time.Hour), End: booked.Add(3 * time.Hour),
				PriceCents: market.Cents(200 + d)}
			p.AmountCents = p.PriceCents * market.Cents(2*p.Devices)
			rs = append(rs, market.Reservation{BuyerID: buyers[k%2], State: market.ReservationSettled, Pieces: []market.ReservationPiece{p},
				RequestJSON: `{"version":1}`, CreatedAt: booked, UpdatedAt: booked})
		}
	}
	if err := a.db.ImportPastReservations(ctx, rs, testNow); err != nil {
		a.t.Fatal(err)
	}
}

// svgChart is what the test reads back from a chart.
type svgChart struct {
	XMLName xml.Name `xml:"svg"`
	Title   string   `xml:"title"`
	Desc    string   `xml:"desc"`
	Rects   []struct {
		Day    string `xml:"data-day,attr"`
		Volume string `xml:"data-volume,attr"`
		Height string `xml:"height,attr"`
	} `xml:"g>rect"`
	Path struct {
		D string `xml:"d,attr"`
	} `xml:"path"`
	Points []struct {
		Day        string `xml:"data-day,attr"`
		IndexCents string `xml:"data-index-cents,attr"`
		CY         string `xml:"cy,attr"`
	} `xml:"g>circle"`
}

func TestMarketPageChartsAndEndpoints(t *testing.T) {
	app := newTestApp(t)
	h100 := app.listedOffer("nvidia-h100-80gb-sxm", 8, 1, "us-east-va", 219)
	app.listedOffer("nvidia-h100-80gb-sxm", 8, 1, "eu-north-se", 259)
	// A second North American provider traded too, but lists nothing now.
	other := app.listedOffer("nvidia-h100-80gb-sxm", 8, 1, "us-west-or", 239)
	if err := app.db.SetOfferState(context.Background(), other.ProviderID, other.ID, market.OfferPaused, testNow); err != nil {
		t.Fatal(err)
	}
	app.seedTrades([]market.Offer{h100, other}, 30)
	// One booking of an A100 is one party's trade: it is never published.
	a100 := app.listedOffer("nvidia-a100-80gb-sxm", 8, 1, "us-east-va", 149)
	app.seedTrades([]market.Offer{a100}, 1)
	c := app.client()

	r := c.get("/market")
	if r.status != http.StatusOK {
		t.Fatalf("status %d", r.status)
	}
	mustContain(t, r.body, `data-testid="market-summary"`, "H100 80GB SXM, on-demand", `data-testid="index-chart"`,
		`href="/market/methodology"`, `href="/market" aria-current="page"`)
	// Ask stats over both listed offers: min $2.19, median (lower) $2.19, p90 $2.59.
	row := r.body[strings.Index(r.body, `data-testid="market-row"`):]
	row = row[:strings.Index(row, "</tr>")]
	mustContain(t, row, "$2.19", "$2.59", ">90<")
	// The A100 is listed (its asks show) but its trades are withheld.
	a100Row := r.body[strings.Index(r.body, `data-class="nvidia-a100-80gb-sxm:on-demand"`):]
	a100Row = a100Row[:strings.Index(a100Row, "</tr>")]
	mustContain(t, a100Row, "$1.49", "—")
	mustNotContain(t, a100Row, "$2.01")
	mustNotContain(t, r.body, `data-testid="index-chart" data-class="nvidia-a100-80gb-sxm:on-demand"`)

	// The SVG parses as XML and carries every day's point.
	start := strings.Index(r.body, "<svg")
	end := strings.Index(r.body, "</svg>") + len("</svg>")
	if start < 0 || end < start {
		t.Fatal("no svg on the page")
	}
	var ch svgChart
	if err := xml.Unmarshal([]byte(r.body[start:end]), &ch); err != nil {
		t.Fatalf("svg does not parse: %v", err)
	}
	if !strings.Contains(ch.Title, "H100 80GB SXM, on-demand") || !strings.Contains(ch.Desc, "volume-weighted") {
		t.Errorf("title %q desc %q", ch.Title, ch.Desc)
	}
	if len(ch.Points) != 30 || len(ch.Rects) != 30 || strings.Count(ch.Path.D, "L") != 29 {
		t.Fatalf("%d points, %d bars, path %q", len(ch.Points), len(ch.Rects), ch.Path.D)
	}
	for i, p := range ch.Points {
		d := 30 - i // oldest first
		day := testNow.Add(-time.Duration(d) * 24 * time.Hour).Format("2006-01-02")
		if p.Day != day || p.IndexCents != strconv.Itoa(200+d) || ch.Rects[i].Day != day {
			t.Fatalf("point %d: %+v, want day %s index %d", i, p, day, 200+d)
		}
	}
	// Higher prices sit higher on the chart (smaller y).
	y0, _ := strconv.ParseFloat(ch.Points[0].CY, 64)
	yN, _ := strconv.ParseFloat(ch.Points[29].CY, 64)
	if !(y0 < yN) {
		t.Errorf("oldest (dearest) point y %v not above newest y %v", y0, yN)
	}

	// JSON, filtered by class and region group.
	resp, err := http.Get(app.srv.URL + "/market/index.json?class=nvidia-h100-80gb-sxm:on-demand&region=North+America&days=10")
	if err != nil {
		t.Fatal(err)
	}
	var doc marketJSON
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("json: %v %d", err, resp.StatusCode)
	}
	resp.Body.Close()
	if len(doc.Series) != 1 || doc.Series[0].RegionGroup != "North America" || len(doc.Series[0].Points) != 9 {
		t.Fatalf("json series %+v", doc.Series)
	}
	p := doc.Series[0].Points[8]
	if p.Date != "2026-11-30" || p.IndexCents != 201 || p.Trades != 3 || p.VolumeDeviceHours != 12 || p.LowCents != 201 || p.HighCents != 201 {
		t.Errorf("last point %+v", p)
	}
	if len(doc.Asks) != 1 || doc.Asks[0].Offers != 1 || doc.Asks[0].MinCents != 219 {
		t.Errorf("asks %+v", doc.Asks)
	}

	// CSV.
	resp, err = http.Get(app.srv.URL + "/market/index.csv?region=Europe")
	if err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(resp.Body).ReadAll()
	resp.Body.Close()
	if err != nil || len(rows) != 1 || rows[0][0] != "date" {
		t.Fatalf("europe csv (no trades there): %v %v", rows, err)
	}
	resp, err = http.Get(app.srv.URL + "/market/index.csv")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	rows, err = csv.NewReader(strings.NewReader(string(body))).ReadAll()
	if err != nil || len(rows) != 31 || rows[30][1] != "nvidia-h100-80gb-sxm:on-demand" || rows[30][4] != "201" ||
		!strings.HasPrefix(resp.Header.Get("Content-Type"), "text/csv") {
		t.Fatalf("csv: %d rows %v %v", len(rows), rows[len(rows)-1], err)
	}

	// Bad filters: 400 JSON naming the field; the page says so with 422.
	resp, err = http.Get(app.srv.URL + "/market/index.json?class=nope")
	if err != nil {
		t.Fatal(err)
	}
	eb := read(t, resp)
	if eb.status != http.StatusBadRequest || !strings.Contains(eb.body, `"class"`) {
		t.Errorf("bad class: %d %s", eb.status, eb.body)
	}
	if r := c.get("/market?days=0"); r.status != http.StatusUnprocessableEntity || !strings.Contains(r.body, "Days must be") {
		t.Errorf("bad days: %d", r.status)
	}

	m := c.get("/market/methodology")
	mustContain(t, m.body, "rounded <strong>half up to a whole cent once</strong>", "nearest-rank", `data-testid="carbon-profiles"`,
		"219 261 294", // the CISO profile, 00–02 UTC
		`id="confidentiality"`, "at least 3 trades from at least 2 buyers and 2 providers")
}
