package store

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/gpumarket/gpumarket/market"
)

// TestNoQueryOrdersByText: an ORDER BY on a text column follows the
// database's collation — byte order in SQLite, the server's locale in
// PostgreSQL — so the two engines list the same rows in different orders
// (/admin/providers did). The test reads the SQL of every store file, finds
// each ORDER BY and fails when a term names a column the migrations
// declare TEXT (in every table that has a column of that name: a name
// such as id, an integer in most tables and text in a few, is not told
// apart without reading which tables the query reads, which this scan
// does not); such a list is ordered in Go (compareNames) instead.
// Comparing a text column with = (ORDER BY d.status = ? DESC) is the same
// on both engines and passes; an ORDER BY built at run time (`+order`)
// must be one of the known builders, whose pieces are checked too.
func TestNoQueryOrdersByText(t *testing.T) {
	text := textColumns(t)
	// Text columns whose order is the same on both engines, and why.
	allowed := map[string]string{
		"table_name": "information_schema's sql_identifier, which PostgreSQL compares in the C collation (byte order, as SQLite)",
	}
	// ORDER BY clauses built at run time: the file and what builds them.
	dynamic := map[string][]string{
		"availability.go": offerOrderClauses(),
		"offer.go":        offerOrderClauses(),
		"copy.go":         nil, // the SQLite source's primary key, read for migrate-db's copy: nobody sees that order
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	orderBy := regexp.MustCompile("(?i)ORDER BY ([^`\"\n]*)")
	stop := regexp.MustCompile(`(?i)\s(LIMIT|OFFSET|FOR UPDATE|FOR SHARE)\b.*$`)
	ident := regexp.MustCompile(`(?i)(?:\b[a-z_][a-z0-9_]*\.)?\b([a-z_][a-z0-9_]*)\b(\s*=)?`)
	found := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(src), "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "//") {
				continue
			}
			for _, m := range orderBy.FindAllStringSubmatch(line, -1) {
				found++
				clause := strings.TrimSpace(stop.ReplaceAllString(m[1], ""))
				clauses := []string{clause}
				if clause == "" { // built at run time
					known, ok := dynamic[f]
					if !ok {
						t.Errorf("%s: an ORDER BY built at run time this test does not know: %q", f, line)
					}
					clauses = known
				}
				for _, c := range clauses {
					c = depthZero(c)
					for _, id := range ident.FindAllStringSubmatch(c, -1) {
						name := strings.ToLower(id[1])
						if id[2] != "" || !text[name] || allowed[name] != "" {
							continue
						}
						t.Errorf("%s: ORDER BY %s names the text column %s: the engines' collations differ; order it in Go (compareNames) or allow it here with the reason its order is the same on both", f, c, name)
					}
				}
			}
		}
	}
	if found < 50 {
		t.Fatalf("found %d ORDER BY clauses: the scan is broken", found)
	}
}

// depthZero is clause with what sits inside parentheses left out (a
// sub-select's own columns are not the order of the rows returned), and
// SQL keywords that look like names removed.
func depthZero(clause string) string {
	var b strings.Builder
	depth := 0
	for _, r := range clause {
		switch {
		case r == '(':
			depth++
		case r == ')':
			if depth == 0 {
				return strings.TrimSpace(b.String()) // the end of an enclosing sub-select
			}
			depth--
		case depth == 0:
			b.WriteRune(r)
		}
	}
	return strings.TrimSpace(b.String())
}

// offerOrderClauses are the catalogue's sort orders (offerOrder).
func offerOrderClauses() []string {
	var out []string
	for _, o := range offerOrder {
		out = append(out, o)
	}
	sort.Strings(out)
	return out
}

// textColumns is every column name the migrations (SQLite's; PostgreSQL's
// mirror them) declare TEXT and never another type, over all tables.
func textColumns(t *testing.T) map[string]bool {
	t.Helper()
	files, err := filepath.Glob("migrations/*.sql")
	if err != nil || len(files) == 0 {
		t.Fatalf("no migrations: %v", err)
	}
	decl := regexp.MustCompile(`(?im)^\s*(?:ALTER TABLE\s+\w+\s+ADD COLUMN\s+)?"?([a-z_][a-z0-9_]*)"?\s+(TEXT|INTEGER|REAL|BLOB|NUMERIC|BIGINT|BOOLEAN)\b`)
	text, other := map[string]bool{}, map[string]bool{}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range decl.FindAllStringSubmatch(string(src), -1) {
			if name := strings.ToLower(m[1]); strings.EqualFold(m[2], "TEXT") {
				text[name] = true
			} else {
				other[name] = true
			}
		}
	}
	for name := range other {
		delete(text, name)
	}
	for _, want := range []string{"name", "display_name", "email"} {
		if !text[want] {
			t.Fatalf("the migrations' text columns miss %s: the scan is broken (found %d)", want, len(text))
		}
	}
	if text["created_at"] || text["reservation_id"] {
		t.Fatal("the scan takes integer columns for text")
	}
	return text
}

// TestTemplatesInTheSameOrderOnBothEngines: the templates list, most used
// first, then by name as the providers' list is ordered (case-insensitive,
// accented letters after the plain alphabet), the same on SQLite and
// PostgreSQL, whose collation would put "Émile" beside "emile" and ignore
// the underscore.
func TestTemplatesInTheSameOrderOnBothEngines(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	author := createUser(t, db, "author@example.com", false)
	rt := market.Runtime{Image: "docker.io/library/busybox:1.36", Launch: market.LaunchSSH}
	for _, n := range []string{"zed", "Émile", "bob", "Alice", "emile", "_under", "Bob"} {
		if _, err := db.SaveTemplate(ctx, author.ID, market.Template{Name: n, Runtime: rt}, t0); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"_under", "Alice", "Bob", "bob", "emile", "zed", "Émile"}
	ts, err := db.ListTemplates(ctx, author.ID)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, tp := range ts {
		if tp.AuthorID == author.ID {
			got = append(got, tp.Name)
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("templates in order %q; want %q", got, want)
	}
}
