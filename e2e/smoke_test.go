package e2e

import (
	"net/http"
	"testing"
)

// TestSmokeHome opens the home page of a fresh server and checks that the catalogue is there.
func TestSmokeHome(t *testing.T) {
	srv := startServer(t)
	page := newPage(t)

	resp, err := page.Goto(srv.URL + "/")
	if err != nil {
		t.Fatalf("open home page: %v", err)
	}
	if resp.Status() != http.StatusOK {
		t.Fatalf("GET /: status %d, want %d", resp.Status(), http.StatusOK)
	}
	title, err := page.Title()
	if err != nil {
		t.Fatalf("read title: %v", err)
	}
	if title == "" {
		t.Error("home page has no <title>")
	}
	if err := expect.Locator(page.GetByTestId("catalogue")).ToBeVisible(); err != nil {
		t.Errorf(`home page shows no data-testid="catalogue": %v`, err)
	}
	shot(t, page, "home")
}
