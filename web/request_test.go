package web

import (
	"bytes"
	"context"
	"html"
	"mime/multipart"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// listedOffer stores an approved offer of a fresh provider straight through
// the store and puts it in the running app's matcher index.
func (a *testApp) listedOffer(acc string, perNode, nodes int, region string, cents market.Cents) market.Offer {
	a.t.Helper()
	ctx := context.Background()
	email := "prov" + acc + region + time.Now().Format("150405.000000") + "@example.com"
	u, err := a.db.CreateUser(ctx, market.User{Email: email, DisplayName: "Provider " + region, IsProvider: true}, []byte("x"), testNow)
	if err != nil {
		a.t.Fatal(err)
	}
	accel, _ := market.FindAccelerator(acc)
	o := market.Offer{
		ProviderID: u.ID, Title: accel.Name + " in " + region, AcceleratorID: acc, MemoryGB: accel.MemoryGB,
		DevicesPerNode: perNode, Nodes: nodes, Interconnect: market.InterconnectNVLink, NetworkID: "none",
		CPUCores: 32, RAMGB: 256, StorageGB: 1000, DriverVersion: "550.90", CUDAVersion: "12.4", OSImage: "Ubuntu 22.04",
		ContainerRuntime: "Docker", RegionID: region, AvailableFrom: testNow, AvailableUntil: testNow.AddDate(0, 2, 0),
		MinRentalHours: 1, MaxRentalHours: 720, ProvisioningMins: 10, PriceCentsPerDeviceHour: cents,
		BillingBasis: market.BillingWallClock, UptimeBP: 9950, CreditCapBP: 10000, FreeCancelHours: 24, CancelFeeBP: 2500,
	}
	if nodes > 1 {
		o.NetworkID = "ethernet-100"
	}
	if err := market.ValidateOffer(&o, testNow); err != nil {
		a.t.Fatal(err)
	}
	o, err = a.db.CreateOffer(ctx, o, testNow)
	if err != nil {
		a.t.Fatal(err)
	}
	if err := a.db.ReviewOffer(ctx, o.ID, market.ReviewApproved, "", testNow); err != nil {
		a.t.Fatal(err)
	}
	a.handler.wf.RefreshOffer(ctx, o.ID)
	o.Review = market.ReviewApproved
	return o
}

// trainingQuery asks for 8 H100s for 24 hours within the next week.
func trainingQuery() url.Values {
	return url.Values{
		"workload.kind": {"training"}, "workload.devices": {"8"}, "workload.hours": {"24"},
		"workload.checkpoint_mins": {"60"}, "workload.restart_mins": {"10"},
		"constraints.families":       {"H100"},
		"constraints.earliest_start": {"2026-12-01T10:00"}, "constraints.deadline": {"2026-12-08T10:00"},
		"preferences.cost_weight": {"100"},
	}
}

var (
	reserveFormRe = regexp.MustCompile(`name="request" value="([^"]*)"[^>]*>\s*<input type="hidden" name="quote_id" value="([^"]*)"`)
	relaxRe       = regexp.MustCompile(`href="(/requests\?[^"]+)" data-testid="relaxation">([^<]+)<`)
)

// firstQuote returns the reserve form fields of the first quote on a page.
func firstQuote(t *testing.T, body string) (request, pieces string) {
	t.Helper()
	m := reserveFormRe.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no reservable quote on the page")
	}
	return html.UnescapeString(m[1]), html.UnescapeString(m[2])
}

