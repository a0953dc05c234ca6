package store

// Everything specific to SQLite lives in this file: the driver, the DSN and
// its pragmas, pool sizes and the driver's error codes. The rest of the
// package speaks plain SQL that a PostgreSQL port can keep.

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
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
// The writer's connections note the offers each transaction changes
// (sqliteConn) for feed.
func openSQLite(ctx context.Context, path string, feed *commitFeed) (writer, reader *sql.DB, err error) {
	if strings.ContainsRune(path, '?') {
		return nil, nil, fmt.Errorf("store: database path %q must not contain '?'", path)
	}
	base, err := sqlite.NewConnector(sqliteDSN(path, true))
	if err != nil {
		return nil, nil, fmt.Errorf("store: open writer: %w", err)
	}
	writer = sql.OpenDB(sqliteConnector{Connector: base, feed: feed})
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

	readerBase, err := sqlite.NewConnector(sqliteDSN(path, false))
	if err != nil {
		writer.Close()
		return nil, nil, fmt.Errorf("store: open readers: %w", err)
	}
	reader = sql.OpenDB(sqliteConnector{Connector: readerBase})
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

// sqliteChangeNotes sets up, on one writer connection, what the store's
// commit feed (feed.go) reads: a TEMP table of changed offer ids and TEMP
// triggers filling it, on the tables and columns PostgreSQL's triggers
// watch (migrations/postgres/0021_offer_changes.sql; an update of a child
// row notes the offer it left as well as the one it joined), each with
// whether its listing changed or only its commitments (OfferChanges): a
// reservation's pieces, and their reservation's state, change only the
// commitments, except interruptible pieces, whose payment moves the spot
// price quotes use (store.SpotQuotePrices). They are TEMP
// because a trigger in the database file cannot write to a TEMP table, and
// a table in the file would put a page of notes in the WAL on every
// commit: these live in the connection's memory, cost no sync, and are
// invisible to every other connection and process (the readers, the admin
// command, a backup). Rows written in a transaction that rolls back, or in
// a savepoint rolled back to, go with it.
const sqliteChangeNotes = `
CREATE TEMP TABLE IF NOT EXISTS changed_offers (offer_id INTEGER NOT NULL, listing INTEGER NOT NULL);
CREATE TEMP TRIGGER IF NOT EXISTS offers_inserted AFTER INSERT ON main.offers
	BEGIN INSERT INTO changed_offers VALUES (NEW.id, 1); END;
CREATE TEMP TRIGGER IF NOT EXISTS offers_updated AFTER UPDATE ON main.offers
	BEGIN INSERT INTO changed_offers VALUES (NEW.id, 1); END;
CREATE TEMP TRIGGER IF NOT EXISTS offers_deleted AFTER DELETE ON main.offers
	BEGIN INSERT INTO changed_offers VALUES (OLD.id, 1); END;
CREATE TEMP TRIGGER IF NOT EXISTS offer_credit_tiers_inserted AFTER INSERT ON main.offer_credit_tiers
	BEGIN INSERT INTO changed_offers VALUES (NEW.offer_id, 1); END;
CREATE TEMP TRIGGER IF NOT EXISTS offer_credit_tiers_updated AFTER UPDATE ON main.offer_credit_tiers
	BEGIN INSERT INTO changed_offers VALUES (NEW.offer_id, 1), (OLD.offer_id, 1); END;
CREATE TEMP TRIGGER IF NOT EXISTS offer_credit_tiers_deleted AFTER DELETE ON main.offer_credit_tiers
	BEGIN INSERT INTO changed_offers VALUES (OLD.offer_id, 1); END;
CREATE TEMP TRIGGER IF NOT EXISTS reservation_pieces_inserted AFTER INSERT ON main.reservation_pieces
	BEGIN INSERT INTO changed_offers VALUES (NEW.offer_id, NEW.interruptible <> 0); END;
CREATE TEMP TRIGGER IF NOT EXISTS reservation_pieces_updated AFTER UPDATE ON main.reservation_pieces
	BEGIN INSERT INTO changed_offers VALUES (NEW.offer_id, NEW.interruptible <> 0), (OLD.offer_id, OLD.interruptible <> 0); END;
CREATE TEMP TRIGGER IF NOT EXISTS reservation_pieces_deleted AFTER DELETE ON main.reservation_pieces
	BEGIN INSERT INTO changed_offers VALUES (OLD.offer_id, OLD.interruptible <> 0); END;
CREATE TEMP TRIGGER IF NOT EXISTS reservations_state_changed AFTER UPDATE OF state ON main.reservations
	WHEN OLD.state IS NOT NEW.state
	BEGIN INSERT INTO changed_offers SELECT offer_id, interruptible <> 0 FROM reservation_pieces WHERE reservation_id = NEW.id; END;
CREATE TEMP TRIGGER IF NOT EXISTS users_suspension_changed AFTER UPDATE OF suspended ON main.users
	WHEN OLD.suspended IS NOT NEW.suspended
	BEGIN INSERT INTO changed_offers SELECT id, 1 FROM offers WHERE provider_id = NEW.id; END;
CREATE TEMP TRIGGER IF NOT EXISTS host_tokens_revoked AFTER UPDATE OF revoked_at ON main.host_tokens
	WHEN OLD.revoked_at IS NOT NEW.revoked_at
	BEGIN INSERT INTO changed_offers VALUES (NEW.offer_id, 0); END;
`

// takeChangedQuery reads and clears the notes of the transaction under way.
const takeChangedQuery = `DELETE FROM changed_offers RETURNING offer_id, listing`

// sqliteConnector opens the writer's connections, each noting what its
// transactions change for feed, and the readers' (feed nil).
type sqliteConnector struct {
	driver.Connector
	feed *commitFeed
}

// Connect opens a writer connection; once the schema is migrated it sets
// up its change notes at once (a connection opened after a lost one).
func (c sqliteConnector) Connect(ctx context.Context) (driver.Conn, error) {
	cn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	w := &sqliteConn{conn: cn.(sqliteDriverConn), feed: c.feed, stmts: map[string]*cachedStmt{}}
	if c.feed != nil && c.feed.ready.Load() {
		if err := w.setUpNotes(ctx); err != nil {
			cn.Close()
			return nil, err
		}
	}
	return w, nil
}

// sqliteDriverConn is what every connection the SQLite driver opens
// implements, and sqliteConn forwards.
type sqliteDriverConn interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ConnPrepareContext
	driver.ExecerContext
	driver.QueryerContext
	driver.Pinger
	driver.SessionResetter
	driver.Validator
}

