package web

import (
	"context"
	"net/http"
	"testing"
)

// A provider is warned on the form, before the offer is submitted, when a
// figure is above the catalogue's published figure — with the published
// figure and the reason — and nothing is saved until they correct it or
// confirm it. "Check figures" checks without saving.
func TestOfferFormWarnsAboutFiguresAboveTheCatalogue(t *testing.T) {
	app := newTestApp(t)
	prov := app.client()
	prov.signUp("gpus@example.com", true)
	offers := func() int {
		t.Helper()
		os, err := app.db.ListProviderOffers(context.Background(), prov.userID())
		if err != nil {
			t.Fatal(err)
		}
		return len(os)
	}
	form := validOfferForm()
	form.Set("figure_bf16_tflops_value", "1979") // the H100 SXM's sparsity figure; its dense peak is 989
	form.Set("figure_bf16_tflops_basis", "estimated")
	form.Set("figure_bf16_tflops_method", "spec sheet")

	// Checking saves nothing and shows the warning next to the figure.
	form.Set("check", "1")
	r := prov.post("/provider/offers/new", "/provider/offers", form)
	if r.status != http.StatusOK {
		t.Fatalf("check figures: %d, want 200", r.status)
	}
	mustContain(t, r.body, `data-testid="figure-warnings"`, `data-testid="warning-figure_bf16_tflops"`, "1,979 TFLOPS is above the H100 80GB SXM&#39;s published peak of 989 TFLOPS",
		"sparsity", "Published for this model: 989 TFLOPS", `name="figures_confirmed"`, `value="1979"`)
	mustNotContain(t, r.body, `data-testid="warning-figure_mem_bandwidth"`)
	if n := offers(); n != 0 {
		t.Fatalf("checking saved %d offer(s)", n)
	}

	// Submitting without confirming shows the same warning and saves nothing.
	form.Del("check")
	r = prov.post("/provider/offers/new", "/provider/offers", form)
	if r.status != http.StatusOK || offers() != 0 {
		t.Fatalf("unconfirmed submit: %d, %d offers", r.status, offers())
	}
	mustContain(t, r.body, `data-testid="warning-figure_bf16_tflops"`)

	// A corrected figure checks clean.
	form.Set("figure_bf16_tflops_value", "950")
	form.Set("check", "1")
	r = prov.post("/provider/offers/new", "/provider/offers", form)
	mustContain(t, r.body, `data-testid="figures-checked"`, "No figure is above")
	mustNotContain(t, r.body, `data-testid="figure-warnings"`, `name="figures_confirmed"`)

	// Relative throughput is typed as a percentage of the reference.
	form.Del("check")
	form.Set("figure_rel_throughput_value", "500")
	form.Set("figure_rel_throughput_basis", "estimated")
	form.Set("figure_rel_throughput_method", "our training run")
	r = prov.post("/provider/offers/new", "/provider/offers", form)
	mustContain(t, r.body, `data-testid="warning-figure_rel_throughput"`, "500% is more than 10% above the H100 80GB SXM&#39;s published speed of 317% of an A100 80GB SXM")
	mustNotContain(t, r.body, "‰")

	// Confirmed, it is submitted: flagged for the reviewer, stored in
	// thousandths of the reference, shown back as the percentage.
	form.Set("figures_confirmed", "1")
	id := prov.createOffer(form)
	o, err := app.db.FindProviderOffer(context.Background(), prov.userID(), id)
	if err != nil {
		t.Fatal(err)
	}
	if f, ok := o.Figure("rel_throughput"); !ok || f.Value != 5000 {
		t.Errorf("stored relative throughput %+v, want 5000 thousandths", f)
	}
	edit := prov.get("/provider/offers/" + itoa(id) + "/edit").body
	mustContain(t, edit, `name="figure_rel_throughput_value" value="500"`, `data-testid="warning-figure_rel_throughput"`)
}
