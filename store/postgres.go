package store

// Everything specific to PostgreSQL lives in this file: the driver (pgx v5
// through database/sql), the placeholder rewrite, the write lock, read
// isolation, migration translation and the driver's error codes. The rest
// of the package speaks the same SQL on both engines.

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
)

// IsPostgresURL reports whether dsn names a PostgreSQL database rather
// than an SQLite file.
func IsPostgresURL(dsn string) bool {
	return strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://")
}

// writeLockKey is the transaction-level advisory lock every write
// transaction takes first on PostgreSQL. Taken exclusive
// (pg_advisory_xact_lock), as every write but a booking takes it, it makes
// writes one at a time across every replica on the database — what
// SQLite's single writer gives the same code — so every read-then-write of
// a money step, a cancellation or an expiry sees all earlier commits and
// cannot interleave. A booking's transaction (db.book, groupcommit.go)
// takes it shared instead, with exclusive locks on what its checks read
// (bookingLocks): bookings of different offers for different buyers run at
// once, while any other write still excludes every booking and is excluded
// by them. Reads never take it. The number is arbitrary ("gpumarket" in
// ASCII, truncated to 63 bits).
const writeLockKey int64 = 0x6770756d61726b65

// The key spaces of a booking's own locks (bookingLocks.keys): the space
// in the upper 32 bits, an offer's, buyer's or template's id in the lower.
// None is writeLockKey's upper half, so no key is the global one. Ids
// beyond 32 bits share keys, which only makes two bookings wait for each
// other.
const (
	offerLockSpace    int64 = 0x6f666672 // "offr"
	buyerLockSpace    int64 = 0x62757972 // "buyr"
	templateLockSpace int64 = 0x746d706c // "tmpl"
)

// openPostgres opens the writer and reader pools on the database at url.
// Both are pools over the same server: the writer's transactions take the
// write locks (writeLockKey), the readers' run READ ONLY at REPEATABLE READ (one
// snapshot per method, as SQLite's read transactions see).
// The writer's transactions hand the offers they changed to feed
// (pgTx).
func openPostgres(ctx context.Context, url string, feed *commitFeed) (writer, reader *sql.DB, err error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, nil, fmt.Errorf("store: PostgreSQL URL: %w", err)
	}
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	cfg.RuntimeParams["timezone"] = "UTC"
	cfg.RuntimeParams["application_name"] = "gpumarket"
	open := func(feed *commitFeed) *sql.DB {
		return sql.OpenDB(pgConnector{inner: stdlib.GetConnector(*cfg), feed: feed})
	}
	writer, reader = open(feed), open(nil)
	setPgPools(writer, reader, DefaultMaxConns)
	writer.SetConnMaxIdleTime(5 * time.Minute)
	reader.SetConnMaxIdleTime(5 * time.Minute)
	for _, p := range []*sql.DB{writer, reader} {
		if err := p.PingContext(ctx); err != nil {
			writer.Close()
			reader.Close()
			return nil, nil, fmt.Errorf("store: connect to PostgreSQL: %w", err)
		}
	}
	return writer, reader, nil
}

// DefaultMaxConns is how many connections a replica's pools open to
// PostgreSQL at most unless LimitConnections says otherwise; the change feed
// holds one more (FollowOffers).
const DefaultMaxConns = 24

// LimitConnections caps the connections this handle's pools open to
// PostgreSQL at n (at least 2): a third to the writer — writers queue on
// the write lock in the database, so a few let the next write wait there
// rather than in the pool — and the rest to the readers. The change feed
// holds one connection more. With R replicas on one server, R × (n + 1)
// must stay under the server's max_connections less its reserved
// connections and any other clients (docs/postgres.md). On SQLite it does
// nothing: the writer is one connection and the readers are in-process.
func (db *DB) LimitConnections(n int) error {
	if n < 2 {
		return fmt.Errorf("store: at least 2 database connections are needed (one writer, one reader), not %d", n)
	}
	if db.postgres {
		setPgPools(db.writer, db.reader, n)
	}
	return nil
}

// setPgPools splits n connections between the writer and reader pools.
func setPgPools(writer, reader *sql.DB, n int) {
	w := max(1, n/3)
	writer.SetMaxOpenConns(w)
	writer.SetMaxIdleConns(w)
	reader.SetMaxOpenConns(n - w)
	reader.SetMaxIdleConns(n - w)
}

