// Package store persists market values in SQLite (the embedded default) or
// PostgreSQL, with the same SQL and the same tests. Every exported method is
// one transaction; writes go through the writer (one connection with
// immediate transactions on SQLite, transactions under advisory locks on
// PostgreSQL: one at a time, but bookings of different offers for different
// buyers at once), reads through a separate pool of read-only
// connections. Not found and conflicts are *market.Error values; anything
// else is an internal error wrapped with the operation that failed.
package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// DB is the application's database: one writer connection and a pool of
// readers on the same file. It is safe for concurrent use.
type DB struct {
	postgres   bool   // the engine: PostgreSQL, else SQLite
	dsn        string // what Open was given
	feedDSN    string // where the change feed connects, when not dsn (FollowDirect)
	writer     *sql.DB
	reader     *sql.DB
	stmts      stmtCache    // prepared on the writer, for the booking path
	reads      stmtCache    // prepared on the readers, for per-request lookups
	bookings   bookingQueue // concurrent bookings waiting to share a transaction
	heartbeats bookingQueue // concurrent heartbeats written in full, likewise (RecordHeartbeatRun)
	feed       *commitFeed  // the offers each write transaction changed, published on commit (feed.go)
}

// Open opens the database named by dsn — a postgres:// URL (IsPostgresURL)
// or else an SQLite file path, created with its parent directory when
// missing — and applies any pending migrations before returning (unless
// WithoutMigrating).
func Open(ctx context.Context, dsn string, opts ...OpenOption) (*DB, error) {
	var cfg openConfig
	for _, o := range opts {
		o(&cfg)
	}
	db := &DB{postgres: IsPostgresURL(dsn), dsn: dsn, feed: &commitFeed{}}
	var err error
	if db.postgres {
		db.writer, db.reader, err = openPostgres(ctx, dsn, db.feed)
	} else {
		if dir := filepath.Dir(dsn); dir != "" {
			if err := os.MkdirAll(dir, 0o750); err != nil {
				return nil, fmt.Errorf("store: create data directory: %w", err)
			}
		}
		db.writer, db.reader, err = openSQLite(ctx, dsn, db.feed)
	}
	if err != nil {
		return nil, err
	}
	if cfg.noMigrate {
		return db, nil
	}
	if err := db.migrate(ctx); err != nil {
		db.Close()
		return nil, err
	}
	if !db.postgres {
		if err := db.setUpChangeNotes(ctx); err != nil {
			db.Close()
			return nil, err
		}
	}
	return db, nil
}

// OpenOption changes what Open does.
type OpenOption func(*openConfig)

type openConfig struct {
	noMigrate bool
}

// WithoutMigrating opens the database as it is: no migration is applied
// and nothing is written on opening, so a tool of a newer release (the
// backup command) can read the database of an older server still running
// on it. The handle is for reading (SchemaVersion, BackupTo): the change
// notes of SQLite's writer are not set up.
func WithoutMigrating() OpenOption {
	return func(c *openConfig) { c.noMigrate = true }
}

// SchemaVersion returns the highest migration recorded in the database
// (0 when it has none: not a marketplace database) and the highest this
// release knows.
func (db *DB) SchemaVersion(ctx context.Context) (have, known int, err error) {
	ms, err := migrations()
	if err != nil {
		return 0, 0, fmt.Errorf("store: read migrations: %w", err)
	}
	if len(ms) > 0 {
		known = ms[len(ms)-1].version
	}
	var exists int
	if err := db.reader.QueryRowContext(ctx, tableExistsQuery(db.postgres), "schema_migrations").Scan(&exists); err != nil {
		return 0, known, fmt.Errorf("store: schema version: %w", err)
	}
	if exists == 0 {
		return 0, known, nil
	}
	if err := db.reader.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&have); err != nil {
		return 0, known, fmt.Errorf("store: schema version: %w", err)
	}
	return have, known, nil
}

// tableExistsQuery counts the tables named by its one parameter.
func tableExistsQuery(postgres bool) string {
	if postgres {
		return `SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = current_schema() AND table_name = $1`
	}
	return `SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = ?`
}

// Close closes the writer and the readers.
func (db *DB) Close() error {
	return errors.Join(db.stmts.close(), db.reads.close(), db.writer.Close(), db.reader.Close())
}

// Ping reports whether the database can be reached for reading and writing,
// for health checks.
func (db *DB) Ping(ctx context.Context) error {
	if err := db.writer.PingContext(ctx); err != nil {
		return fmt.Errorf("store: ping writer: %w", err)
	}
	var one int
	if err := db.reader.QueryRowContext(ctx, `SELECT 1`).Scan(&one); err != nil {
		return fmt.Errorf("store: ping readers: %w", err)
	}
	return nil
}

