package store

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
	"time"
)

// migrationFiles holds the numbered schema migrations. They are append-only:
// never edit a released file, add the next number instead.
//
//go:embed migrations/*.sql migrations/postgres/*.sql
var migrationFiles embed.FS

type migration struct {
	version  int
	name     string
	sql      string // SQLite
	postgres string // the same migration on PostgreSQL
}

// migrations returns the embedded migrations ordered by version.
func migrations() ([]migration, error) {
	entries, err := fs.ReadDir(migrationFiles, "migrations")
	if err != nil {
		return nil, err
	}
	var out []migration
	seen := map[int]string{}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".sql") {
			continue
		}
		num, _, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v < 1 {
			return nil, fmt.Errorf("migration %q: name must start with a positive number and an underscore", name)
		}
		if other, dup := seen[v]; dup {
			return nil, fmt.Errorf("migrations %q and %q share version %d", other, name, v)
		}
		seen[v] = name
		b, err := migrationFiles.ReadFile("migrations/" + name)
		if err != nil {
			return nil, err
		}
		pg := translatePostgres(string(b))
		if extra, err := migrationFiles.ReadFile("migrations/postgres/" + name); err == nil {
			pg += string(extra)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		out = append(out, migration{version: v, name: name, sql: string(b), postgres: pg})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].version < out[j].version })
	return out, nil
}

// migrate applies every migration not yet recorded in schema_migrations, in
// order, each in its own transaction together with its record, so a failed
// migration leaves no trace and a concurrent Open (another replica) cannot
// apply the same one twice.
func (db *DB) migrate(ctx context.Context) error {
	ms, err := migrations()
	if err != nil {
		return fmt.Errorf("store: read migrations: %w", err)
	}
	// In a write transaction, which on PostgreSQL takes the write lock
	// first: CREATE TABLE IF NOT EXISTS is not safe against a concurrent
	// creation, and replicas starting together on an empty database would
	// otherwise race on it (duplicate key in pg_type).
	tx, err := db.begin(ctx)
	if err != nil {
		return fmt.Errorf("store: create schema_migrations: %w", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    BIGINT  PRIMARY KEY,
		name       TEXT    NOT NULL,
		applied_at BIGINT  NOT NULL
	)`); err != nil {
		return fmt.Errorf("store: create schema_migrations: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("store: create schema_migrations: %w", err)
	}
	for _, m := range ms {
		if err := db.applyMigration(ctx, m); err != nil {
			return fmt.Errorf("store: migration %s: %w", m.name, err)
		}
	}
	return nil
}

// codeMigrations finish a numbered migration with what SQL cannot
// express, in the same transaction, after the migration's SQL.
var codeMigrations = map[int]func(ctx context.Context, tx *sql.Tx) error{
	11: placeRecordedPieces, // 0011_piece_nodes.sql
}

func (db *DB) applyMigration(ctx context.Context, m migration) error {
	tx, err := db.begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback()

	var n int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM schema_migrations WHERE version = ?`, m.version).Scan(&n); err != nil {
		return err
	}
	if n > 0 {
		return nil
	}
	script := m.sql
	if db.postgres {
		script = m.postgres
	}
	if _, err := tx.ExecContext(ctx, script); err != nil {
		return err
	}
	if f := codeMigrations[m.version]; f != nil {
		if err := f(ctx, tx); err != nil {
			return err
		}
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`,
		m.version, m.name, unix(time.Now())); err != nil {
		return err
	}
	return tx.Commit()
}
