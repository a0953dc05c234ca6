package main

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/gpumarket/gpumarket/store"
)

// TestBackupCommand: `gpumarket backup -to FILE` writes a copy that opens
// as the marketplace's database, with the accounts in it; it is refused
// without -to and on PostgreSQL, naming pg_dump.
func TestBackupCommand(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	live := filepath.Join(dir, "m.db")
	var out bytes.Buffer
	if err := run(ctx, []string{"admin", "create", "-db", live, "-email", "ops@example.com", "-name", "Ops"},
		env(map[string]string{"GPUMARKET_ADMIN_PASSWORD": "a long admin passphrase"}), strings.NewReader(""), &out, &out); err != nil {
		t.Fatalf("admin create: %v\n%s", err, out.String())
	}
	to := filepath.Join(dir, "copy.db")
	out.Reset()
	if err := run(ctx, []string{"backup", "-db", live, "-to", to}, env(nil), strings.NewReader(""), &out, &out); err != nil {
		t.Fatalf("backup: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "integrity check ok") || !strings.Contains(out.String(), "ledger entries balanced") {
		t.Errorf("backup printed %q", out.String())
	}
	cp, err := store.Open(ctx, to)
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Close()
	if u, _, err := cp.FindUserByEmail(ctx, "ops@example.com"); err != nil || !u.IsAdmin {
		t.Errorf("the copy lacks the admin: %+v %v", u, err)
	}
	if err := run(ctx, []string{"backup", "-db", live}, env(nil), strings.NewReader(""), &out, &out); err == nil || !strings.Contains(err.Error(), "usage") {
		t.Errorf("backup without -to: %v", err)
	}
	if !strings.Contains(out.String(), "schema version") {
		t.Errorf("backup did not name the schema version: %q", out.String())
	}
	// Refused from the URL alone: no server is asked (none listens there).
	err = run(ctx, []string{"backup", "-db", "postgres://nobody@127.0.0.1:1/none?sslmode=disable", "-to", filepath.Join(dir, "pg.db")}, env(nil), strings.NewReader(""), &out, &out)
	if err == nil || !strings.Contains(err.Error(), "pg_dump") {
		t.Errorf("backup of PostgreSQL: %v, want a refusal naming pg_dump", err)
	}
}

// TestBackupDoesNotMigrate: the database of an older server — its schema
// built by every migration of this release but the last, from the
// migration files themselves — is copied as it is by `gpumarket backup`:
// the live database and the copy are both still at the older version
// (the last migration's record absent, its tables not created), and the
// command says which version it copied. A file that is no marketplace
// database is refused.
func TestBackupDoesNotMigrate(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	live := filepath.Join(dir, "old.db")
	older, last := olderSchema(t, live)

	to := filepath.Join(dir, "copy.db")
	var out bytes.Buffer
	if err := run(ctx, []string{"backup", "-db", live, "-to", to}, env(nil), strings.NewReader(""), &out, &out); err != nil {
		t.Fatalf("backup: %v\n%s", err, out.String())
	}
	want := fmt.Sprintf("schema version %d, copied as it is (this gpumarket knows %d", older, last.version)
	if !strings.Contains(out.String(), want) {
		t.Errorf("backup printed %q, want it to say %q", out.String(), want)
	}
	for _, path := range []string{live, to} {
		have, tables := schemaOf(t, path)
		if have != older {
			t.Errorf("%s is at schema version %d after the backup, want %d: backup must not migrate", filepath.Base(path), have, older)
		}
		for _, name := range last.tables {
			if tables[name] {
				t.Errorf("%s has the table %s of migration %d after the backup", filepath.Base(path), name, last.version)
			}
		}
	}

	empty := filepath.Join(dir, "empty.db")
	raw, err := sql.Open("sqlite", empty)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Exec(`CREATE TABLE notes (id INTEGER PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	raw.Close()
	err = run(ctx, []string{"backup", "-db", empty, "-to", filepath.Join(dir, "empty-copy.db")}, env(nil), strings.NewReader(""), &out, &out)
	if err == nil || !strings.Contains(err.Error(), "not a gpumarket database") {
		t.Errorf("backup of a database without migrations: %v, want a refusal", err)
	}
	if have, tables := schemaOf(t, empty); have != 0 || len(tables) != 1 {
		t.Errorf("the refused database was changed: version %d, tables %v", have, tables)
	}
}

// lastMigration is this release's last migration: its version and the
// tables it creates.
type lastMigration struct {
	version int
	tables  []string
}

// olderSchema builds at path the SQLite schema of every migration in
// store/migrations but the last (as the store applies them, each recorded
// in schema_migrations), and returns that version and the last migration.
func olderSchema(t *testing.T, path string) (int, lastMigration) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "..", "store", "migrations", "*.sql"))
	if err != nil || len(files) < 2 {
		t.Fatalf("migrations: %v %v", files, err)
	}
	sort.Strings(files)
	version := func(f string) int {
		n, err := strconv.Atoi(strings.SplitN(filepath.Base(f), "_", 2)[0])
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	raw, err := sql.Open("sqlite", path+"?_pragma=foreign_keys(1)&_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if _, err := raw.Exec(`CREATE TABLE schema_migrations (version BIGINT PRIMARY KEY, name TEXT NOT NULL, applied_at BIGINT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	for _, f := range files[:len(files)-1] {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := raw.Exec(string(b)); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if _, err := raw.Exec(`INSERT INTO schema_migrations VALUES (?, ?, 0)`, version(f), filepath.Base(f)); err != nil {
			t.Fatal(err)
		}
	}
	lastFile := files[len(files)-1]
	b, err := os.ReadFile(lastFile)
	if err != nil {
		t.Fatal(err)
	}
	lm := lastMigration{version: version(lastFile)}
	for _, m := range regexp.MustCompile(`(?i)CREATE TABLE (?:IF NOT EXISTS )?(\w+)`).FindAllStringSubmatch(string(b), -1) {
		lm.tables = append(lm.tables, m[1])
	}
	return version(files[len(files)-2]), lm
}

// schemaOf returns an SQLite file's highest recorded migration and its
// tables, read without the store.
func schemaOf(t *testing.T, path string) (int, map[string]bool) {
	t.Helper()
	raw, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	tables := map[string]bool{}
	rows, err := raw.Query(`SELECT name FROM sqlite_master WHERE type = 'table'`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		tables[name] = true
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	have := 0
	if tables["schema_migrations"] {
		if err := raw.QueryRow(`SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&have); err != nil {
			t.Fatal(err)
		}
	}
	return have, tables
}
