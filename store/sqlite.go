package store

// Everything specific to SQLite lives in this file: the driver, the DSN and
// its pragmas, pool sizes and the driver's error codes. The rest of the
// package speaks plain SQL that a PostgreSQL port can keep.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/gpumarket/gpumarket/market"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// sqlitePragmas are applied by the driver on every new connection.
//   - busy_timeout: another process (a second replica, the admin command)
//     holding the write lock makes us wait up to 10 s instead of failing with
//     SQLITE_BUSY at once.
//   - journal_mode(WAL): readers never block the writer and vice versa.
//   - foreign_keys(1): SQLite leaves them off per connection by default.
//   - synchronous(FULL): every commit is synced to disk (the WAL, in WAL
//     mode) before it returns, so what we acknowledge — a booking answered
//     201, a Stripe event answered 200, which Stripe will not send again —
//     survives a power loss, not only a crash of the process. NORMAL could
//     roll the last commits back. Group commit (groupcommit.go) shares one
//     sync among the bookings that arrive together.
var sqlitePragmas = []string{
	"busy_timeout(10000)",
	"journal_mode(WAL)",
	"foreign_keys(1)",
	"synchronous(FULL)",
}

// sqliteDSN builds the driver DSN for path. The writer begins every
// transaction with BEGIN IMMEDIATE so it takes the write lock up front: a
// deferred transaction that reads first and writes later could otherwise
// fail with SQLITE_BUSY when upgrading its lock, which busy_timeout cannot
// retry. Readers are query_only so a write sent to the wrong pool fails loudly.
func sqliteDSN(path string, writer bool) string {
	q := url.Values{}
	for _, p := range sqlitePragmas {
		q.Add("_pragma", p)
	}
	if writer {
		q.Set("_txlock", "immediate")
	} else {
		q.Add("_pragma", "query_only(1)")
	}
	return path + "?" + q.Encode()
}

// openSQLite opens the single-connection writer and the reader pool on the
// database file at path. The writer is opened and pinged first so the file
// exists and is in WAL mode before any reader connects.
func openSQLite(ctx context.Context, path string) (writer, reader *sql.DB, err error) {
	if strings.ContainsRune(path, '?') {
		return nil, nil, fmt.Errorf("store: database path %q must not contain '?'", path)
	}
	writer, err = sql.Open("sqlite", sqliteDSN(path, true))
	if err != nil {
		return nil, nil, fmt.Errorf("store: open writer: %w", err)
	}
	// One writer connection: SQLite allows one writer at a time anyway, and
	// queueing in database/sql is cheaper and fairer than busy-waiting.
	writer.SetMaxOpenConns(1)
	writer.SetMaxIdleConns(1)
	writer.SetConnMaxLifetime(0)
	// The first connection switches a new file to WAL, which needs the
	// file to itself: another process creating and migrating the same new
	// file at that moment answers SQLITE_BUSY at once (busy_timeout does
	// not wait where waiting could deadlock), so the connection is tried
	// again for as long as busy_timeout would have waited.
	for deadline := time.Now().Add(10 * time.Second); ; {
		err := writer.PingContext(ctx)
		if err == nil {
			break
		}
		if !isBusy(err) || time.Now().After(deadline) || ctx.Err() != nil {
			writer.Close()
			return nil, nil, fmt.Errorf("store: connect writer: %w", err)
		}
		time.Sleep(20 * time.Millisecond)
	}

	reader, err = sql.Open("sqlite", sqliteDSN(path, false))
	if err != nil {
		writer.Close()
		return nil, nil, fmt.Errorf("store: open readers: %w", err)
	}
	n := max(4, runtime.NumCPU())
	reader.SetMaxOpenConns(n)
	reader.SetMaxIdleConns(n)
	if err := reader.PingContext(ctx); err != nil {
		writer.Close()
		reader.Close()
		return nil, nil, fmt.Errorf("store: connect readers: %w", err)
	}
	return writer, reader, nil
}

// isBusy reports whether err is SQLite's "database is locked".
func isBusy(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_BUSY
}

// isSQLiteUnavailable reports an SQLite error that means the database
// cannot serve this request now: another connection or process held the
// write lock for longer than busy_timeout (SQLITE_BUSY, SQLITE_LOCKED).
func isSQLiteUnavailable(err error) bool {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	switch se.Code() & 0xff {
	case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
		return true
	}
	return false
}

// isUniqueViolation reports whether err is a UNIQUE or PRIMARY KEY
// constraint failure, by the driver's extended result code.
func isUniqueViolation(err error) bool {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	switch se.Code() {
	case sqlite3.SQLITE_CONSTRAINT_UNIQUE, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY:
		return true
	}
	return false
}

