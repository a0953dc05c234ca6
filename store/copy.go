package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/gpumarket/gpumarket/market"
)

// CopyReport is what CopyDatabase copied and verified.
type CopyReport struct {
	SchemaVersion int          // the schema version both databases are at
	Tables        []TableCount // every table, in the order copied
	LedgerEntries int64        // ledger entries on both sides
	LedgerMoved   market.Cents // their amounts added up, the same on both sides
	Accounts      int          // ledger accounts whose balances were compared
}

// Rows is the number of rows copied, over every table.
func (r CopyReport) Rows() int64 {
	var n int64
	for _, t := range r.Tables {
		n += t.Rows
	}
	return n
}

// TableCount is one table's rows, counted on both sides after the copy.
type TableCount struct {
	Name string
	Rows int64
}

// copyTable is a table of the source schema as CopyDatabase needs it:
// its columns in order, its primary key and the tables it references.
type copyTable struct {
	name    string
	columns []string
	key     []string // primary key columns; none: the rowid
	parents []string // tables its foreign keys reference, itself included
}

// copyBatchRows is how many rows one INSERT carries at most (fewer for
// wide tables: PostgreSQL takes at most 65,535 parameters a statement).
const copyBatchRows = 500

// CopyDatabase copies every row of the SQLite database from into the
// PostgreSQL database to, which must be empty and at the same schema
// version (both are migrated when opened). It reads one snapshot of the
// source and writes in one write transaction on the target: tables in
// foreign-key order (a table referring to itself in id order), rows
// streamed in multi-row INSERTs with their ids, then each identity
// sequence moved past the largest id so new rows get fresh ones. Before it
// commits it verifies, in the same transaction, that every table has as
// many rows as the source and that the ledger's entries and every
// account's balance (debits less credits) are the same. On any failure
// nothing is written. A non-empty target and differing schemas are
// conflicts whose message says why.
func CopyDatabase(ctx context.Context, from, to *DB) (CopyReport, error) {
	const op = "copy database"
	if from.postgres || !to.postgres {
		return CopyReport{}, invalid("The copy goes from an SQLite database to a PostgreSQL database.")
	}
	src, err := from.read(ctx)
	if err != nil {
		return CopyReport{}, fail(op, err, "")
	}
	defer src.Rollback()
	tx, err := to.begin(ctx)
	if err != nil {
		return CopyReport{}, fail(op, err, "")
	}
	defer tx.Rollback()

	version, err := sameSchemaVersion(ctx, src, tx)
	if err != nil {
		return CopyReport{}, fail(op, err, "")
	}
	tables, err := sqliteTables(ctx, src)
	if err != nil {
		return CopyReport{}, fail(op, err, "")
	}
	targetColumns, err := pgTables(ctx, tx)
	if err != nil {
		return CopyReport{}, fail(op, err, "")
	}
	if err := sameTables(tables, targetColumns); err != nil {
		return CopyReport{}, err
	}
	for _, t := range tables {
		var one int
		err := tx.QueryRowContext(ctx, `SELECT 1 FROM `+quoteIdent(t.name)+` LIMIT 1`).Scan(&one)
		if err == nil {
			return CopyReport{}, conflict(fmt.Sprintf("The target database is not empty: table %s has rows. "+
				"The copy goes into an empty database only; create a new one (CREATE DATABASE) and copy into it.", t.name))
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return CopyReport{}, fail(op, err, "")
		}
	}
	ordered, err := copyOrder(tables)
	if err != nil {
		return CopyReport{}, err
	}

	rep := CopyReport{SchemaVersion: version}
	for _, t := range ordered {
		n, err := copyRows(ctx, src, tx, t)
		if err != nil {
			return CopyReport{}, fail(op+": table "+t.name, err, "")
		}
		rep.Tables = append(rep.Tables, TableCount{Name: t.name, Rows: n})
	}
	for _, t := range ordered {
		for _, c := range targetColumns[t.name] {
			if !c.identity {
				continue
			}
			// The next id is one past the largest copied (1 when none).
			if _, err := tx.ExecContext(ctx, `SELECT setval(pg_get_serial_sequence(?, ?), COALESCE(MAX(`+quoteIdent(c.name)+`), 0) + 1, false) FROM `+quoteIdent(t.name),
				quoteIdent(t.name), c.name); err != nil {
				return CopyReport{}, fail(op+": sequence of "+t.name, err, "")
			}
		}
	}

	if err := verifyCopy(ctx, src, tx, &rep); err != nil {
		return CopyReport{}, err
	}
	return rep, fail(op, tx.Commit(), "")
}

