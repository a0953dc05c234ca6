package web

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
)

// adminClient signs up an account and makes it an admin.
func (a *testApp) adminClient(email string) *client {
	a.t.Helper()
	c := a.client()
	c.signUp(email, false)
	if err := a.makeAdmin(context.Background(), c.userID(), true); err != nil {
		a.t.Fatal(err)
	}
	return c
}

// suspend has an admin suspend an account the audited way, through the
// admin page.
func (a *testApp) suspend(userID int64) {
	a.t.Helper()
	admin := a.adminClient(fmt.Sprintf("suspender%d@example.com", userID))
	r := admin.post("/admin/providers", fmt.Sprintf("/admin/providers/%d/suspend", userID), url.Values{"reason": {"Test suspension"}})
	if r.status != http.StatusSeeOther {
		a.t.Fatalf("suspend %d: %d\n%s", userID, r.status, r.body)
	}
}

var routeParam = regexp.MustCompile(`:[a-z_]+`)

// Every route under /admin answers 403 to a signed-in non-admin (buyer or
// provider) and sends a visitor to log in — found by walking the route
// table, so a new admin route cannot be left unprotected. No route may
// edit or delete the audit trail, and no admin handler lives outside
// /admin.
func TestEveryAdminRouteRefusesNonAdmins(t *testing.T) {
	app := newTestApp(t)
	e := app.srv.Config.Handler.(*echo.Echo)
	buyer := app.client()
	buyer.signUp("buyer@example.com", false)
	provider := app.client()
	provider.signUp("provider@example.com", true)
	visitor := app.client()

	var admin int
	for _, r := range e.Routes() {
		if strings.Contains(r.Name, "handleAdmin") && !strings.HasPrefix(r.Path, "/admin/") {
			t.Errorf("admin handler %s is served at %s, outside /admin/", r.Name, r.Path)
		}
		if strings.HasPrefix(r.Path, "/admin/audit") && r.Method != http.MethodGet {
			t.Errorf("%s %s would change the audit trail; it must be read-only", r.Method, r.Path)
		}
		if r.Path != "/admin" && !strings.HasPrefix(r.Path, "/admin/") || r.Method == echo.RouteNotFound {
			continue
		}
		admin++
		path := routeParam.ReplaceAllString(r.Path, "1")
		for name, c := range map[string]*client{"buyer": buyer, "provider": provider} {
			var resp response
			switch r.Method {
			case http.MethodGet:
				resp = c.get(path)
			case http.MethodPost:
				resp = c.post("/account", path, url.Values{"decision": {"approved"}, "note": {"x"}, "reason": {"x"}})
			default:
				t.Errorf("%s %s: admin routes are GET or POST (forms)", r.Method, r.Path)
				continue
			}
			if resp.status != http.StatusForbidden {
				t.Errorf("%s %s as %s: status %d, want 403", r.Method, r.Path, name, resp.status)
			}
		}
		if r.Method == http.MethodGet {
			if resp := visitor.get(path); resp.status != http.StatusSeeOther || !strings.HasPrefix(resp.location, "/login") {
				t.Errorf("GET %s as a visitor: status %d to %q, want 303 to log in", r.Path, resp.status, resp.location)
			}
		}
	}
	if admin < 8 {
		t.Fatalf("found %d admin routes; the walk is not seeing the route table", admin)
	}
}