// sqliteTables lists the tables of an SQLite database for CopyDatabase, in
// the order they were created, without SQLite's own (sqlite_*) and
// schema_migrations: each with its columns, primary key and the tables its
// foreign keys reference.
func sqliteTables(ctx context.Context, q querier) ([]copyTable, error) {
	rows, err := q.QueryContext(ctx, `SELECT name FROM sqlite_master
		WHERE type = 'table' AND name NOT LIKE 'sqlite\_%' ESCAPE '\' AND name <> 'schema_migrations' ORDER BY rowid`)
	if err != nil {
		return nil, err
	}
	var tables []copyTable
	for rows.Next() {
		var t copyTable
		if err := rows.Scan(&t.name); err != nil {
			rows.Close()
			return nil, err
		}
		tables = append(tables, t)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return nil, err
	}
	for i := range tables {
		t := &tables[i]
		cols, err := q.QueryContext(ctx, `SELECT name, pk FROM pragma_table_info(?) ORDER BY cid`, t.name)
		if err != nil {
			return nil, err
		}
		keys := map[int]string{}
		for cols.Next() {
			var name string
			var pk int
			if err := cols.Scan(&name, &pk); err != nil {
				cols.Close()
				return nil, err
			}
			t.columns = append(t.columns, name)
			if pk > 0 {
				keys[pk] = name
			}
		}
		if err := errors.Join(cols.Err(), cols.Close()); err != nil {
			return nil, err
		}
		for k := 1; k <= len(keys); k++ {
			t.key = append(t.key, keys[k])
		}
		refs, err := q.QueryContext(ctx, `SELECT DISTINCT "table" FROM pragma_foreign_key_list(?)`, t.name)
		if err != nil {
			return nil, err
		}
		for refs.Next() {
			var parent string
			if err := refs.Scan(&parent); err != nil {
				refs.Close()
				return nil, err
			}
			t.parents = append(t.parents, parent)
		}
		if err := errors.Join(refs.Err(), refs.Close()); err != nil {
			return nil, err
		}
	}
	return tables, nil
}

// BackupReport is what BackupTo wrote and verified.
type BackupReport struct {
	Path          string
	Bytes         int64
	Reservations  int // reservations in the copy
	LedgerEntries int // ledger entries in the copy, balanced (market.CheckBalanced)
}

// BackupTo writes an online, consistent copy of the SQLite database to
// path while the server runs: VACUUM INTO on a reader connection copies
// one read snapshot (every transaction committed before it began, none
// after), and writers go on meanwhile (WAL). The copy is written beside
// path, then opened read-only and verified — PRAGMA integrity_check is
// "ok" and its ledger balances (market.CheckBalanced) — synced to disk and
// only then renamed to path, so path is either a verified backup or
// absent. path must not exist. On PostgreSQL it is refused: pg_dump takes
// the consistent copy there.
func (db *DB) BackupTo(ctx context.Context, path string) (BackupReport, error) {
	const op = "backup"
	if db.postgres {
		return BackupReport{}, invalid("The backup command copies the SQLite database; on PostgreSQL use pg_dump (see docs/postgres.md).")
	}
	if _, err := os.Stat(path); err == nil {
		return BackupReport{}, invalid(fmt.Sprintf("%s already exists: choose a new file for the backup.", path))
	} else if !errors.Is(err, os.ErrNotExist) {
		return BackupReport{}, fail(op, err, "")
	}
	if strings.ContainsRune(path, '?') {
		return BackupReport{}, invalid("The backup path must not contain '?'.")
	}
	partial := path + ".partial"
	os.Remove(partial) // a previous attempt's leftovers
	if err := db.vacuumInto(ctx, partial); err != nil {
		os.Remove(partial)
		return BackupReport{}, fail(op, err, "")
	}
	rep, err := verifyBackup(ctx, partial)
	if err == nil {
		err = syncFile(partial)
	}
	if err == nil {
		err = os.Rename(partial, path)
	}
	if err != nil {
		os.Remove(partial)
		return BackupReport{}, fail(op, err, "")
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil { // the rename survives a power loss
		d.Sync()
		d.Close()
	}
	rep.Path = path
	return rep, nil
}

// vacuumInto copies the database into the new file at path. It runs on a
// connection of its own: the readers are query_only, which refuses VACUUM
// INTO, and the writer would hold up every write while the copy is made.
// VACUUM INTO only reads the database, in one read transaction.
func (db *DB) vacuumInto(ctx context.Context, path string) error {
	q := url.Values{}
	for _, p := range sqlitePragmas {
		q.Add("_pragma", p)
	}
	c, err := sql.Open("sqlite", db.dsn+"?"+q.Encode())
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = c.ExecContext(ctx, `VACUUM INTO ?`, path)
	return err
}

// verifyBackup opens the SQLite copy at path read-only and checks it:
// integrity_check answers "ok" and the ledger balances.
func verifyBackup(ctx context.Context, path string) (BackupReport, error) {
	q := url.Values{}
	q.Set("mode", "ro")
	q.Add("_pragma", "query_only(1)")
	cp, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return BackupReport{}, err
	}
	defer cp.Close()
	var problems []string
	rows, err := cp.QueryContext(ctx, `PRAGMA integrity_check`)
	if err != nil {
		return BackupReport{}, fmt.Errorf("integrity check of the copy: %w", err)
	}
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			rows.Close()
			return BackupReport{}, err
		}
		if line != "ok" {
			problems = append(problems, line)
		}
	}
	if err := closeRows(rows); err != nil {
		return BackupReport{}, fmt.Errorf("integrity check of the copy: %w", err)
	}
	if len(problems) > 0 {
		return BackupReport{}, fmt.Errorf("the copy fails its integrity check: %s", strings.Join(problems, "; "))
	}
	var rep BackupReport
	if err := cp.QueryRowContext(ctx, `SELECT COUNT(*) FROM reservations`).Scan(&rep.Reservations); err != nil {
		return BackupReport{}, fmt.Errorf("count the copy's reservations: %w", err)
	}
	es, err := queryLedger(ctx, cp, ``)
	if err != nil {
		return BackupReport{}, fmt.Errorf("read the copy's ledger: %w", err)
	}
	if err := market.CheckBalanced(es); err != nil {
		return BackupReport{}, fmt.Errorf("the copy's ledger: %w", err)
	}
	rep.LedgerEntries = len(es)
	info, err := os.Stat(path)
	if err != nil {
		return BackupReport{}, err
	}
	rep.Bytes = info.Size()
	return rep, nil
}

// syncFile flushes the file at path to disk.
func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	return errors.Join(f.Sync(), f.Close())
}