// sameSchemaVersion returns the schema version when both databases have
// applied the same migrations, else a conflict naming both versions.
func sameSchemaVersion(ctx context.Context, src, dst querier) (int, error) {
	versions := func(q querier) ([]int, error) {
		rows, err := q.QueryContext(ctx, `SELECT version FROM schema_migrations ORDER BY version`)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		var vs []int
		for rows.Next() {
			var v int
			if err := rows.Scan(&v); err != nil {
				return nil, err
			}
			vs = append(vs, v)
		}
		return vs, rows.Err()
	}
	a, err := versions(src)
	if err != nil {
		return 0, err
	}
	b, err := versions(dst)
	if err != nil {
		return 0, err
	}
	last := func(vs []int) int {
		if len(vs) == 0 {
			return 0
		}
		return vs[len(vs)-1]
	}
	if !slices.Equal(a, b) {
		return 0, conflict(fmt.Sprintf("The databases are at different schema versions: the source at %d (%d migrations), the target at %d (%d migrations). "+
			"Open both with the same gpumarket release, which migrates them, and copy again.", last(a), len(a), last(b), len(b)))
	}
	return last(a), nil
}

// sameTables checks that the target has the source's tables with the same
// columns and no others, so no row and no column is left behind.
func sameTables(tables []copyTable, target map[string][]pgColumn) error {
	seen := map[string]bool{}
	for _, t := range tables {
		seen[t.name] = true
		cols, ok := target[t.name]
		if !ok {
			return conflict(fmt.Sprintf("The target database has no table %s; the schemas differ.", t.name))
		}
		names := make([]string, len(cols))
		for i, c := range cols {
			names[i] = c.name
		}
		if !slices.Equal(slices.Sorted(slices.Values(t.columns)), slices.Sorted(slices.Values(names))) {
			return conflict(fmt.Sprintf("Table %s has columns %s in the source and %s in the target; the schemas differ.",
				t.name, strings.Join(t.columns, ", "), strings.Join(names, ", ")))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(target)) {
		if !seen[name] && name != "schema_migrations" {
			return conflict(fmt.Sprintf("The target database has a table %s the source does not; the schemas differ.", name))
		}
	}
	return nil
}

// copyOrder orders tables so that every table comes after the tables it
// references, keeping the source's order otherwise. A table's references
// to itself are left to the row order (copyRows copies in key order).
func copyOrder(tables []copyTable) ([]copyTable, error) {
	var out []copyTable
	placed := map[string]bool{}
	for len(out) < len(tables) {
		progress := false
		for _, t := range tables {
			if placed[t.name] {
				continue
			}
			ready := true
			for _, p := range t.parents {
				ready = ready && (p == t.name || placed[p])
			}
			if ready {
				out = append(out, t)
				placed[t.name] = true
				progress = true
			}
		}
		if !progress {
			var left []string
			for _, t := range tables {
				if !placed[t.name] {
					left = append(left, t.name)
				}
			}
			return nil, fmt.Errorf("store: copy database: the foreign keys of %s form a cycle", strings.Join(left, ", "))
		}
	}
	return out, nil
}

// copyRows streams the rows of t from src into dst in key order, in
// multi-row INSERTs, and returns how many it copied.
func copyRows(ctx context.Context, src, dst querier, t copyTable) (int64, error) {
	cols := make([]string, len(t.columns))
	for i, c := range t.columns {
		cols[i] = quoteIdent(c)
	}
	order := "rowid"
	if len(t.key) > 0 {
		keys := make([]string, len(t.key))
		for i, k := range t.key {
			keys[i] = quoteIdent(k)
		}
		order = strings.Join(keys, ", ")
	}
	list := strings.Join(cols, ", ")
	rows, err := src.QueryContext(ctx, `SELECT `+list+` FROM `+quoteIdent(t.name)+` ORDER BY `+order)
	if err != nil {
		return 0, err
	}
	defer rows.Close()

	perBatch := max(1, min(copyBatchRows, 65535/len(cols)))
	tuple := "(" + placeholders(len(cols)) + ")"
	var args []any
	pending := 0
	flush := func() error {
		if pending == 0 {
			return nil
		}
		q := `INSERT INTO ` + quoteIdent(t.name) + ` (` + list + `) VALUES ` + strings.TrimSuffix(strings.Repeat(tuple+", ", pending), ", ")
		_, err := dst.ExecContext(ctx, q, args...)
		args, pending = args[:0], 0
		return err
	}
	var n int64
	vals := make([]any, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return n, err
		}
		args = append(args, vals...)
		pending++
		n++
		if pending == perBatch {
			if err := flush(); err != nil {
				return n, err
			}
		}
	}
	if err := rows.Err(); err != nil {
		return n, err
	}
	return n, flush()
}

