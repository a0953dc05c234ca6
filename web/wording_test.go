package web

import (
	"net/http"
	"strings"
	"testing"
)

// The offer form does not choose the interconnect for the provider (an RTX
// box defaulted to NVLink made a false claim easy), and saving without
// one says so by the field; an offer not yet listed says why in words, not
// "review pending review, state active".
func TestOfferFormInterconnectAndUnlistedWords(t *testing.T) {
	app := newTestApp(t)
	prov := app.client()
	prov.signUp("words@example.com", true)

	blank := prov.get("/provider/offers/new")
	if blank.status != http.StatusOK {
		t.Fatalf("new offer form: %d", blank.status)
	}
	mustContain(t, blank.body, `<option value="" selected>Choose…</option><option value="nvlink">`)
	mustNotContain(t, blank.body, `<option value="nvlink" selected>`, `<option value="pcie" selected>`)

	form := validOfferForm()
	form.Del("interconnect")
	r := prov.post("/provider/offers/new", "/provider/offers", form)
	if r.status != http.StatusUnprocessableEntity {
		t.Fatalf("offer without an interconnect: %d, want 422", r.status)
	}
	mustContain(t, r.body, `data-testid="error-interconnect"`, "Choose PCIe or NVLink.")

	id := prov.createOffer(validOfferForm())
	page := prov.get("/offers/" + itoa(id)).body
	mustContain(t, page, "Not listed in the catalogue: it is pending review.")
	if strings.Contains(page, "review pending review") || strings.Contains(page, "state active") {
		t.Error("the offer page still says \"review pending review, state active\"")
	}
}
