package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/billing"
	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
	"github.com/gpumarket/gpumarket/store/pgtest"
	"github.com/gpumarket/gpumarket/workflow"
)

// TestMain stops the PostgreSQL server that TestMigrateDB starts.
func TestMain(m *testing.M) {
	code := pgtest.Run(m)
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// trading is what tradeOnDemo did on the demo marketplace.
type trading struct {
	disputed, upcoming int64 // reservations: settled after a dispute; paid, not yet started
}

// tradeOnDemo trades on the small demo database at path as the workflow
// does with the local test processor: the demo provider connects payouts;
// a buyer books and pays a rental, disputes it while it runs, the provider
// reports an outage, the rental ends and is settled (refund, payout frozen)
// and an admin grants a credit, which is refunded and releases the payout;
// the buyer books and pays another rental, to come, and holds a third.
func tradeOnDemo(t *testing.T, path string) trading {
	t.Helper()
	ctx := context.Background()
	db, err := store.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	now := time.Now().UTC()
	local := billing.NewLocal(billing.LocalConfig{Store: db})
	wf, err := workflow.New(ctx, workflow.Config{Billing: local, PlatformFeeBP: 1000, Now: func() time.Time { return now }},
		db, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	apply := func(evs []billing.Event, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			if err := wf.ApplyEvent(ctx, slog.New(slog.NewTextHandler(io.Discard, nil)), ev); err != nil {
				t.Fatalf("apply %s: %v", ev.StripeType, err)
			}
		}
	}
	user := func(email string, admin bool) market.User {
		u, err := db.CreateUser(ctx, market.User{Email: email, DisplayName: email, IsBuyer: true, IsAdmin: admin}, []byte("x"), now)
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	buyer, admin := user("migrate-buyer@example.com", false), user("migrate-admin@example.com", true)
	prov, _, err := db.FindUserByEmail(ctx, demoHostsProvider)
	if err != nil {
		t.Fatal(err)
	}
	acct, err := local.CreateConnectedAccount(ctx, prov.Email, "provider_account")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.CreatePayoutAccount(ctx, prov.ID, acct.ID, now); err != nil {
		t.Fatal(err)
	}
	ev, err := local.CompleteOnboarding(acct.ID, now)
	apply([]billing.Event{ev}, err)

	listings, err := db.ListAllListedOffers(ctx, now)
	if err != nil || len(listings) == 0 {
		t.Fatalf("demo offers: %d, %v", len(listings), err)
	}
	o := listings[0].Offer
	checkouts := 0
	book := func(start time.Time, hours int, pay bool) market.Reservation {
		t.Helper()
		p := market.ReservationPiece{OfferID: o.ID, Devices: o.DevicesPerNode, Start: start, End: start.Add(time.Duration(hours) * time.Hour),
			PriceCents: o.PriceCentsPerDeviceHour, AmountCents: o.PriceCentsPerDeviceHour * market.Cents(o.DevicesPerNode*hours)}
		r, err := wf.Book(ctx, buyer.ID, []market.ReservationPiece{p}, `{"version":1}`, 30*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if !pay {
			return r
		}
		checkouts++
		co, err := local.CreateCheckout(ctx, billing.CheckoutInput{ReservationID: r.ID, Amount: r.AmountCents, Description: "test",
			SuccessURL: "http://localhost/ok", CancelURL: "http://localhost/cancel", IdempotencyKey: fmt.Sprintf("checkout_%d", checkouts)})
		if err != nil {
			t.Fatal(err)
		}
		if err := db.RecordCheckout(ctx, buyer.ID, r.ID, co.ID, r.AmountCents, now); err != nil {
			t.Fatal(err)
		}
		apply(local.CompleteCheckout(co.ID, true, now))
		return r
	}

	start := now.Truncate(time.Hour).Add(2 * time.Hour)
	r := book(start, 10, true)
	now = start.Add(time.Hour)
	wf.Tick(ctx, now)
	d, err := db.OpenDispute(ctx, buyer.ID, r.ID, market.DisputeNotAsListed, "Two GPUs were slower than listed.", now)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.AddDisputeStatement(ctx, prov.ID, d.ID, "They ran at the listed clocks.", now); err != nil {
		t.Fatal(err)
	}
	r, err = db.FindReservation(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	inc := store.Incident{Incident: market.Incident{PieceID: r.Pieces[0].ID, Kind: market.IncidentHostFailure,
		Start: start.Add(2 * time.Hour), End: start.Add(3 * time.Hour), DevicesAffected: 1, Note: "PSU"},
		ReservationID: r.ID, ReportedBy: store.ReportedByProvider, ReporterID: prov.ID}
	if _, err := db.ReportIncident(ctx, inc, now); err != nil {
		t.Fatal(err)
	}
	now = start.Add(10*time.Hour + time.Minute)
	wf.Tick(ctx, now)
	if _, _, err := wf.DecideDispute(ctx, admin.ID, d.ID, 500, "Partly upheld."); err != nil {
		t.Fatal(err)
	}
	s, err := db.FindSettlement(ctx, r.ID)
	if err != nil || s.State != store.SettlementDone || !s.RefundDone || len(s.Transfers) != 1 || s.Transfers[0].State != store.TransferDone {
		t.Fatalf("the disputed rental's settlement: %+v, %v; want done, refunded and paid out", s, err)
	}
	upcoming := book(now.Truncate(time.Hour).Add(48*time.Hour), 4, true)
	book(now.Truncate(time.Hour).Add(72*time.Hour), 2, false)
	diffs, err := wf.Reconcile(ctx, workflow.ReconcileOptions{})
	if err != nil || len(diffs) != 0 {
		t.Fatalf("reconcile before the copy: %+v, %v", diffs, err)
	}
	return trading{disputed: r.ID, upcoming: upcoming.ID}
}

// TestMigrateDB copies a demo marketplace that has traded — bookings, a
// settlement, a dispute — with `gpumarket migrate-db`: the migrated
// marketplace shows the same catalogue, the same statement and ledger, and
// reconciles; a second run, a missing source and an unreachable server
// fail with messages saying so.
func TestMigrateDB(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "data", "gpumarket.db")
	seedDemoHostOffers(t, path)
	tr := tradeOnDemo(t, path)
	target := pgtest.Database(t)

	var out bytes.Buffer
	if err := run(ctx, []string{"migrate-db", "-from", path, "-to", target}, env(nil), strings.NewReader(""), &out, &out); err != nil {
		t.Fatalf("migrate-db: %v\n%s", err, out.String())
	}
	t.Log(out.String())
	for _, want := range []string{"copied " + path, "reservations", "ledger_entries", "disputes", "audit_log", "total", "verified:"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the summary does not say %q:\n%s", want, out.String())
		}
	}

	src, err := store.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := store.Open(ctx, target)
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	now := time.Now().UTC()
	filter := store.OfferFilter{Now: now, Limit: 50}
	wantCat, wantTotal, err := src.FindOffers(ctx, filter)
	if err != nil {
		t.Fatal(err)
	}
	gotCat, gotTotal, err := dst.FindOffers(ctx, filter)
	if err != nil {
		t.Fatal(err)
	}
	if len(wantCat) == 0 || gotTotal != wantTotal || !reflect.DeepEqual(gotCat, wantCat) {
		t.Errorf("catalogue on PostgreSQL (%d):\n%+v\nwant (%d):\n%+v", gotTotal, gotCat, wantTotal, wantCat)
	}
	for _, id := range []int64{tr.disputed, tr.upcoming} {
		want, err := src.FindReservation(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		got, err := dst.FindReservation(ctx, id)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("reservation %d on PostgreSQL: %+v, %v\nwant %+v", id, got, err, want)
		}
	}
	wantSt, err := src.FindSettlement(ctx, tr.disputed)
	if err != nil {
		t.Fatal(err)
	}
	gotSt, err := dst.FindSettlement(ctx, tr.disputed)
	if err != nil || !reflect.DeepEqual(gotSt, wantSt) || wantSt.Statement.Pieces == nil {
		t.Errorf("statement on PostgreSQL: %+v, %v\nwant %+v", gotSt, err, wantSt)
	}
	wantDs, err := src.ListReservationDisputeCases(ctx, tr.disputed)
	if err != nil {
		t.Fatal(err)
	}
	gotDs, err := dst.ListReservationDisputeCases(ctx, tr.disputed)
	if err != nil || len(wantDs) != 1 || !reflect.DeepEqual(gotDs, wantDs) {
		t.Errorf("disputes on PostgreSQL: %+v, %v\nwant %+v", gotDs, err, wantDs)
	}
	wantLedger, err := src.ListAllLedger(ctx)
	if err != nil {
		t.Fatal(err)
	}
	gotLedger, err := dst.ListAllLedger(ctx)
	if err != nil || !reflect.DeepEqual(gotLedger, wantLedger) || market.CheckBalanced(gotLedger) != nil {
		t.Errorf("ledger on PostgreSQL: %+v, %v\nwant %+v", gotLedger, err, wantLedger)
	}
	out.Reset()
	if err := run(ctx, []string{"reconcile", "-db", target}, env(nil), strings.NewReader(""), &out, &out); err != nil || !strings.Contains(out.String(), "reconciled: no differences") {
		t.Errorf("reconcile on PostgreSQL: %v\n%s", err, out.String())
	}

	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"a second copy", []string{"-from", path, "-to", target}, "The target database is not empty"},
		{"a missing source", []string{"-from", filepath.Join(t.TempDir(), "none.db"), "-to", target}, "no SQLite database at"},
		{"no target URL", []string{"-from", path, "-to", filepath.Join(t.TempDir(), "other.db")}, "-to must name the target PostgreSQL database"},
		{"an unreachable server", []string{"-from", path, "-to", "postgres://gpumarket:secret@127.0.0.1:1/none?sslmode=disable&connect_timeout=5"},
			"is the server running"},
	} {
		out.Reset()
		err := run(ctx, append([]string{"migrate-db"}, c.args...), env(nil), strings.NewReader(""), &out, &out)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want an error saying %q", c.name, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("%s: the error shows the password: %v", c.name, err)
		}
	}
}