// sqliteConn is a connection of the writer, whose transactions' commits
// hand the offers they changed to feed, or of the readers (feed nil). It
// keeps every statement with arguments it runs prepared (stmts), since
// with modernc's SQLite parsing and planning a statement costs more than
// running it: the store's plain SQL next to each method then runs as if
// prepared, on every path (a heartbeat's first write, an agent's
// assignments, a booking).
type sqliteConn struct {
	conn  sqliteDriverConn
	feed  *commitFeed
	notes bool // the TEMP table and triggers are set up
	// stmts are the statements prepared on this connection, by query text
	// (at most maxCachedStmts). database/sql uses a connection from one
	// goroutine at a time, so they need no lock.
	stmts map[string]*cachedStmt
}

// maxCachedStmts bounds the statements a connection keeps prepared (the
// store's queries are a few hundred texts; one built with a varying number
// of placeholders runs unprepared once the cache is full).
const maxCachedStmts = 512

// cachedStmt is a statement kept prepared; busy while its rows are open,
// when the same text runs unprepared rather than reset them.
type cachedStmt struct {
	st   driver.Stmt
	busy bool
}

// cached returns the prepared statement for a query with arguments, nil
// when it should run unprepared (no arguments: a script or a pragma; the
// statement's rows still open; the cache full; a statement that does not
// prepare, whose error the unprepared run reports).
func (c *sqliteConn) cached(ctx context.Context, q string, args []driver.NamedValue) *cachedStmt {
	if len(args) == 0 {
		return nil
	}
	e := c.stmts[q]
	if e == nil {
		if len(c.stmts) >= maxCachedStmts {
			return nil
		}
		st, err := c.conn.PrepareContext(ctx, q)
		if err != nil {
			return nil
		}
		e = &cachedStmt{st: st}
		c.stmts[q] = e
	}
	if e.busy {
		return nil
	}
	return e
}

// cachedRows are the rows of a cached statement, which is free again once
// they are closed.
type cachedRows struct {
	driver.Rows
	e *cachedStmt
}

func (r *cachedRows) Close() error {
	r.e.busy = false
	return r.Rows.Close()
}

// setUpNotes creates the change notes on this connection.
func (c *sqliteConn) setUpNotes(ctx context.Context) error {
	if _, err := c.conn.ExecContext(ctx, sqliteChangeNotes, nil); err != nil {
		return fmt.Errorf("store: set up the change notes: %w", err)
	}
	c.notes = true
	return nil
}

