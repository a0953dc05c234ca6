package web

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// TestProviderNotesAgentIncident: the provider adds a note to an
// underperformance its agent measured, on the booking page (CSRF; a bad
// note 422 by the field); the buyer sees it beside the measurement, the
// admin in the dispute timeline; another provider and a person's report
// cannot take one.
func TestProviderNotesAgentIncident(t *testing.T) {
	app := newBillingApp(t)
	ctx := context.Background()
	prov := app.client()
	prov.signUp("notes@example.com", true)
	o := app.ownOfferTerms(prov.userID(), func(o *market.Offer) {
		o.Figures = []market.Figure{{Kind: market.FigureBF16TFLOPS, Value: 900, Basis: market.FigureGuaranteed}}
	})
	app.connectPayouts(prov)
	buyer := app.client()
	buyer.signUp("notes-buyer@example.com", false)
	q := trainingQuery()
	q.Set("workload.hours", "2")
	r := app.bookAndPayQuery(buyer, q)
	p := r.Pieces[0]
	createHostToken(t, prov, o.ID, 0)
	tokenID := liveHostTokenID(t, app.testApp, prov.userID(), o.ID, 0)
	app.tick(p.Start)
	res, _ := market.AcceptanceFromReport("bf16_tflops", []float64{500, 900, 900, 900, 900, 900, 900, 900}, 30, "")
	if _, err := app.db.RecordAcceptance(ctx, tokenID, p.ID, res, p.Start.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	app.tick(p.Start.Add(2 * time.Minute))
	incs, err := app.db.ListIncidents(ctx, r.ID)
	if err != nil || len(incs) != 1 {
		t.Fatalf("incidents %+v %v", incs, err)
	}
	inc := incs[0]
	booking := fmt.Sprintf("/provider/bookings/%d", r.ID)
	action := fmt.Sprintf("%s/incidents/%d/notes", booking, inc.ID)
	page := prov.get(booking).body
	mustContain(t, page, `data-testid="incident-note-form"`, `action="`+action+`"`)

	if got := prov.postRaw(action, url.Values{"note": {"x"}}); got.status != http.StatusForbidden {
		t.Fatalf("without CSRF: %d", got.status)
	}
	long := strings.Repeat("y", market.MaxIncidentNoteText+1)
	bad := prov.post(booking, action, url.Values{"note": {long}})
	if bad.status != http.StatusUnprocessableEntity {
		t.Fatalf("a long note: %d", bad.status)
	}
	mustContain(t, bad.body, `data-testid="error-note"`, "Keep the note under 1000 characters", long)

	// Another provider: not found, even through their own booking path.
	other := app.client()
	other.signUp("notes-other@example.com", true)
	if got := other.post("/provider/offers", action, url.Values{"note": {"mine?"}}); got.status != http.StatusNotFound {
		t.Fatalf("another provider: %d", got.status)
	}

	done := prov.post(booking, action, url.Values{"note": {"GPU 0 throttled by a failed fan; replaced at 10:40 UTC."}})
	if done.status != http.StatusSeeOther || !strings.HasPrefix(done.location, booking) {
		t.Fatalf("note: %d → %q\n%s", done.status, done.location, done.body)
	}
	mustContain(t, prov.get(booking).body, "Note added", `data-testid="incident-note"`, "GPU 0 throttled by a failed fan")
	buyerPage := buyer.get(fmt.Sprintf("/reservations/%d", r.ID)).body
	mustContain(t, buyerPage, `data-testid="incident-note"`, "GPU 0 throttled by a failed fan")
	mustNotContain(t, buyerPage, `data-testid="incident-note-form"`)
	tl, err := app.db.ReservationTimeline(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range tl {
		found = found || strings.Contains(e.Text, "GPU 0 throttled by a failed fan")
	}
	if !found {
		t.Fatal("the note is not in the reservation's timeline")
	}
}
