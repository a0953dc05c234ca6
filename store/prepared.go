package store

import (
	"context"
	"database/sql"
	"sync"
)

// stmtCache holds statements prepared once on the writer connection, for
// the hot write path (booking): with modernc's SQLite, parsing and planning
// a statement costs more than running it.
type stmtCache struct {
	m sync.Map // query text → *sql.Stmt
}

// prepare prepares the queries not yet in the cache. It must run outside
// any write transaction: preparing needs the one writer connection.
func (c *stmtCache) prepare(ctx context.Context, writer *sql.DB, queries []string) error {
	for _, q := range queries {
		if _, ok := c.m.Load(q); ok {
			continue
		}
		s, err := writer.PrepareContext(ctx, q)
		if err != nil {
			return err
		}
		if _, loaded := c.m.LoadOrStore(q, s); loaded {
			s.Close()
		}
	}
	return nil
}

func (c *stmtCache) close() error {
	var first error
	c.m.Range(func(k, v any) bool {
		if err := v.(*sql.Stmt).Close(); err != nil && first == nil {
			first = err
		}
		c.m.Delete(k)
		return true
	})
	return first
}

// preparedTx is a write transaction whose queries run through the cached
// prepared statements when there is one for the exact query text, and as
// plain queries otherwise. It is a querier, so the package's lowercase
// helpers take it as they take a *sql.Tx.
type preparedTx struct {
	*sql.Tx
	cache *stmtCache
}

// beginPrepared prepares queries on the writer, once per handle, then
// starts a write transaction like beginLocked (with locks) whose queries
// use them.
func (db *DB) beginPrepared(ctx context.Context, queries []string, locks bookingLocks) (preparedTx, error) {
	if err := db.stmts.prepare(ctx, db.writer, queries); err != nil {
		return preparedTx{}, err
	}
	tx, err := db.beginLocked(ctx, locks)
	if err != nil {
		return preparedTx{}, err
	}
	return preparedTx{Tx: tx, cache: &db.stmts}, nil
}

// stmt returns the transaction's handle on the cached statement for query,
// or nil when there is none.
func (t preparedTx) stmt(ctx context.Context, query string) *sql.Stmt {
	s, ok := t.cache.m.Load(query)
	if !ok {
		return nil
	}
	return t.Tx.StmtContext(ctx, s.(*sql.Stmt))
}

// ExecContext runs query through its prepared statement.
func (t preparedTx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if s := t.stmt(ctx, query); s != nil {
		return s.ExecContext(ctx, args...)
	}
	return t.Tx.ExecContext(ctx, query, args...)
}

// QueryContext runs query through its prepared statement.
func (t preparedTx) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if s := t.stmt(ctx, query); s != nil {
		return s.QueryContext(ctx, args...)
	}
	return t.Tx.QueryContext(ctx, query, args...)
}

// QueryRowContext runs query through its prepared statement.
func (t preparedTx) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if s := t.stmt(ctx, query); s != nil {
		return s.QueryRowContext(ctx, args...)
	}
	return t.Tx.QueryRowContext(ctx, query, args...)
}

// readStmt returns the reader-pool statement for query, preparing it on
// first use. Lookups that run on every request (an API token) are single
// statements, so they need no explicit transaction, and with a prepared
// statement they skip SQLite's parser, which costs more than the lookup.
func (db *DB) readStmt(ctx context.Context, query string) (*sql.Stmt, error) {
	if s, ok := db.reads.m.Load(query); ok {
		return s.(*sql.Stmt), nil
	}
	if err := db.reads.prepare(ctx, db.reader, []string{query}); err != nil {
		return nil, err
	}
	s, _ := db.reads.m.Load(query)
	return s.(*sql.Stmt), nil
}
