package web

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// agentPost sends a JSON body to the agent API with a host token, as the
// agent does.
func (a *testApp) agentPost(token, path string, body any) response {
	a.t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		a.t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, a.srv.URL+path, bytes.NewReader(b))
	if err != nil {
		a.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	return read(a.t, resp)
}

// heartbeatBody is a heartbeat as the agent sends it, with n healthy H100s.
func heartbeatBody(seq int64, n int) map[string]any {
	devices := make([]map[string]any, n)
	for i := range devices {
		devices[i] = map[string]any{"index": i, "uuid": fmt.Sprintf("GPU-%04d", i), "name": "NVIDIA H100 80GB HBM3", "memory_mib": 81559,
			"temperature_c": 41, "utilization_pct": 97, "ecc_uncorrected": 0, "power_w": 612.5, "healthy": true}
	}
	return map[string]any{"seq": seq, "sent_at": "2026-12-01T10:00:00Z", "agent_version": "1.0.0", "probe": "simulate", "devices": devices, "error": ""}
}

type heartbeatReply struct {
	Accepted        bool      `json:"accepted"`
	ServerTime      time.Time `json:"server_time"`
	IntervalSeconds int       `json:"interval_seconds"`
	Assignments     []struct {
		ReservationID int64     `json:"reservation_id"`
		PieceID       int64     `json:"piece_id"`
		Devices       int       `json:"devices"`
		Start         time.Time `json:"start"`
		End           time.Time `json:"end"`
		SSHUser       string    `json:"ssh_user"`
		SSHKeys       []string  `json:"ssh_keys"`
		Acceptance    bool      `json:"acceptance"`
		State         string    `json:"state"`
	} `json:"assignments"`
}

// beat sends a heartbeat and decodes the reply; it fails the test unless
// the status is 200.
func (a *testApp) beat(token string, body map[string]any) heartbeatReply {
	a.t.Helper()
	r := a.agentPost(token, "/agent/v1/heartbeat", body)
	if r.status != http.StatusOK {
		a.t.Fatalf("heartbeat: %d %s", r.status, r.body)
	}
	var out heartbeatReply
	if err := json.Unmarshal([]byte(r.body), &out); err != nil {
		a.t.Fatalf("heartbeat reply %q: %v", r.body, err)
	}
	return out
}

var newHostTokenRe = regexp.MustCompile(`data-testid="new-host-token"[\s\S]*?<div class="mono"[^>]*>(gph_[A-Za-z0-9_-]{43})</div>`)

// createHostToken creates a node's token on the hosts page as the provider
// does and returns the raw token the page shows once.
func createHostToken(t *testing.T, prov *client, offerID int64, node int) string {
	t.Helper()
	r := prov.post("/provider/hosts", "/provider/hosts/tokens", url.Values{"offer_id": {itoa(offerID)}, "node": {strconv.Itoa(node)}})
	if r.status != http.StatusSeeOther || r.location != "/provider/hosts" {
		t.Fatalf("create host token: %d → %q\n%s", r.status, r.location, r.body)
	}
	page := prov.get("/provider/hosts").body
	m := newHostTokenRe.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("the new host token is not on the page:\n%s", page)
	}
	if again := prov.get("/provider/hosts").body; strings.Contains(again, m[1]) || strings.Contains(again, `data-testid="new-host-token"`) {
		t.Fatal("the host token is shown twice")
	}
	return m[1]
}

// twoNodeOffer lists, for a signed-up provider, an offer of two nodes of 8
// H100s.
func (a *billingApp) twoNodeOffer(providerID int64) market.Offer {
	a.t.Helper()
	return a.ownOfferTerms(providerID, func(o *market.Offer) {
		o.Nodes, o.NetworkID, o.Title = 2, "ethernet-100", "Two nodes of H100"
	})
}

// hostBlock returns the markup of one node's row on the hosts page.
func hostBlock(t *testing.T, page string, offerID int64, node int) string {
	t.Helper()
	i := strings.Index(page, fmt.Sprintf(`data-offer-id="%d"`, offerID))
	if i < 0 {
		t.Fatalf("offer %d not on the hosts page", offerID)
	}
	page = page[i:]
	j := strings.Index(page, fmt.Sprintf(`data-testid="host-node" data-node="%d"`, node))
	if j < 0 {
		t.Fatalf("node %d of offer %d not on the hosts page", node, offerID)
	}
	row := page[j:]
	return row[:strings.Index(row, "</tr>")]
}

