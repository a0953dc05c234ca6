package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/gpumarket/gpumarket/store"
)

// backup takes an online, consistent copy of the SQLite database while the
// server runs (store.DB.BackupTo: VACUUM INTO through the product's own
// driver, then an integrity check and the ledger's balance on the copy),
// and prints what it wrote. It opens the database as it is, without
// migrating (store.WithoutMigrating): a newer gpumarket taking the backup
// of an older server's live database must not change its schema under
// it. The copy is of the schema version the database is at, which it
// names. On PostgreSQL it is refused: pg_dump is the tool there.
func backup(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("backup", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dbPath := fs.String("db", envOr(getenv, "GPUMARKET_DB", "./data/gpumarket.db"), "the SQLite database to copy (env GPUMARKET_DB)")
	to := fs.String("to", "", "the file to write the backup to; it must not exist")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 || *to == "" {
		return errors.New("usage: gpumarket backup -to FILE [-db PATH]")
	}
	if store.IsPostgresURL(*dbPath) {
		return errors.New("backup: the database is PostgreSQL; take its backup with pg_dump (see docs/postgres.md)")
	}
	// store.Open would create a missing file: a backup of nothing.
	if info, err := os.Stat(*dbPath); err != nil || info.IsDir() {
		return fmt.Errorf("backup: no SQLite database at %s", *dbPath)
	}
	db, err := store.Open(ctx, *dbPath, store.WithoutMigrating())
	if err != nil {
		return fmt.Errorf("backup: open %s: %w", *dbPath, err)
	}
	defer db.Close()
	have, known, err := db.SchemaVersion(ctx)
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	if have == 0 {
		return fmt.Errorf("backup: %s is not a gpumarket database (no schema migrations recorded)", *dbPath)
	}
	began := time.Now()
	rep, err := db.BackupTo(ctx, *to)
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	fmt.Fprintf(stdout, "backed up %s to %s in %s: %d bytes, integrity check ok, %d reservations, %d ledger entries balanced\n",
		*dbPath, rep.Path, time.Since(began).Round(time.Millisecond), rep.Bytes, rep.Reservations, rep.LedgerEntries)
	fmt.Fprintf(stdout, "%s\n", schemaWords(have, known))
	return nil
}

// schemaWords says which schema version a backup is at, beside the one
// this binary knows.
func schemaWords(have, known int) string {
	switch {
	case have < known:
		return fmt.Sprintf("schema version %d, copied as it is (this gpumarket knows %d: it migrates the database, or a restored copy, when it serves it)", have, known)
	case have > known:
		return fmt.Sprintf("schema version %d, copied as it is (newer than the %d this gpumarket knows: restore it with the release that wrote it)", have, known)
	default:
		return fmt.Sprintf("schema version %d, this gpumarket's", have)
	}
}