// FollowDirect has the change feed (FollowOffers) connect to url instead of
// the database URL Open was given: behind PgBouncer in transaction mode,
// LISTEN needs a session of its own on the server, so the feed bypasses
// the pooler. Call it before FollowOffers.
func (db *DB) FollowDirect(url string) error {
	if !IsPostgresURL(url) {
		return fmt.Errorf("store: the change feed's URL must be a postgres:// URL")
	}
	db.feedDSN = url
	return nil
}

// isPgUnavailable reports a PostgreSQL error that means the server cannot
// serve this request now, though it may in a moment: too many connections
// (53300) and the other insufficient-resources errors (class 53), a server
// starting or shutting down (57P01–57P03), a broken connection (class 08),
// a connection that could not be made or was closed by the server, or a
// timeout.
func isPgUnavailable(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return strings.HasPrefix(pe.Code, "53") || strings.HasPrefix(pe.Code, "08") ||
			pe.Code == "57P01" || pe.Code == "57P02" || pe.Code == "57P03"
	}
	var ce *pgconn.ConnectError
	return errors.As(err, &ce) || pgconn.Timeout(err) ||
		// A connection the server closed under it (stopped, restarted,
		// failed over): "conn closed", "unexpected EOF".
		pgconn.SafeToRetry(err) || errors.Is(err, io.ErrUnexpectedEOF)
}

// pgLockQuery starts every PostgreSQL write transaction but a booking's:
// the write lock, exclusive.
var pgLockQuery = `SELECT pg_advisory_xact_lock(` + strconv.FormatInt(writeLockKey, 10) + `)`

// pgSharedLockQuery starts a booking's transaction: the write lock,
// shared with other bookings, before pgKeyLocksQuery.
var pgSharedLockQuery = `SELECT pg_advisory_xact_lock_shared(` + strconv.FormatInt(writeLockKey, 10) + `)`

// pgKeyLocksQuery takes a booking's own locks, exclusive, one after
// another in the order of its array (bookingLocks.keys sorts them, so two
// transactions never wait for each other's keys in a circle): a function
// scan hands the projection its rows in array order.
const pgKeyLocksQuery = `SELECT pg_advisory_xact_lock(k) FROM unnest(CAST(? AS bigint[])) AS k`

// pgKeyArray spells keys as a PostgreSQL array literal for
// pgKeyLocksQuery.
func pgKeyArray(keys []int64) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(k, 10))
	}
	b.WriteByte('}')
	return b.String()
}

// isPgUniqueViolation reports a PostgreSQL unique_violation (23505).
func isPgUniqueViolation(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505"
}

// isPgForeignKeyViolation reports a PostgreSQL foreign_key_violation (23503).
func isPgForeignKeyViolation(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23503"
}

