package web

import (
	"context"
	"fmt"
	"html"
	"regexp"
	"slices"
	"testing"

	"github.com/gpumarket/gpumarket/market"
)

var providerNameRe = regexp.MustCompile(`data-testid="admin-provider-row"[^>]*>\s*<td>\s*<strong>([^<]*)</strong>`)

// TestAdminProvidersOrderIsTheSameOnBothEngines: /admin/providers lists
// providers with mixed case and accents in one order on SQLite and on
// PostgreSQL, whatever the server's collation (the store orders names
// itself). The expected order is written out by hand.
func TestAdminProvidersOrderIsTheSameOnBothEngines(t *testing.T) {
	app := newTestApp(t)
	names := []string{"zed", "Émile", "bob", "Alice", "Zoë", "alice", "Bob", "Zoe", "adam", "émile", "Ärzte"}
	for i, n := range names {
		if _, err := app.db.CreateUser(context.Background(), market.User{Email: fmt.Sprintf("p%d@example.com", i), DisplayName: n, IsProvider: true}, []byte("x"), testNow); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"adam", "Alice", "alice", "Bob", "bob", "zed", "Zoe", "Zoë", "Ärzte", "Émile", "émile"}
	r := app.adminClient("admin@example.com").get("/admin/providers")
	var got []string
	for _, m := range providerNameRe.FindAllStringSubmatch(r.body, -1) {
		got = append(got, html.UnescapeString(m[1]))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("/admin/providers lists %q; want %q", got, want)
	}
}