func TestModerationQueueFlagsDecisionsAndNotifications(t *testing.T) {
	app := newTestApp(t)
	prov := app.client()
	prov.signUp("gpus@example.com", true)
	form := validOfferForm()
	form.Set("figure_bf16_tflops_value", "1500") // the H100 SXM's published peak is 989
	form.Set("figure_bf16_tflops_basis", "estimated")
	form.Set("figure_bf16_tflops_method", "our own benchmark")
	form.Set("figures_confirmed", "1") // warned on the form, submitted anyway
	id := prov.createOffer(form)

	admin := app.adminClient("root@example.com")
	queue := admin.get("/admin/offers")
	mustContain(t, queue.body, `data-flag="figure_above_catalogue"`, "Figure above the catalogue", "1,500 TFLOPS BF16", "published peak is 989", `data-testid="provider-record"`)

	// Asking for changes needs a reason; with one, the provider sees it.
	r := admin.post("/admin/offers", "/admin/offers/"+itoa(id)+"/review", url.Values{"decision": {"changes_requested"}})
	if r.status != http.StatusSeeOther {
		t.Fatalf("changes without a reason: %d", r.status)
	}
	mustContain(t, admin.get("/admin/offers").body, "Give the provider a reason")
	r = admin.post("/admin/offers", "/admin/offers/"+itoa(id)+"/review", url.Values{"decision": {"changes_requested"}, "note": {"Show how you measured 1500 TFLOPS."}})
	if r.status != http.StatusSeeOther {
		t.Fatalf("ask for changes: %d %s", r.status, r.body)
	}
	mine := prov.get("/provider/offers").body
	mustContain(t, mine, "changes requested", "Show how you measured 1500 TFLOPS.")
	mustContain(t, mine, `data-testid="unread-count">1<`)
	notes := prov.get("/notifications").body
	mustContain(t, notes, `data-kind="listing_changes_requested"`, "Show how you measured 1500 TFLOPS.", `data-unread="true"`)
	if r := prov.post("/notifications", "/notifications/read", url.Values{}); r.status != http.StatusSeeOther {
		t.Fatalf("mark read: %d", r.status)
	}
	notes = prov.get("/notifications").body
	mustContain(t, notes, `data-unread="false"`)
	mustNotContain(t, notes, `data-testid="unread-count"`)

	// The provider fixes the figure; the admin verifies another and approves.
	form.Set("figure_bf16_tflops_value", "950")
	if r := prov.post("/provider/offers/"+itoa(id)+"/edit", "/provider/offers/"+itoa(id), form); r.status != http.StatusSeeOther {
		t.Fatalf("resubmit: %d %s", r.status, r.body)
	}
	queue = admin.get("/admin/offers")
	mustNotContain(t, queue.body, `data-flag="figure_above_catalogue"`)
	if r := admin.post("/admin/offers", "/admin/offers/"+itoa(id)+"/verify", url.Values{"kind": {"allreduce_busbw"}, "note": {"Ran nccl-tests ourselves, 372 GB/s"}}); r.status != http.StatusSeeOther {
		t.Fatalf("verify: %d %s", r.status, r.body)
	}
	if r := admin.post("/admin/offers", "/admin/offers/"+itoa(id)+"/review", url.Values{"decision": {"approved"}}); r.status != http.StatusSeeOther {
		t.Fatalf("approve: %d", r.status)
	}
	page := app.client().get("/offers/" + itoa(id)).body
	mustContain(t, page, "Verified: Ran nccl-tests ourselves, 372 GB/s", `data-testid="offer-reliability"`, "95%")
	mustContain(t, app.client().get("/").body, `data-testid="card-reliability"`)

	audit := admin.get("/admin/audit").body
	mustContain(t, audit, store.AuditOfferRequestChanges, store.AuditFigureVerify, store.AuditOfferApprove, `{&#34;review&#34;:&#34;approved&#34;}`)
	filtered := admin.get("/admin/audit?action=" + store.AuditFigureVerify).body
	mustContain(t, filtered, "1 entry<")
	mustNotContain(t, filtered, `data-action="`+store.AuditOfferRequestChanges+`"`)
	if r := admin.get("/admin/audit?from=yesterday"); r.status != http.StatusUnprocessableEntity {
		t.Errorf("bad date filter: %d, want 422", r.status)
	}
}

// seedCleanRecord gives a provider a clean track record: three approved
// offers and five delivered bookings.
func (a *testApp) seedCleanRecord(providerID int64) {
	a.t.Helper()
	ctx := context.Background()
	buyer, err := a.db.CreateUser(ctx, market.User{Email: "seed-buyer@example.com", DisplayName: "Seed", IsBuyer: true}, []byte("x"), testNow)
	if err != nil {
		a.t.Fatal(err)
	}
	var offers []market.Offer
	for range 3 {
		o := market.Offer{
			ProviderID: providerID, Title: "Seed", AcceleratorID: "nvidia-a100-80gb-sxm", MemoryGB: 80, DevicesPerNode: 8, Nodes: 1,
			Interconnect: market.InterconnectNVLink, NetworkID: "none", CPUCores: 32, RAMGB: 256, StorageGB: 1000,
			DriverVersion: "550.90", CUDAVersion: "12.4", OSImage: "Ubuntu", ContainerRuntime: "Docker", RegionID: "us-east-va",
			AvailableFrom: testNow.AddDate(0, -2, 0), AvailableUntil: testNow.AddDate(0, 1, 0), MinRentalHours: 1, MaxRentalHours: 720,
			PriceCentsPerDeviceHour: 150, BillingBasis: market.BillingWallClock, UptimeBP: 9950, CreditCapBP: 10000,
		}
		o, err := a.db.CreateOffer(ctx, o, testNow)
		if err != nil {
			a.t.Fatal(err)
		}
		if err := a.db.ReviewOffer(ctx, o.ID, market.ReviewApproved, "", testNow); err != nil {
			a.t.Fatal(err)
		}
		offers = append(offers, o)
	}
	past := testNow.AddDate(0, -1, 0)
	for i := range 5 {
		start := past.Add(time.Duration(i) * 24 * time.Hour)
		p := market.ReservationPiece{OfferID: offers[0].ID, Devices: 8, Start: start, End: start.Add(4 * time.Hour), PriceCents: 150, AmountCents: 150 * 32}
		r, err := a.db.CreateReservation(ctx, buyer.ID, []market.ReservationPiece{p}, `{}`, start.Add(-time.Hour), time.Hour)
		if err != nil {
			a.t.Fatal(err)
		}
		if _, err := a.db.ConfirmReservation(ctx, r.ID, start.Add(-time.Hour)); err != nil {
			a.t.Fatal(err)
		}
	}
	if _, err := a.db.AdvanceReservations(ctx, testNow); err != nil {
		a.t.Fatal(err)
	}
}

