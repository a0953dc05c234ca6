package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

// sqliteOnly skips a test of SQLite's own files and pragmas on a
// PostgreSQL run.
func sqliteOnly(t *testing.T) {
	t.Helper()
	if pgtest.Enabled() {
		t.Skip("SQLite only: this test is about the database file")
	}
}

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// openTestDB opens a fresh database for t and returns it with what Open
// takes to open it again: an SQLite file in t.TempDir(), or on a
// PostgreSQL run (GPUMARKET_TEST_DB=postgres) a new database's URL.
func openTestDB(t *testing.T) (*DB, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "nested", "data", "test.db")
	if pgtest.Enabled() {
		path = pgtest.Database(t)
	}
	db, err := Open(context.Background(), path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	return db, path
}

func newDB(t *testing.T) *DB {
	db, _ := openTestDB(t)
	return db
}

func wantCode(t *testing.T, err error, code market.Code) {
	t.Helper()
	if got := market.ErrorCode(err); got != code {
		t.Fatalf("error code = %q (err %v), want %q", got, err, code)
	}
	var me *market.Error
	if !errors.As(err, &me) || me.Message == "" {
		t.Fatalf("error %v is not a *market.Error with a message", err)
	}
}

func createUser(t *testing.T, db *DB, email string, provider bool) market.User {
	t.Helper()
	u, err := db.CreateUser(context.Background(), market.User{
		Email: email, DisplayName: "Name " + email, Organisation: "Org " + email,
		IsBuyer: !provider, IsProvider: provider,
	}, []byte("hash-"+email), t0)
	if err != nil {
		t.Fatalf("CreateUser(%s): %v", email, err)
	}
	return u
}

func TestOpenMigratesOnceAndReopens(t *testing.T) {
	ctx := context.Background()
	db, path := openTestDB(t)
	u := createUser(t, db, "a@example.com", false)
	if err := db.Ping(ctx); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	if err := db.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	for i := 0; i < 2; i++ {
		db2, err := Open(ctx, path)
		if err != nil {
			t.Fatalf("reopen %d: %v", i, err)
		}
		ms, err := migrations()
		if err != nil {
			t.Fatal(err)
		}
		var n, maxVersion int
		if err := db2.reader.QueryRowContext(ctx, `SELECT COUNT(*), MAX(version) FROM schema_migrations`).Scan(&n, &maxVersion); err != nil {
			t.Fatal(err)
		}
		if n != len(ms) || maxVersion != ms[len(ms)-1].version {
			t.Errorf("schema_migrations has %d rows up to %d, want %d up to %d", n, maxVersion, len(ms), ms[len(ms)-1].version)
		}
		got, err := db2.FindUserByID(ctx, u.ID)
		if err != nil || got.Email != u.Email {
			t.Errorf("user after reopen = %+v, %v; want %+v", got, err, u)
		}
		db2.Close()
	}
}

func TestPragmas(t *testing.T) {
	sqliteOnly(t)
	ctx := context.Background()
	db := newDB(t)
	for _, pool := range []struct {
		name string
		q    querier
	}{{"writer", db.writer}, {"reader", db.reader}} {
		var mode string
		var fk, busy, sync int
		if err := pool.q.QueryRowContext(ctx, `PRAGMA journal_mode`).Scan(&mode); err != nil {
			t.Fatal(err)
		}
		if err := pool.q.QueryRowContext(ctx, `PRAGMA foreign_keys`).Scan(&fk); err != nil {
			t.Fatal(err)
		}
		if err := pool.q.QueryRowContext(ctx, `PRAGMA busy_timeout`).Scan(&busy); err != nil {
			t.Fatal(err)
		}
		if err := pool.q.QueryRowContext(ctx, `PRAGMA synchronous`).Scan(&sync); err != nil {
			t.Fatal(err)
		}
		// synchronous 2 is FULL: a commit is on disk when it returns, so a
		// booking answered 201 or a payment event answered 200 survives a
		// power loss (with NORMAL, 1, the last commits may roll back).
		if mode != "wal" || fk != 1 || busy != 10000 || sync != 2 {
			t.Errorf("%s: journal_mode=%s foreign_keys=%d busy_timeout=%d synchronous=%d", pool.name, mode, fk, busy, sync)
		}
	}
	if _, err := db.reader.ExecContext(ctx, `INSERT INTO settings (name, value) VALUES ('x', 'y')`); err == nil {
		t.Error("a write through the reader pool succeeded; readers must be query_only")
	}
}