func TestHostTokenHeartbeatAndHostsPage(t *testing.T) {
	app := newBillingApp(t)
	prov := app.client()
	prov.signUp("hosts@example.com", true)
	o := app.twoNodeOffer(prov.userID())

	page := prov.get("/provider/hosts")
	if page.status != http.StatusOK {
		t.Fatalf("hosts page: %d", page.status)
	}
	mustContain(t, page.body, "Two nodes of H100", `data-testid="host-node" data-node="0"`, `data-testid="host-node" data-node="1"`, "no agent yet")
	mustContain(t, prov.get("/provider/offers").body, `href="/provider/hosts"`)

	// A node outside the offer: 422 with the message next to the field, the
	// number kept.
	bad := prov.post("/provider/hosts", "/provider/hosts/tokens", url.Values{"offer_id": {itoa(o.ID)}, "node": {"2"}})
	if bad.status != http.StatusUnprocessableEntity {
		t.Fatalf("node 2: %d", bad.status)
	}
	mustContain(t, bad.body, `data-testid="node-error"`, "Choose a node between 0 and 1.", `value="2"`)

	token := createHostToken(t, prov, o.ID, 1)
	mustContain(t, hostBlock(t, prov.get("/provider/hosts").body, o.ID, 1), token[:8]+"…", "Replace token", "Revoke")

	// Heartbeats: accepted, then a replay changes nothing.
	rep := app.beat(token, heartbeatBody(1, 8))
	if !rep.Accepted || rep.IntervalSeconds != 10 || !rep.ServerTime.Equal(testNow) || rep.Assignments == nil || len(rep.Assignments) != 0 {
		t.Fatalf("first heartbeat: %+v", rep)
	}
	row := hostBlock(t, prov.get("/provider/hosts").body, o.ID, 1)
	mustContain(t, row, `data-testid="host-status">online<`, "8 of 8 devices healthy", "last heartbeat "+market.FormatTime(testNow),
		"NVIDIA H100 80GB HBM3", "agent 1.0.0, probe simulate")
	mustNotContain(t, row, `data-testid="host-differs"`)
	mustContain(t, hostBlock(t, prov.get("/provider/hosts").body, o.ID, 0), "no agent yet")

	app.clock.set(testNow.Add(10 * time.Second))
	sick := heartbeatBody(1, 8)
	sick["devices"].([]map[string]any)[2]["healthy"] = false
	if rep := app.beat(token, sick); rep.Accepted {
		t.Fatal("a replayed heartbeat was accepted")
	}
	mustContain(t, hostBlock(t, prov.get("/provider/hosts").body, o.ID, 1), "8 of 8 devices healthy")
	sick["seq"] = 2
	if rep := app.beat(token, sick); !rep.Accepted {
		t.Fatal("heartbeat 2 refused")
	}
	mustContain(t, hostBlock(t, prov.get("/provider/hosts").body, o.ID, 1), "7 of 8 devices healthy", "<strong>unhealthy</strong>")

	// Offline after the grace period without heartbeats.
	app.clock.set(testNow.Add(72 * time.Second))
	mustContain(t, hostBlock(t, prov.get("/provider/hosts").body, o.ID, 1), `data-testid="host-status">offline<`)

	// Bad requests: no token, a garbage token, malformed JSON, a bad seq.
	for _, tok := range []string{"", "gph_nope", "gpm_" + token[4:]} {
		if r := app.agentPost(tok, "/agent/v1/heartbeat", heartbeatBody(9, 8)); r.status != http.StatusUnauthorized || !strings.Contains(r.body, `"code":"unauthorized"`) {
			t.Errorf("token %q: %d %s", tok, r.status, r.body)
		}
	}
	if r := app.agentPost(token, "/agent/v1/heartbeat", map[string]any{"seq": "x"}); r.status != http.StatusBadRequest {
		t.Errorf("malformed heartbeat: %d %s", r.status, r.body)
	}
	if r := app.agentPost(token, "/agent/v1/heartbeat", heartbeatBody(0, 8)); r.status != http.StatusBadRequest || !strings.Contains(r.body, `"seq"`) {
		t.Errorf("seq 0: %d %s", r.status, r.body)
	}

	// Another provider can neither create nor revoke this offer's tokens.
	other := app.client()
	other.signUp("other-host@example.com", true)
	if r := other.post("/provider/hosts", "/provider/hosts/tokens", url.Values{"offer_id": {itoa(o.ID)}, "node": {"0"}}); r.status != http.StatusNotFound {
		t.Errorf("another provider's token: %d", r.status)
	}
	mustNotContain(t, other.get("/provider/hosts").body, "Two nodes of H100")
	tokID := liveHostTokenID(t, app.testApp, prov.userID(), o.ID, 1)
	if r := other.post("/provider/hosts", fmt.Sprintf("/provider/hosts/tokens/%d/revoke", tokID), url.Values{}); r.status != http.StatusNotFound {
		t.Errorf("another provider's revocation: %d", r.status)
	}
	if rep := app.beat(token, heartbeatBody(3, 8)); !rep.Accepted {
		t.Fatal("token stopped working after another provider's attempt")
	}

	// A replacement revokes the old token at once; so does a revocation.
	token2 := createHostToken(t, prov, o.ID, 1)
	if r := app.agentPost(token, "/agent/v1/heartbeat", heartbeatBody(4, 8)); r.status != http.StatusUnauthorized || !strings.Contains(r.body, "revoked") {
		t.Errorf("replaced token: %d %s", r.status, r.body)
	}
	if rep := app.beat(token2, heartbeatBody(4, 8)); !rep.Accepted {
		t.Fatal("the new token's heartbeat was refused")
	}
	if r := prov.post("/provider/hosts", fmt.Sprintf("/provider/hosts/tokens/%d/revoke", liveHostTokenID(t, app.testApp, prov.userID(), o.ID, 1)), url.Values{}); r.status != http.StatusSeeOther {
		t.Fatalf("revoke: %d", r.status)
	}
	if r := app.agentPost(token2, "/agent/v1/heartbeat", heartbeatBody(5, 8)); r.status != http.StatusUnauthorized {
		t.Errorf("revoked token: %d %s", r.status, r.body)
	}
	mustContain(t, hostBlock(t, prov.get("/provider/hosts").body, o.ID, 1), "No live token.")

	// A suspended provider's token is refused.
	token3 := createHostToken(t, prov, o.ID, 0)
	if _, err := app.db.SuspendProvider(context.Background(), adminID(t, app.testApp), prov.userID(), "test", testNow); err != nil {
		t.Fatal(err)
	}
	if r := app.agentPost(token3, "/agent/v1/heartbeat", heartbeatBody(1, 8)); r.status != http.StatusUnauthorized {
		t.Errorf("suspended provider's token: %d %s", r.status, r.body)
	}
}