func TestCleanTrackRecordSkipsTheQueueUnlessFlagged(t *testing.T) {
	app := newTestApp(t)
	prov := app.client()
	prov.signUp("trusted@example.com", true)
	app.seedCleanRecord(prov.userID())

	r := prov.post("/provider/offers/new", "/provider/offers", validOfferForm())
	if r.status != http.StatusSeeOther {
		t.Fatalf("create: %d", r.status)
	}
	mustContain(t, prov.get("/provider/offers").body, "approved automatically")
	offers, _ := app.db.ListProviderOffers(context.Background(), prov.userID())
	if !offers[0].Listed() {
		t.Fatalf("a clean provider's unflagged offer is %s, want approved", offers[0].Review)
	}
	entries, _, _ := app.db.ListAudit(context.Background(), store.AuditFilter{Action: store.AuditOfferAutoApprove})
	if len(entries) != 1 || entries[0].SubjectID != offers[0].ID {
		t.Errorf("auto-approval audit: %+v", entries)
	}

	// 48 devices is more than four times the 8 the provider has delivered.
	flagged := validOfferForm()
	flagged.Set("title", "Big cluster")
	flagged.Set("nodes", "6")
	flagged.Set("network", "infiniband-400")
	prov.post("/provider/offers/new", "/provider/offers", flagged)
	offers, _ = app.db.ListProviderOffers(context.Background(), prov.userID())
	if offers[0].Title != "Big cluster" || offers[0].Review != market.ReviewPending {
		t.Fatalf("a flagged offer of a clean provider: %q %s, want pending", offers[0].Title, offers[0].Review)
	}
	admin := app.adminClient("root@example.com")
	mustContain(t, admin.get("/admin/offers").body, `data-flag="capacity_above_history"`)
	mustContain(t, admin.get("/admin/providers").body, "clean track record")
}

func TestSuspensionTakesEffectAtOnce(t *testing.T) {
	app := newTestApp(t)
	ctx := context.Background()
	prov := app.client()
	prov.signUp("shady@example.com", true)
	token := prov.createToken("ci", "write")
	provID := prov.userID()
	id := prov.createOffer(validOfferForm())
	admin := app.adminClient("root@example.com")
	admin.post("/admin/offers", "/admin/offers/"+itoa(id)+"/review", url.Values{"decision": {"approved"}})
	if app.handler.wf.Index().Len() != 1 {
		t.Fatalf("index holds %d offers before suspension, want 1", app.handler.wf.Index().Len())
	}
	if r := app.apiCall(http.MethodGet, "/api/v1/provider/offers", token, ""); r.status != http.StatusOK {
		t.Fatalf("API before suspension: %d", r.status)
	}
	mustContain(t, app.client().get("/").body, "8× H100 SXM, Oregon")

	r := admin.post("/admin/providers", "/admin/providers/"+itoa(provID)+"/suspend", url.Values{"reason": {"Hardware not as listed"}})
	if r.status != http.StatusSeeOther {
		t.Fatalf("suspend: %d %s", r.status, r.body)
	}
	// The provider's open browser session is over at its next request.
	if r := prov.get("/provider/offers"); r.status != http.StatusSeeOther || !strings.HasPrefix(r.location, "/login") {
		t.Errorf("suspended provider's session: %d to %q, want 303 to log in", r.status, r.location)
	}
	if r := prov.login("shady@example.com", testPassword, "/"); r.status == http.StatusSeeOther {
		t.Errorf("a suspended provider logged in again")
	}
	// The API token is refused at once.
	if r := app.apiCall(http.MethodGet, "/api/v1/provider/offers", token, ""); r.status != http.StatusUnauthorized {
		t.Errorf("API after suspension: %d, want 401", r.status)
	}
	// The offer is gone from the catalogue, its page and the matcher.
	mustNotContain(t, app.client().get("/").body, "8× H100 SXM, Oregon")
	if r := app.client().get("/offers/" + itoa(id)); r.status != http.StatusNotFound {
		t.Errorf("suspended provider's offer page: %d, want 404", r.status)
	}
	if app.handler.wf.Index().Len() != 0 {
		t.Errorf("index holds %d offers after suspension", app.handler.wf.Index().Len())
	}
	// A reload of the index (as the background loop does) keeps it out.
	if err := app.handler.wf.ReloadIndex(ctx); err != nil {
		t.Fatal(err)
	}
	if n := app.handler.wf.Index().Len(); n != 0 {
		t.Errorf("reloaded index: %d offers, want 0", n)
	}
	mustContain(t, admin.get("/admin/providers").body, "Hardware not as listed", `data-testid="provider-status">suspended`)
	mustContain(t, admin.get("/admin/audit?action="+store.AuditProviderSuspend).body, "Hardware not as listed")

	if r := admin.post("/admin/providers", "/admin/providers/"+itoa(provID)+"/reinstate", url.Values{}); r.status != http.StatusSeeOther {
		t.Fatalf("reinstate: %d", r.status)
	}
	if app.handler.wf.Index().Len() != 1 {
		t.Errorf("index holds %d offers after reinstating, want 1", app.handler.wf.Index().Len())
	}
	mustContain(t, app.client().get("/").body, "8× H100 SXM, Oregon")
}