func TestQuotesAndBreakdown(t *testing.T) {
	app := newTestApp(t)
	cheap := app.listedOffer("nvidia-h100-80gb-sxm", 8, 1, "us-east-va", 219)
	app.listedOffer("nvidia-h100-80gb-sxm", 8, 1, "eu-north-se", 259)
	app.listedOffer("nvidia-a100-80gb-sxm", 8, 1, "eu-north-se", 129)

	r := app.client().get("/requests?" + trainingQuery().Encode())
	if r.status != http.StatusOK {
		t.Fatalf("status %d", r.status)
	}
	if n := strings.Count(r.body, `data-testid="quote"`); n != 2 {
		t.Fatalf("%d quotes, want the 2 H100 offers", n)
	}
	// The cheaper offer ranks first and its breakdown is itemised.
	first := r.body[strings.Index(r.body, `data-testid="quote"`):]
	mustContain(t, first[:strings.Index(first, `</article>`)], "/offers/"+itoa(cheap.ID), "Instance", "Expected failed work", "Orchestration overhead", "kg CO2e", "$420.48")

	// The partial used by the page's script renders only the quotes.
	req, _ := http.NewRequest(http.MethodGet, app.srv.URL+"/requests?"+trainingQuery().Encode(), nil)
	req.Header.Set("X-Quotes-Partial", "1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	part := read(t, resp)
	if part.status != http.StatusOK || strings.Contains(part.body, "<html") || !strings.Contains(part.body, `data-testid="quote"`) {
		t.Fatalf("partial: %d, %d bytes", part.status, len(part.body))
	}
}

func TestRequestInvalidNamesTheField(t *testing.T) {
	app := newTestApp(t)
	q := trainingQuery()
	q.Set("workload.devices", "0")
	q.Set("constraints.max_price", "two dollars")
	r := app.client().get("/requests?" + q.Encode())
	if r.status != http.StatusUnprocessableEntity {
		t.Fatalf("status %d", r.status)
	}
	mustContain(t, r.body, `data-testid="error-workload.devices"`, `data-testid="error-constraints.max_price"`, `value="two dollars"`)
}

func TestNothingFitsExplainsAndRelaxes(t *testing.T) {
	app := newTestApp(t)
	app.listedOffer("nvidia-h100-80gb-sxm", 8, 1, "us-east-va", 219)
	app.listedOffer("nvidia-a100-80gb-sxm", 8, 1, "eu-north-se", 129)
	q := trainingQuery()
	q.Set("constraints.max_price", "1.50")
	r := app.client().get("/requests?" + q.Encode())
	if r.status != http.StatusOK {
		t.Fatalf("status %d", r.status)
	}
	mustContain(t, r.body, `data-testid="no-quotes"`, "0 of 2 offers fit", "1 wrong model", "1 over the maximum price")
	m := relaxRe.FindStringSubmatch(r.body)
	if m == nil {
		t.Fatalf("no relaxation offered")
	}
	mustContain(t, m[2], "raise the maximum price to $2.19")
	// One click applies it and finds the offer.
	r2 := app.client().get(html.UnescapeString(m[1]))
	if strings.Count(r2.body, `data-testid="quote"`) != 1 {
		t.Fatalf("relaxation %q did not produce the quote", m[2])
	}
	mustContain(t, r2.body, `value="2.19"`)
}

func TestReserveHoldsAndNeverDoubleBooks(t *testing.T) {
	app := newTestApp(t)
	offer := app.listedOffer("nvidia-h100-80gb-sxm", 8, 1, "us-east-va", 219)
	alice := app.client()
	alice.signUp("alice@example.com", false)
	bob := app.client()
	bob.signUp("bob@example.com", false)

	// Both see the same quote for the offer's 8 devices.
	page := alice.get("/requests?" + trainingQuery().Encode()).body
	reqJSON, sig := firstQuote(t, page)
	bobReq, bobSig := firstQuote(t, bob.get("/requests?"+trainingQuery().Encode()).body)
	if sig != bobSig {
		t.Fatalf("different quotes for the same request: %q vs %q", sig, bobSig)
	}

	r := alice.post("/requests", "/reservations", url.Values{"request": {reqJSON}, "quote_id": {sig}})
	if r.status != http.StatusSeeOther || !strings.HasPrefix(r.location, "/reservations/") {
		t.Fatalf("reserve: %d → %q\n%s", r.status, r.location, r.body)
	}
	resPath := r.location
	mustContain(t, alice.get(resPath).body, "held — awaiting payment", `data-testid="hold-notice"`, "$420.48")

	// Bob loses the race: a clear message and fresh quotes, never a 500.
	r = bob.post("/requests", "/reservations", url.Values{"request": {bobReq}, "quote_id": {bobSig}})
	if r.status != http.StatusConflict {
		t.Fatalf("second booking of the same devices: %d, want 409", r.status)
	}
	mustContain(t, r.body, `data-testid="quotes-message"`, "Here are fresh quotes")
	// The fresh quote starts after Alice's hold: the devices are never shared.
	if _, fresh := firstQuote(t, r.body); fresh == bobSig {
		t.Fatalf("the lost quote %q is offered again", fresh)
	}

	// Another buyer's reservation is not found.
	if r := bob.get(resPath); r.status != http.StatusNotFound {
		t.Fatalf("bob sees alice's reservation: %d", r.status)
	}
	// The provider sees the booking.
	list, err := app.db.ListProviderPieces(context.Background(), offer.ProviderID)
	if err != nil || len(list) != 1 || list[0].Piece.Devices != 8 {
		t.Fatalf("provider pieces: %v %+v", err, list)
	}

	// Cancelling the unpaid hold is free and frees the capacity for Bob.
	r = alice.post(resPath, resPath+"/cancel", url.Values{})
	if r.status != http.StatusSeeOther {
		t.Fatalf("cancel: %d", r.status)
	}
	mustContain(t, alice.get(resPath).body, "cancelled")
	bobReq, bobSig = firstQuote(t, bob.get("/requests?"+trainingQuery().Encode()).body)
	if r := bob.post("/requests", "/reservations", url.Values{"request": {bobReq}, "quote_id": {bobSig}}); r.status != http.StatusSeeOther {
		t.Fatalf("booking after cancellation: %d", r.status)
	}
}

func TestReserveNeedsLoginAndValidQuote(t *testing.T) {
	app := newTestApp(t)
	app.listedOffer("nvidia-h100-80gb-sxm", 8, 1, "us-east-va", 219)
	visitor := app.client()
	page := visitor.get("/requests?" + trainingQuery().Encode()).body
	mustContain(t, page, "Log in to reserve")
	mustNotContain(t, page, `data-testid="reserve"`)

	c := app.client()
	c.signUp("eve@example.com", false)
	reqJSON, _ := firstQuote(t, c.get("/requests?"+trainingQuery().Encode()).body)
	// A tampered piece (more devices than quoted) matches no quote.
	r := c.post("/requests", "/reservations", url.Values{"request": {reqJSON}, "quote_id": {"1:9:0:0:0"}})
	if r.status != http.StatusConflict {
		t.Fatalf("tampered quote: %d, want 409", r.status)
	}
	r = c.post("/requests", "/reservations", url.Values{"request": {"{not json"}, "quote_id": {"x"}})
	if r.status != http.StatusUnprocessableEntity {
		t.Fatalf("malformed request: %d, want 422", r.status)
	}
}

func TestUnpaidHoldLimit(t *testing.T) {
	app := newTestApp(t)
	app.listedOffer("nvidia-h100-80gb-sxm", 8, 8, "us-east-va", 219)
	c := app.client()
	c.signUp("flood@example.com", false)
	for i := 0; i <= market.MaxUnpaidHolds; i++ {
		reqJSON, sig := firstQuote(t, c.get("/requests?"+trainingQuery().Encode()).body)
		r := c.post("/requests", "/reservations", url.Values{"request": {reqJSON}, "quote_id": {sig}})
		want := http.StatusSeeOther
		if i == market.MaxUnpaidHolds {
			want = http.StatusConflict
		}
		if r.status != want {
			t.Fatalf("booking %d: status %d, want %d", i+1, r.status, want)
		}
		if want == http.StatusConflict {
			mustContain(t, r.body, "unpaid")
		}
	}
}

func TestRequestExportUploadAndSave(t *testing.T) {
	app := newTestApp(t)
	c := app.client()
	c.signUp("saver@example.com", false)
	r := c.get("/requests/export?" + trainingQuery().Encode())
	if r.status != http.StatusOK || !strings.Contains(r.body, `"version": 1`) || !strings.Contains(r.body, `"families": [`) {
		t.Fatalf("export: %d %s", r.status, r.body)
	}
	exported := r.body

	upload := func(content string) response {
		var buf bytes.Buffer
		mw := multipart.NewWriter(&buf)
		mw.WriteField("_csrf", c.csrf("/requests"))
		fw, _ := mw.CreateFormFile("request_file", "req.json")
		fw.Write([]byte(content))
		mw.Close()
		resp, err := c.http.Post(app.srv.URL+"/requests/upload", mw.FormDataContentType(), &buf)
		if err != nil {
			t.Fatal(err)
		}
		return read(t, resp)
	}
	r = upload(exported)
	if r.status != http.StatusSeeOther || !strings.Contains(r.location, "constraints.families=H100") {
		t.Fatalf("upload: %d → %q", r.status, r.location)
	}
	r = upload(strings.Replace(exported, `"devices": 8`, `"devices": 8, "gpus": 3`, 1))
	if r.status != http.StatusUnprocessableEntity {
		t.Fatalf("unknown field: %d", r.status)
	}
	mustContain(t, r.body, `data-testid="error-request_file"`, "gpus")

	r = c.post("/requests", "/requests/saved", url.Values{"name": {"h100 finetune"}, "query": {trainingQuery().Encode()}})
	if r.status != http.StatusSeeOther {
		t.Fatalf("save: %d\n%s", r.status, r.body)
	}
	page := c.get("/requests").body
	mustContain(t, page, "h100 finetune")
	m := regexp.MustCompile(`href="(/requests/saved/\d+)"`).FindStringSubmatch(page)
	if m == nil {
		t.Fatal("no saved request link")
	}
	if r := c.get(m[1]); r.status != http.StatusSeeOther || !strings.Contains(r.location, "workload.devices=8") {
		t.Fatalf("open saved: %d → %q", r.status, r.location)
	}
	other := app.client()
	other.signUp("snoop@example.com", false)
	if r := other.get(m[1]); r.status != http.StatusNotFound {
		t.Fatalf("another buyer opened a saved request: %d", r.status)
	}
}
