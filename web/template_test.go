package web

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// containerOffer is a listed offer whose host runs buyer containers.
func (a *testApp) containerOffer(region string, cents market.Cents) market.Offer {
	a.t.Helper()
	o := a.listedOffer("nvidia-h100-80gb-sxm", 8, 1, region, cents)
	o.Containers = market.ContainerSupport{Engine: market.EnginePodman, CDI: true}
	ctx := context.Background()
	if _, _, err := a.db.UpdateOffer(ctx, o.ProviderID, o, testNow); err != nil {
		a.t.Fatal(err)
	}
	if err := a.db.ReviewOffer(ctx, o.ID, market.ReviewApproved, "", testNow); err != nil {
		a.t.Fatal(err)
	}
	a.handler.wf.RefreshOffer(ctx, o.ID)
	return o
}

// Templates: messages next to each bad field (422, nothing saved); a
// saved template lists its author and use count and never its secret;
// picked on the request form it fills the environment, quotes only
// offers that run containers (the others counted in the explanation),
// and booking from it counts one use.
func TestTemplatesAndTheRequestFormsEnvironment(t *testing.T) {
	a := newTestApp(t)
	a.listedOffer("nvidia-h100-80gb-sxm", 8, 1, "us-west-or", 200) // cheaper, but no containers
	buyer := a.client()
	buyer.signUp("ada@example.com", false)

	r := buyer.post("/templates", "/templates", url.Values{"name": {"Train"}, "runtime.image": {"Not An Image"},
		"runtime.launch": {"ssh"}, "runtime.ports": {"22, 6006"}, "runtime.env": {"1BAD=x"}})
	if r.status != http.StatusUnprocessableEntity {
		t.Fatalf("invalid template: status %d", r.status)
	}
	for field, want := range map[string]string{"runtime.image": "not an image reference", "runtime.ports": "Port 22 is reserved",
		"runtime.env": `"1BAD" is not a variable name`} {
		if got := errorText(r.body, field); !strings.Contains(got, want) {
			t.Errorf("error next to %s: %q, want %q", field, got, want)
		}
	}
	if strings.Contains(buyer.get("/templates").body, `data-testid="template-row"`) {
		t.Fatal("an invalid template was saved")
	}

	const secret = "hf_topsecret_value"
	r = buyer.post("/templates", "/templates", url.Values{"name": {"Train"}, "description": {"my image"}, "public": {"1"},
		"runtime.image": {"docker.io/pytorch/pytorch:2.3.1"}, "runtime.launch": {"ssh"}, "runtime.ports": {"6006"},
		"runtime.env": {"MODE=train"}, "secrets": {"HF_TOKEN=" + secret}})
	if r.status != http.StatusSeeOther {
		t.Fatalf("save template: status %d\n%s", r.status, r.body)
	}
	page := buyer.get("/templates").body
	mustContain(t, page, "Train", "docker.io/pytorch/pytorch:2.3.1", "Secrets: HF_TOKEN")
	mustNotContain(t, page, secret)
	if got := testidText(page, "template-author"); got != "Tester ada@example.com" {
		t.Errorf("author %q", got)
	}
	if got := testidText(page, "template-used-by"); got != "0" {
		t.Errorf("used by %q, want 0", got)
	}
	id := regexp.MustCompile(`data-testid="template-row" data-id="(\d+)"`).FindStringSubmatch(page)[1]

	other := a.client()
	other.signUp("bob@example.com", false)
	mustContain(t, other.get("/templates").body, "Train") // public
	if r := other.post("/templates", "/templates/"+id+"/delete", url.Values{}); r.status != http.StatusNotFound {
		t.Errorf("another user deleted the template: %d", r.status)
	}

	// Picking the template fills the form; with no offer that runs
	// containers, the explanation says so; then only the one that does is
	// quoted.
	q := trainingQuery()
	q.Set("runtime.template", id)
	page = buyer.get("/requests?" + q.Encode()).body
	mustContain(t, page, `value="docker.io/pytorch/pytorch:2.3.1"`)
	if got := testidText(page, "explanation"); got != "0 of 1 offers fit: 1 do not run containers" {
		t.Errorf("explanation %q", got)
	}
	withContainers := a.containerOffer("us-east-va", 300)
	page = buyer.get("/requests?" + q.Encode()).body
	mustNotContain(t, page, secret)
	reqJSON, quoteID := firstQuote(t, page)
	if strings.Contains(reqJSON, secret) || !strings.Contains(reqJSON, `"template": `+id) {
		t.Fatalf("the quote's request JSON: %s", reqJSON)
	}
	req, err := market.DecodeRequestJSON([]byte(reqJSON))
	if err != nil || req.Runtime.Image != "docker.io/pytorch/pytorch:2.3.1" {
		t.Fatalf("request %+v %v", req.Runtime, err)
	}
	r = buyer.post("/requests", "/reservations", url.Values{"request": {reqJSON}, "quote_id": {quoteID}})
	if r.status != http.StatusSeeOther {
		t.Fatalf("reserve: status %d\n%s", r.status, r.body)
	}
	if got := testidText(buyer.get("/templates").body, "template-used-by"); got != "1" {
		t.Errorf("used by %q after a booking, want 1", got)
	}
	list, err := a.db.ListBuyerReservations(context.Background(), buyer.userID())
	if err != nil || len(list) != 1 || list[0].Pieces[0].OfferID != withContainers.ID {
		t.Fatalf("reservations %+v %v, want one on the container offer", list, err)
	}
	rt, err := a.db.FindReservationRuntime(context.Background(), buyer.userID(), list[0].ID)
	if err != nil || rt.Image != "docker.io/pytorch/pytorch:2.3.1" || len(rt.MissingSecrets()) != 1 {
		t.Fatalf("the reservation's runtime %+v %v: want the image and HF_TOKEN kept (its value not shown)", rt, err)
	}

	// The form's own messages: a bad image and a reserved port, 422.
	q = trainingQuery()
	q.Set("runtime.image", "UPPER/case")
	q.Set("runtime.ports", "8888")
	r = buyer.get("/requests?" + q.Encode())
	if r.status != http.StatusUnprocessableEntity || !strings.Contains(errorText(r.body, "runtime.image"), "not an image reference") ||
		!strings.Contains(errorText(r.body, "runtime.ports"), "8888 is reserved") {
		t.Fatalf("bad runtime on the form: %d %q %q", r.status, errorText(r.body, "runtime.image"), errorText(r.body, "runtime.ports"))
	}
}

