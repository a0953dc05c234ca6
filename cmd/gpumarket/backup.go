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
// and prints what it wrote. On PostgreSQL it is refused: pg_dump is the
// tool there.
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
	db, err := store.Open(ctx, *dbPath)
	if err != nil {
		return fmt.Errorf("backup: open %s: %w", *dbPath, err)
	}
	defer db.Close()
	began := time.Now()
	rep, err := db.BackupTo(ctx, *to)
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	fmt.Fprintf(stdout, "backed up %s to %s in %s: %d bytes, integrity check ok, %d reservations, %d ledger entries balanced\n",
		*dbPath, rep.Path, time.Since(began).Round(time.Millisecond), rep.Bytes, rep.Reservations, rep.LedgerEntries)
	return nil
}