func TestSettings(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	_, err := db.GetSetting(ctx, "demo_loaded")
	wantCode(t, err, market.CodeNotFound)
	for _, v := range []string{"1", "2"} {
		if err := db.SetSetting(ctx, "demo_loaded", v); err != nil {
			t.Fatal(err)
		}
		got, err := db.GetSetting(ctx, "demo_loaded")
		if err != nil || got != v {
			t.Fatalf("GetSetting = %q, %v; want %q", got, err, v)
		}
	}
}

// TestConcurrentWriters hammers the store from many goroutines, through two
// handles on the same file as two replicas would, while readers search.
func TestConcurrentWriters(t *testing.T) {
	ctx := context.Background()
	db, path := openTestDB(t)
	db2, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer db2.Close()
	handles := []*DB{db, db2}

	const n = 32
	var wg sync.WaitGroup
	errs := make(chan error, 4*n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := handles[i%2]
			u, err := h.CreateUser(ctx, market.User{Email: fmt.Sprintf("p%d@example.com", i), DisplayName: "P", IsProvider: true}, []byte("h"), t0)
			if err != nil {
				errs <- err
				return
			}
			o := validOffer(u.ID)
			o.Title = fmt.Sprintf("Offer %d", i)
			created, err := h.CreateOffer(ctx, o, t0)
			if err != nil {
				errs <- err
				return
			}
			if err := h.ReviewOffer(ctx, created.ID, market.ReviewApproved, "", t0); err != nil {
				errs <- err
				return
			}
			if _, err := h.CreateSession(ctx, u.ID, t0, time.Hour); err != nil {
				errs <- err
				return
			}
			if _, _, err := h.ThrottleHit(ctx, "login-ip:shared", t0, time.Minute, 1000); err != nil {
				errs <- err
			}
		}()
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, _, err := handles[(i+1)%2].FindOffers(ctx, OfferFilter{Now: t0, Limit: 10}); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("concurrent operation failed: %v", err)
	}

	users, err := db.CountUsers(ctx)
	if err != nil || users != n {
		t.Errorf("CountUsers = %d, %v; want %d", users, err, n)
	}
	listed, err := db2.ListAllListedOffers(ctx, t0)
	if err != nil || len(listed) != n {
		t.Errorf("listed offers = %d, %v; want %d", len(listed), err, n)
	}
	var sessions, hits int
	db.reader.QueryRowContext(ctx, `SELECT COUNT(*) FROM sessions`).Scan(&sessions)
	db.reader.QueryRowContext(ctx, `SELECT COUNT(*) FROM throttle_hits`).Scan(&hits)
	if sessions != n || hits != n {
		t.Errorf("sessions = %d, throttle hits = %d; want %d each", sessions, hits, n)
	}
}

// suspend suspends an account the audited way an admin does
// (SuspendProvider), and reinstate undoes it (ReinstateProvider).
func suspend(t *testing.T, db *DB, userID int64) {
	t.Helper()
	if _, err := db.SuspendProvider(context.Background(), testAdmin(t, db), userID, "test", t0); err != nil {
		t.Fatal(err)
	}
}

func reinstate(t *testing.T, db *DB, userID int64) {
	t.Helper()
	if _, err := db.ReinstateProvider(context.Background(), testAdmin(t, db), userID, "test", t0); err != nil {
		t.Fatal(err)
	}
}

// testAdmin returns the id of an admin account, created on first use.
func testAdmin(t *testing.T, db *DB) int64 {
	t.Helper()
	ctx := context.Background()
	if u, _, err := db.FindUserByEmail(ctx, "test-admin@example.com"); err == nil {
		return u.ID
	}
	u := createUser(t, db, "test-admin@example.com", false)
	if err := db.SetUserAdmin(ctx, u.ID, true); err != nil {
		t.Fatal(err)
	}
	return u.ID
}