// liveHostTokenID returns the id of a node's live host token.
func liveHostTokenID(t *testing.T, app *testApp, providerID, offerID int64, node int) int64 {
	t.Helper()
	offers, err := app.db.ListProviderHosts(context.Background(), providerID, testNow)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range offers {
		for _, n := range o.Nodes {
			if o.Offer.ID == offerID && n.Node == node && n.Token.ID != 0 {
				return n.Token.ID
			}
		}
	}
	t.Fatalf("no live token for node %d of offer %d", node, offerID)
	return 0
}

// adminID returns the id of an admin account created for the test.
func adminID(t *testing.T, app *testApp) int64 {
	t.Helper()
	ctx := context.Background()
	if u, _, err := app.db.FindUserByEmail(ctx, "hosts-admin@example.com"); err == nil {
		return u.ID
	}
	u, err := app.db.CreateUser(ctx, market.User{Email: "hosts-admin@example.com", DisplayName: "Admin"}, []byte("x"), testNow)
	if err != nil {
		t.Fatal(err)
	}
	if err := app.makeAdmin(ctx, u.ID, true); err != nil {
		t.Fatal(err)
	}
	return u.ID
}

func TestHardwareDiffersIsFlaggedToAdmins(t *testing.T) {
	app := newBillingApp(t)
	prov := app.client()
	prov.signUp("differs@example.com", true)
	o := app.twoNodeOffer(prov.userID())
	token := createHostToken(t, prov, o.ID, 0)

	admin := app.client()
	admin.signUp("differs-admin@example.com", false)
	if err := app.makeAdmin(context.Background(), admin.userID(), true); err != nil {
		t.Fatal(err)
	}
	mustContain(t, admin.get("/admin/hosts").body, `data-testid="differs-none"`)

	// Seven devices of another model: flagged for the admins and shown to
	// the provider.
	body := heartbeatBody(1, 7)
	body["devices"].([]map[string]any)[0]["name"] = "NVIDIA A100-SXM4-80GB"
	app.beat(token, body)
	want := `Node 0 reports 7 devices; the listing has 8 per node; device 0 is &#34;NVIDIA A100-SXM4-80GB&#34;, not NVIDIA H100 80GB SXM.`
	page := admin.get("/admin/hosts").body
	mustContain(t, page, `data-testid="host-differs-row"`, "Two nodes of H100", want)
	mustContain(t, hostBlock(t, prov.get("/provider/hosts").body, o.ID, 0), `data-testid="host-differs"`, want)
	// An edited offer waiting for review carries the red flag.
	if err := app.db.ReviewOffer(context.Background(), o.ID, market.ReviewPending, "", testNow); err != nil {
		t.Fatal(err)
	}
	review := admin.get("/admin/offers").body
	mustContain(t, review, `data-flag="hardware_differs"`, "Hardware differs from listing", want)
	// Only admins see the admin page.
	if r := prov.get("/admin/hosts"); r.status != http.StatusForbidden {
		t.Errorf("provider on /admin/hosts: %d", r.status)
	}

	// A matching heartbeat clears it.
	app.beat(token, heartbeatBody(2, 8))
	mustContain(t, admin.get("/admin/hosts").body, `data-testid="differs-none"`)
	mustNotContain(t, admin.get("/admin/offers").body, `data-flag="hardware_differs"`)
}

