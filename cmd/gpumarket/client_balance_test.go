package main

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/workflow"
)

// `gpumarket balance` and `gpumarket balance auto-top-up` against the real
// server: refused without a saved card, bad values refused with the API's
// field messages, set and shown, a tick tops $10.00 up by $20.00 below
// $15.00 ($30.00), turned off and shown off; a declined card shows the
// setting paused. The figures come from the terms set here.
func TestClientAutoTopUp(t *testing.T) {
	start := time.Now().UTC().Truncate(time.Hour).Add(time.Hour)
	s := newCLIServer(t, start)
	ctx := context.Background()
	buyer, tok := s.user("auto-buyer@cli.test", false, "write")
	env := map[string]string{"GPUMARKET_TOKEN": tok}

	s.cli(env, "balance").must(t, 0, "Balance $0.00", "Automatic top-up: off")
	s.cli(env, "balance", "auto-top-up", "-threshold", "15.00", "-amount", "20.00").must(t, 1, "Add a payment method on your account page first. (HTTP 400)")

	s.saveCard(buyer.ID)
	if _, err := s.wf.TopUpWithSavedCard(ctx, buyer.ID, 1000); err != nil {
		t.Fatal(err)
	}
	// Bad values: each field's message from the API, on stderr, exit 1.
	bad := s.cli(env, "balance", "auto-top-up", "-threshold", "0.50", "-amount", "1")
	bad.must(t, 1)
	if want := "gpumarket: the automatic top-up was not set:\n" +
		"  -threshold: The threshold must be between $1.00 and $10,000.00.\n" +
		"  -amount: A top-up must be between $5.00 and $10,000.00.\n"; bad.stderr != want || bad.stdout != "" {
		t.Fatalf("refusal:\nstderr %q\nwant   %q\nstdout %q", bad.stderr, want, bad.stdout)
	}
	s.cli(env, "balance", "auto-top-up", "-threshold", "15", "-amount", "20000.01").must(t, 1, "  -amount: A top-up must be between")
	// Bad usage never reaches the server: exit 2.
	s.cli(env, "balance", "auto-top-up", "-threshold", "lots", "-amount", "20").must(t, 2, `-threshold "lots"`)
	s.cli(env, "balance", "auto-top-up", "-threshold", "15").must(t, 2, "give both -threshold and -amount, or -off")
	s.cli(env, "balance", "auto-top-up", "-off", "-amount", "20").must(t, 2, "-off takes no -threshold or -amount")
	s.cli(env, "balance", "auto-top-up", "-threshold", "0", "-amount", "0").must(t, 2, "say -off")
	s.cli(env, "balance", "auto-top-up").must(t, 2, "usage: gpumarket balance auto-top-up")
	s.cli(env, "balance", "auto-top-up", "-threshold", "0.50", "-amount", "1", "--json").must(t, 1, "-threshold: The threshold")
	s.cli(env, "balance").must(t, 0, "Balance $10.00", "Automatic top-up: off")

	s.cli(env, "balance", "auto-top-up", "-threshold", "15.00", "--amount", "$20").must(t, 0, "Automatic top-up: below $15.00, top up by $20.00 from the saved card")
	s.cli(env, "balance").must(t, 0, "Balance $10.00", "Automatic top-up: below $15.00, top up by $20.00")
	var shown struct {
		AutoTopUp cliAutoTopUp `json:"auto_top_up"`
	}
	js := s.cli(env, "balance", "--json")
	js.must(t, 0)
	if err := json.Unmarshal([]byte(js.stdout), &shown); err != nil || shown.AutoTopUp != (cliAutoTopUp{On: true, Threshold: 1500, Amount: 2000}) {
		t.Fatalf("--json: %+v %v\n%s", shown, err, js.stdout)
	}
	// $10.00 is below $15.00: one top-up of $20.00, then $30.00 is not.
	s.tick(start.Add(time.Minute))
	s.tick(start.Add(2 * time.Minute))
	s.cli(env, "balance").must(t, 0, "Balance $30.00 (top-ups $30.00 − draws $0.00 − refunds $0.00)")
	s.cli(env, "metered", "balance").must(t, 0, "Balance $30.00", "Automatic top-up: below $15.00")

	s.cli(env, "balance", "auto-top-up", "-off").must(t, 0, "Automatic top-up: off")
	s.cli(env, "balance").must(t, 0, "Balance $30.00", "Automatic top-up: off")

	// A declined card pauses it; the CLI says so.
	s.saveCardNumber(buyer.ID, "4000 0000 0000 0002")
	s.cli(env, "balance", "auto-top-up", "-threshold", "40", "-amount", "5").must(t, 0, "below $40.00, top up by $5.00")
	s.tick(start.Add(3 * time.Minute))
	s.cli(env, "balance").must(t, 0, "Balance $30.00", "Automatic top-up: below $40.00, top up by $5.00 from the saved card — paused: ")

	diffs, err := s.wf.Reconcile(ctx, workflow.ReconcileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range diffs {
		t.Errorf("reconcile: reservation %d: %s", d.ReservationID, d.What)
	}
}
