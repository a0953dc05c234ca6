package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"

	"github.com/gpumarket/gpumarket/store"
	"github.com/gpumarket/gpumarket/workflow"
)

// reconcile compares the ledger with the processor's objects it references
// (Stripe's, or the local test processor's, kept in the same database),
// checks that nothing owed is left unpaid, and prints every difference; it
// fails when there is any.
func reconcile(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("reconcile", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dbPath := fs.String("db", envOr(getenv, "GPUMARKET_DB", "./data/gpumarket.db"), "SQLite database path, or a postgres:// URL (env GPUMARKET_DB)")
	bf := billingFlags(fs, getenv)
	if err := fs.Parse(args); err != nil {
		return err
	}
	db, err := store.Open(ctx, *dbPath)
	if err != nil {
		return err
	}
	defer db.Close()
	processor, err := bf.processor(db)
	if err != nil {
		return err
	}
	if processor.Simulated() {
		fmt.Fprintln(stdout, "no Stripe key: checking against the local test processor's records")
	}
	wf, err := workflow.New(ctx, workflow.Config{Billing: processor, PlatformFeeBP: *bf.feeBP}, db, slog.New(slog.NewTextHandler(stderr, nil)))
	if err != nil {
		return err
	}
	diffs, err := wf.Reconcile(ctx, workflow.ReconcileOptions{})
	if err != nil {
		return err
	}
	for _, d := range diffs {
		where := "ledger"
		if d.ReservationID != 0 {
			where = fmt.Sprintf("reservation %d", d.ReservationID)
		}
		fmt.Fprintf(stdout, "%s: %s (ledger %s, processor %s)\n", where, d.What, orNone(d.Ledger), orNone(d.Processor))
	}
	if len(diffs) > 0 {
		return fmt.Errorf("%d difference(s) between the ledger and the processor", len(diffs))
	}
	fmt.Fprintln(stdout, "reconciled: no differences")
	return nil
}

func orNone(s string) string {
	if s == "" {
		return "—"
	}
	return s
}
