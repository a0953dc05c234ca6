package web

import (
	"context"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/gpumarket/gpumarket/market"
)

// containerOffer is a listed offer whose host runs buyer containers.
func (a *testApp) containerOffer(region string, cents market.Cents) market.Offer {
	a.t.Helper()
	o := a.listedOffer("nvidia-h100-80gb-sxm", 8, 1, region, cents)
	o.Containers = market.ContainerSupport{Engine: market.EnginePodman, CDI: true}
	ctx := context.Background()
	if _, err := a.db.UpdateOffer(ctx, o.ProviderID, o, testNow); err != nil {
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
