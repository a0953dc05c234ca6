package web

import (
	"net/http"
	"strings"
	"testing"
)

// TestRequestRegionOutsideCountries: a region outside the allowed
// countries is refused with a message next to both fields, and a region
// inside them narrows the quotes to that region.
func TestRequestRegionOutsideCountries(t *testing.T) {
	app := newTestApp(t)
	app.listedOffer("nvidia-h100-80gb-sxm", 8, 1, "us-east-va", 219)
	app.listedOffer("nvidia-h100-80gb-sxm", 8, 1, "us-west-or", 219)
	app.listedOffer("nvidia-h100-80gb-sxm", 8, 1, "eu-central-de", 219)

	q := trainingQuery()
	q["constraints.countries"] = []string{"DE"}
	q["constraints.regions"] = []string{"us-east-va"}
	r := app.client().get("/requests?" + q.Encode())
	if r.status != http.StatusUnprocessableEntity {
		t.Fatalf("status %d", r.status)
	}
	mustContain(t, r.body, `data-testid="error-constraints.regions"`, `data-testid="error-constraints.countries"`, "US East (Virginia)")
	if strings.Contains(r.body, `data-testid="quote"`) {
		t.Fatal("quotes shown beside an invalid request")
	}

	q["constraints.countries"] = []string{"US"}
	r = app.client().get("/requests?" + q.Encode())
	if r.status != http.StatusOK {
		t.Fatalf("status %d", r.status)
	}
	if n := strings.Count(r.body, `data-testid="quote"`); n != 1 || !strings.Contains(r.body, "in us-east-va") {
		t.Fatalf("%d quotes, want only the Virginia offer", n)
	}
}
