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

// migrateDB copies an existing SQLite marketplace into an empty PostgreSQL
// database (store.CopyDatabase: one transaction on the target, verified
// before it commits) and prints each table's rows and the ledger checked.
// Opening each database applies its pending migrations first, so both are
// at this release's schema. The source is only read; stop the servers
// using it first, or what they write after the copy began stays behind.
func migrateDB(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("migrate-db", flag.ContinueOnError)
	fs.SetOutput(stderr)
	from := fs.String("from", "./data/gpumarket.db", "the SQLite database to copy")
	to := fs.String("to", "", "the empty PostgreSQL database to copy into, as a postgres:// URL")
	skip := fs.Bool("skip-unstorable", false, "copy every other row and leave out (and list) the rows PostgreSQL cannot store — text with a NUL byte or bytes that are not UTF-8; without it such rows fail the copy, each one listed")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("migrate-db: unexpected argument %q (usage: gpumarket migrate-db -from PATH -to postgres://…)", fs.Arg(0))
	}
	if !store.IsPostgresURL(*to) {
		return errors.New("migrate-db: -to must name the target PostgreSQL database as a postgres:// URL")
	}
	if store.IsPostgresURL(*from) {
		return errors.New("migrate-db: -from must be an SQLite database file; the copy goes from SQLite to PostgreSQL")
	}
	// store.Open would create a missing file: an empty copy of nothing.
	if info, err := os.Stat(*from); err != nil || info.IsDir() {
		return fmt.Errorf("migrate-db: no SQLite database at %s", *from)
	}
	target := redactDB(*to)

	src, err := store.Open(ctx, *from)
	if err != nil {
		return fmt.Errorf("migrate-db: open %s: %w", *from, err)
	}
	defer src.Close()
	dst, err := store.Open(ctx, *to)
	if err != nil {
		return fmt.Errorf("migrate-db: open %s (is the server running and the database created?): %w", target, err)
	}
	defer dst.Close()

	began := time.Now()
	rep, err := store.CopyDatabase(ctx, src, dst, store.CopyOptions{SkipUnstorable: *skip})
	if len(rep.Unstorable) > 0 {
		verb := "cannot be stored on PostgreSQL"
		if err == nil {
			verb = "left out: PostgreSQL cannot store them"
		}
		fmt.Fprintf(stdout, "%d rows %s:\n", len(rep.Unstorable), verb)
		for _, u := range rep.Unstorable {
			fmt.Fprintf(stdout, "  %s\n", u)
		}
	}
	if err != nil {
		return fmt.Errorf("migrate-db: nothing copied: %w", err)
	}
	fmt.Fprintf(stdout, "copied %s to %s (schema version %d) in %s\n", *from, target, rep.SchemaVersion, time.Since(began).Round(time.Millisecond))
	width := len("total")
	for _, t := range rep.Tables {
		width = max(width, len(t.Name))
	}
	for _, t := range rep.Tables {
		fmt.Fprintf(stdout, "  %-*s %10d\n", width, t.Name, t.Rows)
	}
	fmt.Fprintf(stdout, "  %-*s %10d rows\n", width, "total", rep.Rows())
	fmt.Fprintf(stdout, "verified: every table's rows, and the ledger — %d entries moving %s, the balances of %d accounts — the same on both\n",
		rep.LedgerEntries, rep.LedgerMoved, rep.Accounts)
	return nil
}
