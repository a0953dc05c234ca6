package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpumarket/gpumarket/store"
	"github.com/gpumarket/gpumarket/store/pgtest"
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
	err = run(ctx, []string{"backup", "-db", pgtest.Database(t), "-to", filepath.Join(dir, "pg.db")}, env(nil), strings.NewReader(""), &out, &out)
	if err == nil || !strings.Contains(err.Error(), "pg_dump") {
		t.Errorf("backup of PostgreSQL: %v, want a refusal naming pg_dump", err)
	}
}