// TestAgentReportedSharedHostUserIsShownOnTheOffer: an agent that gives each
// rental its own Unix user changes nothing buyers see; one node whose agent
// says every renter is the same user makes the offer's page and card say
// "shared host user", though the provider did not declare it, and the hosts
// page says how each node keeps renters apart.
func TestAgentReportedSharedHostUserIsShownOnTheOffer(t *testing.T) {
	app := newBillingApp(t)
	prov := app.client()
	prov.signUp("isolation@example.com", true)
	o := app.twoNodeOffer(prov.userID())
	if o.Containers.SharedHostUser {
		t.Fatal("the test offer declares a shared host user already")
	}
	buyer := app.client()
	card := func() string {
		t.Helper()
		page := buyer.get("/").body
		i := strings.Index(page, fmt.Sprintf(`data-testid="offer-card" data-offer-id="%d"`, o.ID))
		if i < 0 {
			t.Fatalf("offer %d is not in the catalogue", o.ID)
		}
		c := page[i:]
		return c[:strings.Index(c, "</article>")]
	}
	offerPath := fmt.Sprintf("/offers/%d", o.ID)

	isolated := heartbeatBody(1, 8)
	isolated["isolation"] = "rental_users"
	app.beat(createHostToken(t, prov, o.ID, 0), isolated)
	mustContain(t, hostBlock(t, prov.get("/provider/hosts").body, o.ID, 0), "renters: a Unix user per rental")
	mustNotContain(t, card(), "card-shared-host-user")
	mustNotContain(t, buyer.get(offerPath).body, "shared host user")

	shared := heartbeatBody(1, 8)
	shared["isolation"] = "shared_user"
	app.beat(createHostToken(t, prov, o.ID, 1), shared)
	mustContain(t, hostBlock(t, prov.get("/provider/hosts").body, o.ID, 1), "renters: shared host user")
	mustContain(t, card(), `data-testid="card-shared-host-user"`, "shared host user")
	mustContain(t, buyer.get(offerPath).body, "No buyer containers; shared host user")

	// An agent of a newer version naming a mode this server does not know
	// is not refused; the node counts as not reported.
	newer := heartbeatBody(2, 8)
	newer["isolation"] = "microvm"
	if rep := app.beat(createHostToken(t, prov, o.ID, 1), newer); !rep.Accepted {
		t.Fatal("a heartbeat with an unknown isolation mode was refused")
	}
	mustContain(t, hostBlock(t, prov.get("/provider/hosts").body, o.ID, 1), "renters: not reported")
	mustNotContain(t, card(), "card-shared-host-user")
}