// errorText is the message shown next to a field.
func errorText(body, field string) string {
	return html.UnescapeString(testidText(body, "error-"+field))
}

// An agent is told a piece's runtime and device indices before the start
// (prepare) and at it (install); a container that cannot be made ready
// opens one host failure incident over the rest of the rental, reported
// by the agent and applied at once, and the buyer reads why.
func TestContainerFailureOpensAnIncident(t *testing.T) {
	app := newBillingApp(t)
	prov := app.client()
	prov.signUp("boxes@example.com", true)
	o := app.twoNodeOffer(prov.userID())
	o.Containers = market.ContainerSupport{Engine: market.EngineDocker, CDI: true}
	ctx := context.Background()
	if _, _, err := app.db.UpdateOffer(ctx, o.ProviderID, o, testNow); err != nil {
		t.Fatal(err)
	}
	if err := app.db.ReviewOffer(ctx, o.ID, market.ReviewApproved, "", testNow); err != nil {
		t.Fatal(err)
	}
	app.handler.wf.RefreshOffer(ctx, o.ID)
	buyer := app.client()
	buyer.signUp("boxbuyer@example.com", false)
	addSSHKey(t, buyer, publicKeyLine(t, "ed25519"))
	q := trainingQuery()
	q.Set("runtime.image", "docker.io/library/ubuntu:22.04")
	q.Set("runtime.env", "MODE=train")
	r := app.bookAndPayQuery(buyer, q)
	p := r.Pieces[0]
	token := createHostToken(t, prov, o.ID, p.Nodes[0].Node)

	type assignment struct {
		PieceID       int64  `json:"piece_id"`
		State         string `json:"state"`
		DeviceIndices []int  `json:"device_indices"`
		Runtime       *struct {
			Image string `json:"image"`
			Env   []struct{ Name, Value string }
		} `json:"runtime"`
	}
	beat := func(seq int64) []assignment {
		res := app.agentPost(token, "/agent/v1/heartbeat", heartbeatBody(seq, 8))
		var out struct{ Assignments []assignment }
		if res.status != http.StatusOK || json.Unmarshal([]byte(res.body), &out) != nil {
			t.Fatalf("heartbeat: %d %s", res.status, res.body)
		}
		return out.Assignments
	}
	app.tick(p.Start.Add(-10 * time.Minute))
	as := beat(1)
	if len(as) != 1 || as[0].State != "prepare" || as[0].Runtime == nil || as[0].Runtime.Image != "docker.io/library/ubuntu:22.04" ||
		fmt.Sprint(as[0].DeviceIndices) != "[0 1 2 3 4 5 6 7]" {
		t.Fatalf("before the start: %+v", as)
	}
	// The pull's progress, as the agent reports it, is on the buyer's page.
	progress := map[string]any{"phase": "pulling", "message": "pulling: 1 of 2 layers seen done, copying 70030d7b3694", "progress": 42}
	if res := app.agentPost(token, fmt.Sprintf("/agent/v1/assignments/%d/container", p.ID), progress); res.status != http.StatusOK {
		t.Fatalf("pulling report: %d %s", res.status, res.body)
	}
	pulling := buyer.get(fmt.Sprintf("/reservations/%d", r.ID)).body
	if got := testidText(pulling, "container-phase"); got != "pulling image… 42 %" {
		t.Errorf("while pulling the page shows %q", got)
	}
	mustContain(t, pulling, "copying 70030d7b3694")
	app.tick(p.Start)
	if as = beat(2); len(as) != 1 || as[0].State != "install" || as[0].Runtime == nil || len(as[0].Runtime.Env) != 1 {
		t.Fatalf("at the start: %+v", as)
	}
	path := fmt.Sprintf("/agent/v1/assignments/%d/container", p.ID)
	failed := map[string]any{"phase": "failed", "message": "the image could not be pulled: manifest unknown"}
	for i := 0; i < 2; i++ { // reported again: still one incident
		if res := app.agentPost(token, path, failed); res.status != http.StatusOK {
			t.Fatalf("container report: %d %s", res.status, res.body)
		}
	}
	incs, err := app.db.ListIncidents(ctx, r.ID)
	if err != nil || len(incs) != 1 {
		t.Fatalf("incidents %+v %v, want one", incs, err)
	}
	in := incs[0]
	if in.Kind != market.IncidentHostFailure || in.ReportedBy != "agent" || !in.Acknowledged || !in.Start.Equal(p.Start) ||
		!in.End.Equal(p.End) || in.DevicesAffected != 8 || !strings.Contains(in.Note, "manifest unknown") {
		t.Fatalf("incident %+v", in)
	}
	page := buyer.get(fmt.Sprintf("/reservations/%d", r.ID)).body
	if got := testidText(page, "container-phase"); got != "failed" {
		t.Errorf("the page shows the container %q", got)
	}
	mustContain(t, page, "manifest unknown")
	if res := app.agentPost(token, path, map[string]any{"phase": "exploded"}); res.status != http.StatusBadRequest {
		t.Errorf("an unknown phase: %d", res.status)
	}

	// A container the agent cannot remove at the end: the provider is
	// told, and the admins see it on their hosts page until it is removed.
	admin := app.client()
	admin.signUp("boxadmin@example.com", false)
	if err := app.makeAdmin(ctx, admin.userID(), true); err != nil {
		t.Fatal(err)
	}
	mustContain(t, admin.get("/admin/hosts").body, `data-testid="remove-failed-none"`)
	app.tick(p.End.Add(time.Minute))
	if res := app.agentPost(token, path, map[string]any{"phase": "remove_failed", "message": "device or resource busy"}); res.status != http.StatusOK {
		t.Fatalf("remove_failed report: %d %s", res.status, res.body)
	}
	hosts := admin.get("/admin/hosts").body
	mustContain(t, hosts, `data-testid="host-remove-failed-row"`, "Two nodes of H100",
		fmt.Sprintf("Reservation #%d, piece %d: the buyer&#39;s container could not be removed (device or resource busy).", r.ID, p.ID))
	mustNotContain(t, hosts, `data-testid="remove-failed-none"`)
	mustContain(t, prov.get("/notifications").body, "could not remove the buyer")
	if res := app.agentPost(token, path, map[string]any{"phase": "removed"}); res.status != http.StatusOK {
		t.Fatalf("removed report: %d %s", res.status, res.body)
	}
	mustContain(t, admin.get("/admin/hosts").body, `data-testid="remove-failed-none"`)
}