// Unwrap returns the driver's connection.
func (c *sqliteConn) Unwrap() driver.Conn { return c.conn }

func (c *sqliteConn) Prepare(q string) (driver.Stmt, error) { return c.conn.Prepare(q) }
func (c *sqliteConn) PrepareContext(ctx context.Context, q string) (driver.Stmt, error) {
	return c.conn.PrepareContext(ctx, q)
}
func (c *sqliteConn) Close() error {
	for q, e := range c.stmts {
		e.st.Close()
		delete(c.stmts, q)
	}
	return c.conn.Close()
}
func (c *sqliteConn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}
func (c *sqliteConn) BeginTx(ctx context.Context, o driver.TxOptions) (driver.Tx, error) {
	tx, err := c.conn.BeginTx(ctx, o)
	if err != nil {
		return nil, err
	}
	return &sqliteTx{Tx: tx, c: c, ctx: ctx}, nil
}
func (c *sqliteConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	if e := c.cached(ctx, q, args); e != nil {
		e.busy = true
		defer func() { e.busy = false }()
		return e.st.(driver.StmtExecContext).ExecContext(ctx, args)
	}
	return c.conn.ExecContext(ctx, q, args)
}
func (c *sqliteConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	if e := c.cached(ctx, q, args); e != nil {
		e.busy = true
		rows, err := e.st.(driver.StmtQueryContext).QueryContext(ctx, args)
		if err != nil {
			e.busy = false
			return nil, err
		}
		return &cachedRows{Rows: rows, e: e}, nil
	}
	return c.conn.QueryContext(ctx, q, args)
}
func (c *sqliteConn) Ping(ctx context.Context) error         { return c.conn.Ping(ctx) }
func (c *sqliteConn) ResetSession(ctx context.Context) error { return c.conn.ResetSession(ctx) }
func (c *sqliteConn) IsValid() bool                          { return c.conn.IsValid() }

// sqliteTx is a write transaction whose commit publishes what it changed.
type sqliteTx struct {
	driver.Tx
	c   *sqliteConn
	ctx context.Context
}

// Commit takes the transaction's notes (inside it, so they go with a
// failed commit), commits, and only then hands them to the feed. A commit
// whose notes cannot be read is rolled back: nothing is stored that the
// index would not hear of.
func (t *sqliteTx) Commit() error {
	var ch OfferChanges
	if t.c.notes {
		var err error
		if ch, err = t.c.takeNotes(context.WithoutCancel(t.ctx)); err != nil {
			return errors.Join(fmt.Errorf("store: read the transaction's changed offers: %w", err), t.Tx.Rollback())
		}
	}
	if err := t.Tx.Commit(); err != nil {
		return err
	}
	if t.c.feed != nil {
		t.c.feed.publish(ch)
	}
	return nil
}

// takeNotes reads and clears the changes noted so far.
func (c *sqliteConn) takeNotes(ctx context.Context) (OfferChanges, error) {
	rows, err := c.conn.QueryContext(ctx, takeChangedQuery, nil)
	if err != nil {
		return OfferChanges{}, err
	}
	var listings, commitments []int64
	dest := make([]driver.Value, 2)
	for {
		err := rows.Next(dest)
		if err == io.EOF {
			break
		}
		if err != nil {
			rows.Close()
			return OfferChanges{}, err
		}
		id, ok1 := dest[0].(int64)
		listing, ok2 := dest[1].(int64)
		if !ok1 || !ok2 {
			rows.Close()
			return OfferChanges{}, fmt.Errorf("changed offer %v, %v (%T, %T) are not integers", dest[0], dest[1], dest[0], dest[1])
		}
		if listing != 0 {
			listings = append(listings, id)
		} else {
			commitments = append(commitments, id)
		}
	}
	if err := rows.Close(); err != nil {
		return OfferChanges{}, err
	}
	return newOfferChanges(listings, commitments), nil
}

// setUpChangeNotes sets the change notes up on the writer's connection
// once the schema they watch exists (after migrate), and on every writer
// connection opened from now on.
func (db *DB) setUpChangeNotes(ctx context.Context) error {
	db.feed.ready.Store(true)
	c, err := db.writer.Conn(ctx)
	if err != nil {
		return fmt.Errorf("store: set up the change notes: %w", err)
	}
	defer c.Close()
	return c.Raw(func(dc any) error {
		if w := dc.(*sqliteConn); !w.notes {
			return w.setUpNotes(ctx)
		}
		return nil
	})
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