// Postgres reports whether the database is PostgreSQL (else SQLite).
func (db *DB) Postgres() bool { return db.postgres }

// begin starts a write transaction. On SQLite the one writer connection
// and BEGIN IMMEDIATE make writes one at a time; on PostgreSQL the
// transaction first takes the write lock (postgres.go) exclusive, which
// every replica's writes share, so it runs alone. A context with a fence
// (WithFence) has the transaction refused when its lease was lost.
func (db *DB) begin(ctx context.Context) (*sql.Tx, error) {
	return db.beginLocked(ctx, bookingLocks{})
}

// beginLocked starts a write transaction as begin does, but on PostgreSQL
// with the locks a booking's transaction needs (bookingLocks): the write
// lock shared and locks's keys exclusive, or, when locks is whole (no
// offers), the write lock exclusive as begin takes it. SQLite has one
// writer either way.
func (db *DB) beginLocked(ctx context.Context, locks bookingLocks) (*sql.Tx, error) {
	tx, err := db.writer.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	if db.postgres {
		if err := lockPostgres(ctx, tx, locks); err != nil {
			tx.Rollback()
			return nil, err
		}
	}
	if err := db.checkFence(ctx, tx); err != nil {
		tx.Rollback()
		return nil, err
	}
	return tx, nil
}

// lockPostgres takes locks at the start of a PostgreSQL write transaction.
func lockPostgres(ctx context.Context, tx *sql.Tx, locks bookingLocks) error {
	if locks.whole() {
		_, err := tx.ExecContext(ctx, pgLockQuery)
		return err
	}
	if _, err := tx.ExecContext(ctx, pgSharedLockQuery); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, pgKeyLocksQuery, pgKeyArray(locks.keys()))
	return err
}

// read starts a read-only transaction on the reader pool, so the several
// queries of one method see one consistent snapshot (SQLite's read
// transactions do; PostgreSQL needs REPEATABLE READ for it).
func (db *DB) read(ctx context.Context) (*sql.Tx, error) {
	opts := &sql.TxOptions{ReadOnly: true}
	if db.postgres {
		opts.Isolation = sql.LevelRepeatableRead
	}
	return db.reader.BeginTx(ctx, opts)
}

// querier is what *sql.Tx and *sql.DB have in common, for helpers that run
// inside a write transaction as well as a read one.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// fail is the one place where a database error becomes the error a store
// method returns: a *market.Error passes through unchanged, a unique
// constraint failure becomes a conflict with conflictMsg (when one is
// given), and anything else is wrapped as "store: <op>: <err>". A nil err
// stays nil.
func fail(op string, err error, conflictMsg string) error {
	if err == nil {
		return nil
	}
	var me *market.Error
	if errors.As(err, &me) {
		return err
	}
	if conflictMsg != "" && (isUniqueViolation(err) || isPgUniqueViolation(err)) {
		return &market.Error{Code: market.CodeConflict, Message: conflictMsg}
	}
	return fmt.Errorf("store: %s: %w", op, err)
}

func notFound(msg string) error {
	return &market.Error{Code: market.CodeNotFound, Message: msg}
}

func conflict(msg string) error {
	return &market.Error{Code: market.CodeConflict, Message: msg}
}

func invalid(msg string) error {
	return &market.Error{Code: market.CodeInvalid, Message: msg}
}

// badText is an invalid error naming field when s holds a control
// character (market.TextProblem), or nil.
func badText(field, s string, multiline bool) error {
	if msg := market.TextProblem(s, multiline); msg != "" {
		return &market.Error{Code: market.CodeInvalid, Message: msg, Fields: map[string]string{field: msg}}
	}
	return nil
}

// Person-safe messages for missing rows.
const (
	msgUserNotFound    = "That account could not be found."
	msgOfferNotFound   = "That offer could not be found."
	msgSessionNotFound = "Your session has ended. Please log in again."
	msgSettingNotFound = "That setting has not been set."
)

// Timestamps are stored as INTEGER unix seconds, UTC, everywhere.

func unix(t time.Time) int64 { return t.Unix() }

func fromUnix(s int64) time.Time { return time.Unix(s, 0).UTC() }

// truncate returns t as it will read back from the database.
func truncate(t time.Time) time.Time { return fromUnix(unix(t)) }

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// placeholders returns "?, ?, ?" for n arguments.
func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}
