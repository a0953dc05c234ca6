package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/gpumarket/gpumarket/market"
)

// CopyReport is what CopyDatabase copied and verified.
type CopyReport struct {
	SchemaVersion int          // the schema version both databases are at
	Tables        []TableCount // every table, in the order copied
	LedgerEntries int64        // ledger entries on both sides
	LedgerMoved   market.Cents // their amounts added up, the same on both sides
	Accounts      int          // ledger accounts whose balances were compared
	// Unstorable lists the source rows PostgreSQL cannot store, by table
	// and key: left out of the copy (CopyOptions.SkipUnstorable), or the
	// reason it failed.
	Unstorable []Unstorable
}

// Unstorable is a source row PostgreSQL cannot store as it is: a text
// value holding a NUL byte or bytes that are not UTF-8, which SQLite keeps
// (the web boundary refuses such text now; older rows may hold it).
type Unstorable struct {
	Table   string
	Key     string // the row's primary key, e.g. "id=42" or "key=zz"; "rowid=7" for a table without one
	Column  string // the first column found at fault
	Problem string // "a NUL byte" or "bytes that are not UTF-8"
}

func (u Unstorable) String() string {
	return fmt.Sprintf("table %s, row %s: column %s holds %s", u.Table, u.Key, u.Column, u.Problem)
}

// CopyOptions changes what CopyDatabase does with unstorable rows.
type CopyOptions struct {
	// SkipUnstorable copies every other row and leaves the unstorable ones
	// out, listed in the report. The copy still fails if another row refers
	// to one left out (a foreign key) or the ledger would then differ.
	// Without it, any unstorable row fails the copy, and every one is named.
	SkipUnstorable bool
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
// conflicts whose message says why. Rows holding text PostgreSQL cannot
// store are found in the same pass and named by table and key
// (rep.Unstorable): they fail the copy with every one listed, or are left
// out with opts.SkipUnstorable.
func CopyDatabase(ctx context.Context, from, to *DB, opts CopyOptions) (CopyReport, error) {
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
	skipped := map[string]int64{}
	for _, t := range ordered {
		// Once a row cannot be stored and will not be skipped, the copy
		// fails: the rest is only read, to name every such row.
		write := opts.SkipUnstorable || len(rep.Unstorable) == 0
		n, bad, err := copyRows(ctx, src, tx, t, write)
		rep.Unstorable = append(rep.Unstorable, bad...)
		if err != nil {
			if len(rep.Unstorable) > 0 && isPgForeignKeyViolation(err) {
				return rep, fmt.Errorf("store: %s: table %s refers to a row left out as unstorable (%w); fix the rows listed in the source and copy again", op, t.name, err)
			}
			return rep, fail(op+": table "+t.name, err, "")
		}
		skipped[t.name] = int64(len(bad))
		rep.Tables = append(rep.Tables, TableCount{Name: t.name, Rows: n})
	}
	if len(rep.Unstorable) > 0 && !opts.SkipUnstorable {
		return rep, &market.Error{Code: market.CodeInvalid, Message: fmt.Sprintf(
			"%d rows hold text PostgreSQL cannot store (a NUL byte, or bytes that are not UTF-8); nothing was copied. "+
				"Fix or delete them in the source and copy again, or copy without them (-skip-unstorable).", len(rep.Unstorable))}
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

	if err := verifyCopy(ctx, src, tx, &rep, skipped); err != nil {
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
// multi-row INSERTs, and returns how many it copied and the rows it left
// out because PostgreSQL cannot store them. With write false it only reads,
// to find such rows.
func copyRows(ctx context.Context, src, dst querier, t copyTable, write bool) (int64, []Unstorable, error) {
	cols := make([]string, len(t.columns))
	for i, c := range t.columns {
		cols[i] = quoteIdent(c)
	}
	keyCols := t.key
	order := "rowid"
	if len(t.key) > 0 {
		keys := make([]string, len(t.key))
		for i, k := range t.key {
			keys[i] = quoteIdent(k)
		}
		order = strings.Join(keys, ", ")
	} else {
		keyCols = []string{"rowid"}
	}
	list := strings.Join(cols, ", ")
	selected := list
	if len(t.key) == 0 {
		selected += ", rowid" // to name a row; not copied
	}
	rows, err := src.QueryContext(ctx, `SELECT `+selected+` FROM `+quoteIdent(t.name)+` ORDER BY `+order)
	if err != nil {
		return 0, nil, err
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
	var bad []Unstorable
	width := len(cols)
	if len(t.key) == 0 {
		width++
	}
	vals := make([]any, width)
	ptrs := make([]any, width)
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	index := map[string]int{"rowid": len(cols)}
	for i, c := range t.columns {
		index[c] = i
	}
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return n, bad, err
		}
		if col, problem := unstorable(t.columns, vals[:len(cols)]); problem != "" {
			key := make([]string, len(keyCols))
			for i, k := range keyCols {
				key[i] = fmt.Sprintf("%s=%v", k, printable(vals[index[k]]))
			}
			bad = append(bad, Unstorable{Table: t.name, Key: strings.Join(key, ","), Column: col, Problem: problem})
			continue
		}
		if !write {
			continue
		}
		args = append(args, vals[:len(cols)]...)
		pending++
		n++
		if pending == perBatch {
			if err := flush(); err != nil {
				return n, bad, err
			}
		}
	}
	if err := rows.Err(); err != nil {
		return n, bad, err
	}
	return n, bad, flush()
}

// unstorable names the first text value PostgreSQL cannot store and why,
// or "", "".
func unstorable(columns []string, vals []any) (column, problem string) {
	for i, v := range vals {
		s, ok := v.(string)
		switch {
		case !ok:
		case strings.IndexByte(s, 0) >= 0:
			return columns[i], "a NUL byte"
		case !utf8.ValidString(s):
			return columns[i], "bytes that are not UTF-8"
		}
	}
	return "", ""
}

// printable is a key value as a report shows it: quoted and escaped when
// it is text, so a NUL in a key is seen, not printed.
func printable(v any) string {
	if s, ok := v.(string); ok {
		return strconv.Quote(s)
	}
	return fmt.Sprint(v)
}

// verifyCopy counts every table's rows on both sides and compares the
// ledger: the number of entries, their total and each account's balance.
// It fills in rep's ledger figures and replaces its counts by the
// target's.
func verifyCopy(ctx context.Context, src, dst querier, rep *CopyReport, skipped map[string]int64) error {
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
		if a-skipped[t.Name] != b || b != t.Rows {
			return fmt.Errorf("store: %s: table %s has %d rows in the source (%d left out) and %d in the target (%d copied)", op, t.Name, a, skipped[t.Name], b, t.Rows)
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