// rebind rewrites the store's '?' placeholders as PostgreSQL's $1, $2, …,
// leaving question marks inside string literals, quoted identifiers and
// comments alone.
func rebind(q string) string {
	if !strings.ContainsRune(q, '?') {
		return q
	}
	var b strings.Builder
	b.Grow(len(q) + 16)
	n := 0
	for i := 0; i < len(q); i++ {
		c := q[i]
		switch {
		case c == '\'' || c == '"':
			j := i + 1
			for j < len(q) {
				if q[j] == c {
					if j+1 < len(q) && q[j+1] == c { // doubled quote
						j += 2
						continue
					}
					break
				}
				j++
			}
			b.WriteString(q[i:min(j+1, len(q))])
			i = j
		case c == '-' && i+1 < len(q) && q[i+1] == '-':
			j := strings.IndexByte(q[i:], '\n')
			if j < 0 {
				j = len(q) - i
			}
			b.WriteString(q[i : i+j])
			i += j - 1
		case c == '?':
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// pgConnector hands database/sql connections that rebind every query;
// the writer's (feed set) publish what their transactions changed.
type pgConnector struct {
	inner driver.Connector
	feed  *commitFeed
}

func (c pgConnector) Connect(ctx context.Context) (driver.Conn, error) {
	cn, err := c.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	p := &pgConn{c: cn.(*stdlib.Conn), feed: c.feed}
	if p.feed != nil {
		p.pid = p.c.Conn().PgConn().PID()
		p.feed.backends.Store(p.pid, struct{}{})
	}
	return p, nil
}

func (c pgConnector) Driver() driver.Driver { return c.inner.Driver() }

// pgConn forwards to pgx's connection with the query text rebound.
type pgConn struct {
	c    *stdlib.Conn
	feed *commitFeed // nil on the readers
	pid  uint32      // the writer's backend, in feed.backends while open
}

func (p *pgConn) Prepare(q string) (driver.Stmt, error) { return p.c.Prepare(rebind(q)) }
func (p *pgConn) PrepareContext(ctx context.Context, q string) (driver.Stmt, error) {
	return p.c.PrepareContext(ctx, rebind(q))
}
func (p *pgConn) Close() error {
	if p.feed != nil {
		p.feed.backends.Delete(p.pid)
	}
	return p.c.Close()
}
func (p *pgConn) Begin() (driver.Tx, error) { return p.c.Begin() } //nolint:staticcheck // the interface requires it
func (p *pgConn) BeginTx(ctx context.Context, o driver.TxOptions) (driver.Tx, error) {
	tx, err := p.c.BeginTx(ctx, o)
	if err != nil || p.feed == nil {
		return tx, err
	}
	return &pgTx{Tx: tx, p: p, ctx: ctx}, nil
}
func (p *pgConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	return p.c.ExecContext(ctx, rebind(q), args)
}
func (p *pgConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	return p.c.QueryContext(ctx, rebind(q), args)
}
func (p *pgConn) Ping(ctx context.Context) error             { return p.c.Ping(ctx) }
func (p *pgConn) CheckNamedValue(v *driver.NamedValue) error { return p.c.CheckNamedValue(v) }
func (p *pgConn) ResetSession(ctx context.Context) error     { return p.c.ResetSession(ctx) }

// pgChangedQuery reads what the transaction under way changed, as
// migrations/postgres/0042_offer_feed.sql's trigger notes it: the offers
// whose listing changed and those whose commitments alone did, each list
// ids followed by commas, NULL or empty when none.
const pgChangedQuery = `SELECT current_setting('gpumarket.changed_listings', true), current_setting('gpumarket.changed_commitments', true)`

// pgTx is a write transaction whose commit publishes what it changed.
type pgTx struct {
	driver.Tx
	p   *pgConn
	ctx context.Context
}

// Commit reads the transaction's notes (inside it: they end with it),
// commits, and only then hands them to the feed. A commit whose notes
// cannot be read is rolled back.
func (t *pgTx) Commit() error {
	ch, err := t.p.changedOffers(context.WithoutCancel(t.ctx))
	if err != nil {
		return errors.Join(fmt.Errorf("store: read the transaction's changed offers: %w", err), t.Tx.Rollback())
	}
	err = t.Tx.Commit()
	// A commit that failed may still have committed (the connection broke
	// on its way back): its changes are published either way — reading an
	// offer that did not change again costs a read — since FollowOffers
	// leaves this connection's notifications to the in-process feed.
	t.p.feed.publish(ch)
	return err
}

// changedOffers reads the changes noted so far.
func (p *pgConn) changedOffers(ctx context.Context) (OfferChanges, error) {
	rows, err := p.c.QueryContext(ctx, pgChangedQuery, nil)
	if err != nil {
		return OfferChanges{}, err
	}
	dest := make([]driver.Value, 2)
	err = rows.Next(dest)
	if err != nil {
		rows.Close()
		return OfferChanges{}, err
	}
	if err := rows.Close(); err != nil {
		return OfferChanges{}, err
	}
	var lists [2][]int64
	for i, v := range dest {
		var notes string
		switch v := v.(type) {
		case nil:
		case string:
			notes = v
		case []byte:
			notes = string(v)
		default:
			return OfferChanges{}, fmt.Errorf("changed offers %v (%T) are not text", v, v)
		}
		for f := range strings.SplitSeq(notes, ",") {
			if f == "" {
				continue
			}
			id, err := strconv.ParseInt(f, 10, 64)
			if err != nil {
				return OfferChanges{}, fmt.Errorf("changed offer %q: %w", f, err)
			}
			lists[i] = append(lists[i], id)
		}
	}
	return newOfferChanges(lists[0], lists[1]), nil
}

// The SQLite migrations are the one numbered sequence; PostgreSQL runs
// each translated by translatePostgres, then the statements of
// migrations/postgres/<same name>, when that file exists (for what has no
// portable spelling, such as the append-only triggers).
var (
	pgIdentityID = regexp.MustCompile(`(?m)^(\s*id\s+)INTEGER\s+PRIMARY\s+KEY\b`)
	pgInteger    = regexp.MustCompile(`\bINTEGER\b`)
	pgBlob       = regexp.MustCompile(`\bBLOB\b`)
)

// translatePostgres turns an SQLite migration into PostgreSQL: INTEGER is
// BIGINT (times, money and ids are 64-bit), an "id INTEGER PRIMARY KEY" is
// an identity column, BLOB is BYTEA. It drops two kinds of statement:
// SQLite triggers (their PostgreSQL form is in migrations/postgres) and
// data fix-ups written with SQLite's JSON functions — those rewrite rows
// written before their migration, and no PostgreSQL database holds any:
// PostgreSQL support starts at version 16, so every PostgreSQL database
// was created after them.
func translatePostgres(script string) string {
	var out []string
	for _, st := range splitStatements(script) {
		upper := strings.ToUpper(stripComments(st))
		if strings.HasPrefix(strings.TrimSpace(upper), "CREATE TRIGGER") || strings.Contains(upper, "JSON_") {
			continue
		}
		st = pgIdentityID.ReplaceAllString(st, "${1}BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY")
		st = pgInteger.ReplaceAllString(st, "BIGINT")
		st = pgBlob.ReplaceAllString(st, "BYTEA")
		out = append(out, st)
	}
	return strings.Join(out, ";\n") + ";\n"
}

// stripComments removes "--" comments (outside string literals).
func stripComments(s string) string {
	var b strings.Builder
	inStr := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '\'' {
			inStr = !inStr
		}
		if !inStr && c == '-' && i+1 < len(s) && s[i+1] == '-' {
			for i < len(s) && s[i] != '\n' {
				i++
			}
			b.WriteByte('\n')
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// splitStatements splits an SQLite script at top-level semicolons; a
// CREATE TRIGGER runs to its END. Empty statements are dropped.
func splitStatements(script string) []string {
	var out []string
	var cur strings.Builder
	inStr, inTrigger := false, false
	flush := func() {
		s := strings.TrimSpace(cur.String())
		if strings.TrimSpace(stripComments(s)) != "" {
			out = append(out, s)
		}
		cur.Reset()
		inTrigger = false
	}
	for i := 0; i < len(script); i++ {
		c := script[i]
		if !inStr && c == '-' && i+1 < len(script) && script[i+1] == '-' {
			j := strings.IndexByte(script[i:], '\n')
			if j < 0 {
				j = len(script) - i
			}
			cur.WriteString(script[i : i+j])
			i += j - 1
			continue
		}
		if c == '\'' {
			inStr = !inStr
		}
		cur.WriteByte(c)
		if inStr || c != ';' {
			continue
		}
		if !inTrigger && strings.HasPrefix(strings.ToUpper(strings.TrimSpace(stripComments(cur.String()))), "CREATE TRIGGER") {
			inTrigger = true
		}
		if inTrigger && !strings.HasSuffix(strings.ToUpper(strings.TrimSpace(strings.TrimSuffix(cur.String(), ";"))), "END") {
			continue
		}
		s := cur.String()
		cur.Reset()
		cur.WriteString(strings.TrimSuffix(s, ";"))
		flush()
	}
	flush()
	return out
}

// offerChannel is the channel migrations/postgres/0021_offer_changes.sql
// notifies with the id of each changed offer.
const offerChannel = "gpumarket_offers"

// FollowOffers calls changed with the id of each offer whose listing or
// commitments a committed transaction changed — on any replica — until ctx
// ends, with own set when the transaction was this handle's (one of its
// writer's connections sent the notification: the change was published
// in-process as it committed, OnOffersChanged, and need not be read again), as each notification arrives, on the goroutine that reads the
// connection: changed should only note the id (the caller coalesces and
// applies them elsewhere), or notifications queue up behind it. It calls
// resync each time it (re)connects to the feed, before any change:
// notifications sent while it was not listening are lost, so the caller
// reloads in full then; a resync that fails counts as the feed lost. lost
// is told why the feed broke before each reconnection, which is tried
// every feedRetryEvery. A connection that carries no notification for
// feedCheckEvery is pinged (within feedPingTimeout): one the server no
// longer answers — stopped, frozen, cut off by the network with no word —
// counts as lost, so the feed is never taken for joined while nothing can
// reach it. A replica hears its own commits sooner, in-process, as they
// commit (OnOffersChanged); this is how it hears the others'. On SQLite it
// returns at once: one process serves the file, and hears every change it
// makes through OnOffersChanged.
func (db *DB) FollowOffers(ctx context.Context, changed func(offerID int64, own bool), resync func() error, lost func(error)) {
	if !db.postgres {
		return
	}
	for ctx.Err() == nil {
		err := db.followOnce(ctx, changed, resync)
		if ctx.Err() != nil {
			break
		}
		lost(err)
		select {
		case <-ctx.Done():
		case <-time.After(feedRetryEvery):
		}
	}
}

// The change feed's timing. A replica whose feed is down answers 503 on
// /healthz and serves nobody, so it tries to rejoin often: a refused
// connection costs the server nothing, and it is back within
// feedRetryEvery of PostgreSQL's return. An idle feed is checked every
// feedCheckEvery, so a feed that went silent is found out within
// feedCheckEvery + feedPingTimeout.
const (
	feedRetryEvery  = 500 * time.Millisecond
	feedCheckEvery  = 2 * time.Second
	feedPingTimeout = 2 * time.Second
	// feedConnectTimeout bounds one attempt to connect: a server that
	// accepts the connection but does not answer (frozen) is tried again.
	feedConnectTimeout = 5 * time.Second
)

// FeedApplicationName is the application_name of the change feed's
// connection (pg_stat_activity tells it from the pools' "gpumarket").
const FeedApplicationName = "gpumarket-feed"

// errFeedClosed is followOnce's answer when the connection ends with no
// error of its own.
var errFeedClosed = errors.New("store: the change feed's connection closed")

// followOnce listens on one connection until it fails or ctx ends.
func (db *DB) followOnce(ctx context.Context, changed func(int64, bool), resync func() error) error {
	dsn := db.dsn
	if db.feedDSN != "" {
		dsn = db.feedDSN
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return err
	}
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	cfg.RuntimeParams["application_name"] = FeedApplicationName
	cctx, cancel := context.WithTimeout(ctx, feedConnectTimeout)
	conn, err := pgx.ConnectConfig(cctx, cfg)
	cancel()
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, `LISTEN `+offerChannel); err != nil {
		return err
	}
	if err := resync(); err != nil {
		return fmt.Errorf("store: resync on joining the change feed: %w", err)
	}
	for {
		// pgx keeps the connection when a wait times out (it closes it on
		// any other error).
		wctx, cancel := context.WithTimeout(ctx, feedCheckEvery)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		if n != nil {
			if id, err := strconv.ParseInt(n.Payload, 10, 64); err == nil {
				_, own := db.feed.backends.Load(n.PID)
				changed(id, own)
			}
		}
		switch {
		case err == nil:
			continue
		case ctx.Err() != nil:
			return ctx.Err()
		case !pgconn.Timeout(err) && !errors.Is(err, context.DeadlineExceeded):
			return err
		case conn.IsClosed():
			return errFeedClosed
		}
		pctx, cancel := context.WithTimeout(ctx, feedPingTimeout)
		err = conn.Ping(pctx)
		cancel()
		if err != nil {
			return fmt.Errorf("store: the change feed's connection did not answer a ping within %s: %w", feedPingTimeout, err)
		}
	}
}

// pgColumn is a column of a PostgreSQL table, for CopyDatabase.
type pgColumn struct {
	name     string
	identity bool // GENERATED … AS IDENTITY: its sequence follows copied ids
}

// pgTables lists the columns of every table in the current schema, by
// table, in column order.
func pgTables(ctx context.Context, q querier) (map[string][]pgColumn, error) {
	rows, err := q.QueryContext(ctx, `SELECT c.table_name, c.column_name, c.is_identity = 'YES'
		FROM information_schema.columns c
		JOIN information_schema.tables t ON t.table_schema = c.table_schema AND t.table_name = c.table_name
		WHERE c.table_schema = current_schema() AND t.table_type = 'BASE TABLE'
		ORDER BY c.table_name, c.ordinal_position`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string][]pgColumn{}
	for rows.Next() {
		var table string
		var c pgColumn
		if err := rows.Scan(&table, &c.name, &c.identity); err != nil {
			return nil, err
		}
		out[table] = append(out[table], c)
	}
	return out, rows.Err()
}
