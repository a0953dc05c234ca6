package store

import (
	"context"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store/pgtest"
)

// openSQLiteFile opens a fresh SQLite database in t.TempDir(), whatever
// engine the run's other tests use: the copy's source is SQLite.
func openSQLiteFile(t *testing.T) *DB {
	t.Helper()
	db, err := Open(context.Background(), filepath.Join(t.TempDir(), "source.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// openPostgresDB opens a fresh, empty (migrated) PostgreSQL database.
func openPostgresDB(t *testing.T) *DB {
	t.Helper()
	db, err := Open(context.Background(), pgtest.Database(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// seedMarketplace fills db with a small marketplace's history: accounts
// (one password hash holding every byte value), sessions, an API token, SSH
// keys, a saved request, offers with a host reporting, a paid rental with a
// provider's incident that is settled — refund and payout — and disputed
// (statements, a decided credit refunded), a running rental and its
// extension, a provider suspended and reinstated and another suspended, settings, and more
// throttle hits than one INSERT carries.
func seedMarketplace(t *testing.T, db *DB) {
	t.Helper()
	ctx := context.Background()
	prov := createUser(t, db, "prov@example.com", true)
	other := createUser(t, db, "other-prov@example.com", true)
	buyer := createUser(t, db, "buyer@example.com", false)
	admin := testAdmin(t, db)
	every := make([]byte, 256)
	for i := range every {
		every[i] = byte(i)
	}
	if _, err := db.CreateUser(ctx, market.User{Email: "bytes@example.com", DisplayName: "Bytes — ü", IsBuyer: true}, every, t0); err != nil {
		t.Fatal(err)
	}
	if _, err := db.CreateSession(ctx, buyer.ID, t0, 24*time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, _, err := db.CreateAPIToken(ctx, buyer.ID, "ci", TokenScopeWrite, t0); err != nil {
		t.Fatal(err)
	}
	if _, err := db.AddSSHKey(ctx, buyer.ID, testKey(0), t0); err != nil {
		t.Fatal(err)
	}
	if _, err := db.SaveRequest(ctx, buyer.ID, "nightly", `{"version":1}`, t0); err != nil {
		t.Fatal(err)
	}
	if err := db.SetSetting(ctx, "demo_credentials", `[{"role":"buyer"}]`); err != nil {
		t.Fatal(err)
	}

	o := listedOffer(t, db, prov.ID, 8)
	tok, _ := hostToken(t, db, prov.ID, o.ID, 0)
	heartbeat(t, db, tok.ID, 1, h100s(8), t0)
	small := listedOffer(t, db, other.ID, 4)
	suspend(t, db, other.ID)
	reinstate(t, db, other.ID)
	suspend(t, db, createUser(t, db, "gone@example.com", true).ID)

	// A running rental and its extension: reservations.extends_id refers
	// to an earlier row of the same table.
	start := t0.Add(2 * time.Hour)
	now := start.Add(time.Hour)
	r := running(t, db, buyer.ID, now, piece(small, 2, start, 10))
	ext, err := market.ExtensionPieces(r, map[int64]market.Offer{small.ID: small}, 4, 100, now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.CreateExtension(ctx, buyer.ID, r.ID, ext.Pieces, now, hold); err != nil {
		t.Fatal(err)
	}

	// A paid rental: an outage, settlement, a dispute with a credit, payout.
	start = o.AvailableFrom.Add(24 * time.Hour)
	paid := paidRental(t, db, buyer.ID, o, 8, start, 10, "pi_1")
	if _, err := db.CreatePayoutAccount(ctx, prov.ID, "acct_1", t0); err != nil {
		t.Fatal(err)
	}
	if _, err := db.UpdatePayoutAccount(ctx, AccountUpdate{AccountID: "acct_1", DetailsSubmitted: true, PayoutsEnabled: true, At: t0}, t0); err != nil {
		t.Fatal(err)
	}
	during := start.Add(time.Hour)
	if _, err := db.AdvanceReservations(ctx, during); err != nil {
		t.Fatal(err)
	}
	inc := Incident{Incident: market.Incident{Kind: market.IncidentHostFailure, Start: start.Add(2 * time.Hour), End: start.Add(4 * time.Hour),
		DevicesAffected: 4, Note: "PSU failed"}, ReservationID: paid.ID, ReportedBy: ReportedByProvider, ReporterID: prov.ID}
	if _, err := db.ReportIncident(ctx, inc, during); err != nil {
		t.Fatal(err)
	}
	end := start.Add(11 * time.Hour)
	if _, err := db.AdvanceReservations(ctx, end); err != nil {
		t.Fatal(err)
	}
	if _, err := db.StartSettlement(ctx, paid.ID, 1000, end); err != nil {
		t.Fatal(err)
	}
	if _, err := db.RecordSettlementRefund(ctx, paid.ID, "re_1", end); err != nil {
		t.Fatal(err)
	}
	d, err := db.OpenDispute(ctx, buyer.ID, paid.ID, market.DisputeNotAsListed, "Two GPUs were slower than listed.", end)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.AddDisputeStatement(ctx, prov.ID, d.ID, "They ran at the listed clocks.", end); err != nil {
		t.Fatal(err)
	}
	if _, err := db.DecideDispute(ctx, admin, d.ID, 689, "Partly upheld.", end); err != nil {
		t.Fatal(err)
	}
	if _, err := db.RecordDisputeRefund(ctx, d.ID, "re_2", end); err != nil {
		t.Fatal(err)
	}
	if _, err := db.RecordSettlementTransfer(ctx, paid.ID, prov.ID, "tr_1", end); err != nil {
		t.Fatal(err)
	}

	// 1,203 hits: two full INSERTs and a part.
	if _, err := db.writer.ExecContext(ctx, `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1203)
		INSERT INTO throttle_hits (throttle_key, at) SELECT 'login-ip:10.0.0.' || (i % 7), ? + i FROM n`, unix(t0)); err != nil {
		t.Fatal(err)
	}
	es, err := db.ListAllLedger(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := market.CheckBalanced(es); err != nil {
		t.Fatal(err)
	}
}

// tableRows reads every row of table, keyed by its primary key (the rowid
// when it has none), values as the driver returns them.
func tableRows(t *testing.T, db *DB, table copyTable) map[string][]any {
	t.Helper()
	ctx := context.Background()
	cols := make([]string, len(table.columns))
	for i, c := range table.columns {
		cols[i] = quoteIdent(c)
	}
	rows, err := db.reader.QueryContext(ctx, `SELECT `+strings.Join(cols, ", ")+` FROM `+quoteIdent(table.name))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string][]any{}
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		var key []any
		for _, k := range table.key {
			for i, c := range table.columns {
				if c == k {
					key = append(key, vals[i])
				}
			}
		}
		if len(key) == 0 {
			t.Fatalf("table %s has no primary key to compare its rows by", table.name)
		}
		out[fmt.Sprint(key...)] = vals
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func sourceTables(t *testing.T, db *DB) []copyTable {
	t.Helper()
	tx, err := db.read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	tables, err := sqliteTables(context.Background(), tx)
	if err != nil {
		t.Fatal(err)
	}
	return tables
}

// TestCopyDatabase copies a marketplace's history from SQLite into an
// empty PostgreSQL database and compares every row of every table, the
// ledger and the report; a second copy into it is refused; new rows on the
// copy get fresh ids.
func TestCopyDatabase(t *testing.T) {
	ctx := context.Background()
	src := openSQLiteFile(t)
	seedMarketplace(t, src)
	dst := openPostgresDB(t)

	began := time.Now()
	rep, err := CopyDatabase(ctx, src, dst, CopyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("copied %d rows of %d tables in %s", rep.Rows(), len(rep.Tables), time.Since(began).Round(time.Millisecond))

	tables := sourceTables(t, src)
	if len(rep.Tables) != len(tables) {
		t.Errorf("the report has %d tables, the source %d", len(rep.Tables), len(tables))
	}
	reported := map[string]int64{}
	position := map[string]int{}
	for i, tc := range rep.Tables {
		reported[tc.Name] = tc.Rows
		position[tc.Name] = i
	}
	// What the seeding wrote must be there to be compared.
	for _, name := range []string{"users", "sessions", "api_tokens", "ssh_keys", "saved_requests", "settings", "offers", "offer_figures",
		"offer_credit_tiers", "host_tokens", "hosts", "host_heartbeat_runs", "reservations", "reservation_pieces", "payments",
		"processed_events", "payout_accounts", "incidents", "settlements", "settlement_transfers", "ledger_entries", "disputes",
		"dispute_messages", "audit_log", "notifications", "provider_suspensions", "throttle_hits"} {
		if reported[name] == 0 {
			t.Errorf("table %s: no rows copied; the test seeds some", name)
		}
	}
	for _, table := range tables {
		want, got := tableRows(t, src, table), tableRows(t, dst, table)
		if int64(len(want)) != reported[table.name] {
			t.Errorf("table %s: %d rows in the source, %d reported", table.name, len(want), reported[table.name])
		}
		if len(got) != len(want) {
			t.Errorf("table %s: %d rows in the target, want %d", table.name, len(got), len(want))
		}
		for k, w := range want {
			if g, ok := got[k]; !ok || !reflect.DeepEqual(g, w) {
				t.Errorf("table %s, key %s:\n got %#v\nwant %#v", table.name, k, g, w)
			}
		}
		for _, p := range table.parents {
			if p != table.name && position[p] > position[table.name] {
				t.Errorf("table %s copied before %s, which it references", table.name, p)
			}
		}
	}
	var extends int
	if err := dst.reader.QueryRowContext(ctx, `SELECT COUNT(*) FROM reservations WHERE extends_id IS NOT NULL`).Scan(&extends); err != nil || extends != 1 {
		t.Errorf("extensions on the target: %d, %v; want 1", extends, err)
	}

	want, err := src.ListAllLedger(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got, err := dst.ListAllLedger(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := market.CheckBalanced(got); err != nil {
		t.Errorf("the copied ledger: %v", err)
	}
	if !reflect.DeepEqual(market.Balance(got), market.Balance(want)) {
		t.Errorf("balances on the target %v, want %v", market.Balance(got), market.Balance(want))
	}
	var moved market.Cents
	for _, e := range want {
		moved += e.Amount
	}
	if rep.LedgerEntries != int64(len(want)) || rep.LedgerMoved != moved || rep.Accounts != len(market.Balance(want)) || len(want) < 5 {
		t.Errorf("report: %d entries moving %s over %d accounts; want %d moving %s over %d",
			rep.LedgerEntries, rep.LedgerMoved, rep.Accounts, len(want), moved, len(market.Balance(want)))
	}
	ms, err := migrations()
	if err != nil {
		t.Fatal(err)
	}
	if rep.SchemaVersion != ms[len(ms)-1].version {
		t.Errorf("schema version %d, want %d", rep.SchemaVersion, ms[len(ms)-1].version)
	}

	_, err = CopyDatabase(ctx, src, dst, CopyOptions{})
	wantMessage(t, err, market.CodeConflict, "not empty")

	// New rows continue after the copied ids.
	var maxUser, maxReservation int64
	src.reader.QueryRowContext(ctx, `SELECT MAX(id) FROM users`).Scan(&maxUser)
	src.reader.QueryRowContext(ctx, `SELECT MAX(id) FROM reservations`).Scan(&maxReservation)
	u := createUser(t, dst, "new@example.com", false)
	if u.ID <= maxUser {
		t.Errorf("new user on the copy has id %d; the source's largest is %d", u.ID, maxUser)
	}
	offers, err := dst.ListAllListedOffers(ctx, t0)
	if err != nil || len(offers) != 2 {
		t.Fatalf("listed offers on the copy: %d, %v", len(offers), err)
	}
	r := book(t, dst, u.ID, t0, piece(offers[0].Offer, 1, t0.Add(30*24*time.Hour), 2))
	if r.ID <= maxReservation {
		t.Errorf("new reservation on the copy has id %d; the source's largest is %d", r.ID, maxReservation)
	}
}

// TestCopyDatabaseIsAllOrNothing: rows PostgreSQL refuses (text with a
// NUL byte or bytes that are not UTF-8, which SQLite keeps) fail the copy,
// every one named by table, key and column, and leave the target empty, so
// the copy can run again once they are fixed.
func TestCopyDatabaseIsAllOrNothing(t *testing.T) {
	ctx := context.Background()
	src := openSQLiteFile(t)
	prov := createUser(t, src, "prov@example.com", true)
	listedOffer(t, src, prov.ID, 8)
	if err := src.SetSetting(ctx, "zz", "a\x00b"); err != nil {
		t.Fatal(err)
	}
	if _, err := src.writer.ExecContext(ctx, `UPDATE users SET display_name = CAST(X'ff41' AS TEXT) WHERE id = ?`, prov.ID); err != nil {
		t.Fatal(err)
	}
	dst := openPostgresDB(t)
	rep, err := CopyDatabase(ctx, src, dst, CopyOptions{})
	want := []Unstorable{
		{Table: "users", Key: fmt.Sprintf("id=%d", prov.ID), Column: "display_name", Problem: "bytes that are not UTF-8"},
		{Table: "settings", Key: `name="zz"`, Column: "value", Problem: "a NUL byte"},
	}
	wantCode(t, err, market.CodeInvalid)
	if !slices.Equal(rep.Unstorable, want) {
		t.Fatalf("unstorable rows: %+v; want %+v", rep.Unstorable, want)
	}
	emptyTarget := func() {
		t.Helper()
		for _, table := range sourceTables(t, src) {
			var n int
			if err := dst.reader.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+quoteIdent(table.name)).Scan(&n); err != nil || n != 0 {
				t.Errorf("table %s after the failed copy: %d rows, %v; want none", table.name, n, err)
			}
		}
	}
	emptyTarget()

	// Leaving them out cannot leave out a row others refer to: the
	// provider's offer refers to the user.
	rep, err = CopyDatabase(ctx, src, dst, CopyOptions{SkipUnstorable: true})
	if err == nil || !strings.Contains(err.Error(), "refers to a row left out") || len(rep.Unstorable) == 0 {
		t.Fatalf("copy leaving out a referenced row: %v, %+v", err, rep.Unstorable)
	}
	emptyTarget()

	// With the user fixed, the setting alone is left out and listed.
	if _, err := src.writer.ExecContext(ctx, `UPDATE users SET display_name = 'Prov' WHERE id = ?`, prov.ID); err != nil {
		t.Fatal(err)
	}
	rep, err = CopyDatabase(ctx, src, dst, CopyOptions{SkipUnstorable: true})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rep.Unstorable, want[1:]) {
		t.Fatalf("left out: %+v; want %+v", rep.Unstorable, want[1:])
	}
	if _, err := dst.GetSetting(ctx, "zz"); market.ErrorCode(err) != market.CodeNotFound {
		t.Fatalf("the left-out setting on the target: %v", err)
	}
	if u, err := dst.FindUserByID(ctx, prov.ID); err != nil || u.DisplayName != "Prov" {
		t.Fatalf("the provider on the target: %+v, %v", u, err)
	}
}

// TestCopyDatabaseRefuses: the wrong engines and differing schema
// versions are refused with messages saying so.
func TestCopyDatabaseRefuses(t *testing.T) {
	ctx := context.Background()
	src := openSQLiteFile(t)
	dst := openPostgresDB(t)
	_, err := CopyDatabase(ctx, dst, src, CopyOptions{})
	wantMessage(t, err, market.CodeInvalid, "from an SQLite database to a PostgreSQL database")
	_, err = CopyDatabase(ctx, src, src, CopyOptions{})
	wantMessage(t, err, market.CodeInvalid, "from an SQLite database to a PostgreSQL database")

	if _, err := dst.writer.ExecContext(ctx, `DELETE FROM schema_migrations WHERE version = (SELECT MAX(version) FROM schema_migrations)`); err != nil {
		t.Fatal(err)
	}
	_, err = CopyDatabase(ctx, src, dst, CopyOptions{})
	wantMessage(t, err, market.CodeConflict, "different schema versions")
}