// verifyCopy counts every table's rows on both sides and compares the
// ledger: the number of entries, their total and each account's balance.
// It fills in rep's ledger figures and replaces its counts by the
// target's.
func verifyCopy(ctx context.Context, src, dst querier, rep *CopyReport) error {
	const op = "verify copy"
	for i, t := range rep.Tables {
		var a, b int64
		q := `SELECT COUNT(*) FROM ` + quoteIdent(t.Name)
		if err := src.QueryRowContext(ctx, q).Scan(&a); err != nil {
			return fail(op, err, "")
		}
		if err := dst.QueryRowContext(ctx, q).Scan(&b); err != nil {
			return fail(op, err, "")
		}
		if a != b || a != t.Rows {
			return fmt.Errorf("store: %s: table %s has %d rows in the source and %d in the target (%d copied)", op, t.Name, a, b, t.Rows)
		}
		rep.Tables[i].Rows = b
	}

	const totals = `SELECT COUNT(*), CAST(COALESCE(SUM(amount_cents), 0) AS BIGINT) FROM ledger_entries`
	var n1, n2 int64
	var sum1, sum2 market.Cents
	if err := src.QueryRowContext(ctx, totals).Scan(&n1, &sum1); err != nil {
		return fail(op, err, "")
	}
	if err := dst.QueryRowContext(ctx, totals).Scan(&n2, &sum2); err != nil {
		return fail(op, err, "")
	}
	if n1 != n2 || sum1 != sum2 {
		return fmt.Errorf("store: %s: the ledger has %d entries moving %s in the source and %d moving %s in the target", op, n1, sum1, n2, sum2)
	}
	a, err := ledgerBalances(ctx, src)
	if err != nil {
		return fail(op, err, "")
	}
	b, err := ledgerBalances(ctx, dst)
	if err != nil {
		return fail(op, err, "")
	}
	for _, acct := range slices.Sorted(maps.Keys(a)) {
		if got, ok := b[acct]; !ok || got != a[acct] {
			return fmt.Errorf("store: %s: account %s has a balance of %s in the source and %s in the target", op, acct, a[acct], got)
		}
	}
	if len(a) != len(b) {
		return fmt.Errorf("store: %s: the ledger has %d accounts in the source and %d in the target", op, len(a), len(b))
	}
	rep.LedgerEntries, rep.LedgerMoved, rep.Accounts = n1, sum1, len(a)
	return nil
}

// ledgerBalances is every ledger account's debits less its credits.
func ledgerBalances(ctx context.Context, q querier) (map[string]market.Cents, error) {
	rows, err := q.QueryContext(ctx, `SELECT account, CAST(SUM(amount) AS BIGINT) FROM (
			SELECT debit_account AS account, amount_cents AS amount FROM ledger_entries
			UNION ALL
			SELECT credit_account, -amount_cents FROM ledger_entries) AS legs
		GROUP BY account`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]market.Cents{}
	for rows.Next() {
		var acct string
		var c market.Cents
		if err := rows.Scan(&acct, &c); err != nil {
			return nil, err
		}
		out[acct] = c
	}
	return out, rows.Err()
}

// quoteIdent quotes a table or column name the same way on both engines.
func quoteIdent(name string) string {
	return `"` + strings.ReplaceAll(name, `"`, `""`) + `"`
}
