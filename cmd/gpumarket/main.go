// Command gpumarket runs the compute marketplace: the web server ("serve",
// the default) and operator commands ("admin create", "backup", …).
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpumarket/gpumarket/metrics"
	"github.com/gpumarket/gpumarket/store"
	"github.com/gpumarket/gpumarket/web"
	"github.com/gpumarket/gpumarket/workflow"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr); err != nil {
		os.Exit(reportExit(err, os.Stderr)) // the client's exit codes (client.go); 1 otherwise
	}
}

// run is the whole program; main only wires the process to it, so tests can
// call it with their own arguments, environment and streams.
func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	cmd := "serve"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	if _, ok := clientCommands[cmd]; ok {
		return runClient(ctx, cmd, args, getenv, stdin, stdout, stderr, syscall.Exec)
	}
	switch cmd {
	case "serve":
		return serve(ctx, args, getenv, stdout, stderr)
	case "reconcile":
		return reconcile(ctx, args, getenv, stdout, stderr)
	case "migrate-db":
		return migrateDB(ctx, args, stdout, stderr)
	case "backup":
		return backup(ctx, args, getenv, stdout, stderr)
	case "admin":
		switch {
		case len(args) > 0 && args[0] == "create":
			return adminCreate(ctx, args[1:], getenv, stdin, stdout)
		case len(args) > 0 && args[0] == "reset-2fa":
			return adminReset2FA(ctx, args[1:], getenv, stdout)
		}
		return errors.New("usage: gpumarket admin create -email EMAIL -name NAME [-db PATH] (password from GPUMARKET_ADMIN_PASSWORD or stdin)\n" +
			"       gpumarket admin reset-2fa -email EMAIL -note WHY [-db PATH]")
	default:
		return usageErr("unknown command %q (want serve, reconcile, migrate-db, backup, admin create or admin reset-2fa; or a client command: search, quote, book, pay, list, show, extend, cancel, reject, ssh, orders, bids, resale, offers, hosts, metered, balance, ping — docs/cli.md)", cmd)
	}
}

// redactDB is the database to name in logs: a PostgreSQL URL without its
// password.
func redactDB(dsn string) string {
	if !store.IsPostgresURL(dsn) {
		return dsn
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return "postgres://(unparsable URL)"
	}
	return u.Redacted()
}

// serverWriteTimeout bounds writing a response; every request's deadline
// (-request-timeout) is under it, so its 503 is still written.
const serverWriteTimeout = 60 * time.Second

// envOr returns the environment value of key, or def when it is unset.
func envOr(getenv func(string) string, key, def string) string {
	if v := getenv(key); v != "" {
		return v
	}
	return def
}

func serve(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", envOr(getenv, "GPUMARKET_ADDR", ":8080"), "listen address (env GPUMARKET_ADDR)")
	dbPath := fs.String("db", envOr(getenv, "GPUMARKET_DB", "./data/gpumarket.db"), "SQLite database path, or a postgres:// URL to run on PostgreSQL (env GPUMARKET_DB)")
	baseURL := fs.String("base-url", envOr(getenv, "GPUMARKET_BASE_URL", "http://localhost:8080"), "public base URL (env GPUMARKET_BASE_URL)")
	sessionKey := fs.String("session-key", getenv("GPUMARKET_SESSION_KEY"), "hex session signing key, at least 32 bytes (env GPUMARKET_SESSION_KEY; default: generated once into the data directory)")
	demo := fs.Bool("demo", getenv("GPUMARKET_DEMO") == "1" || getenv("GPUMARKET_DEMO") == "true", "load demo data once and print demo credentials (env GPUMARKET_DEMO)")
	apiRate := fs.Float64("api-rate", 20, "requests per second each API token may make, burst twice that (env GPUMARKET_API_RATE)")
	if v := getenv("GPUMARKET_API_RATE"); v != "" {
		if err := fs.Set("api-rate", v); err != nil {
			return fmt.Errorf("GPUMARKET_API_RATE: %w", err)
		}
	}
	bf := billingFlags(fs, getenv)
	mf := mailFlags(fs, getenv)
	demoAgent := demoAgentFlag(fs, getenv)
	clockOffset := fs.Duration("clock-offset", 0, "TEST ONLY: shift the server's clock by this duration, e.g. 72h (refused with a Stripe key)")
	tick := fs.Duration("tick", 15*time.Second, "how often the background loop runs: holds, lifecycle, settlement retries (env GPUMARKET_TICK)")
	if v := getenv("GPUMARKET_TICK"); v != "" {
		if err := fs.Set("tick", v); err != nil {
			return fmt.Errorf("GPUMARKET_TICK: %w", err)
		}
	}
	trustedProxies := fs.String("trusted-proxies", getenv("GPUMARKET_TRUSTED_PROXIES"), "comma-separated CIDR ranges or addresses of the load balancers whose X-Forwarded-For gives the client address (env GPUMARKET_TRUSTED_PROXIES; default none: the TCP peer is the client)")
	metricsAddr := fs.String("metrics-addr", getenv("GPUMARKET_METRICS_ADDR"), "listen address for Prometheus metrics at /metrics and the runtime profiles at /debug/pprof/, e.g. :9090 (env GPUMARKET_METRICS_ADDR; default off)")
	feedMaxLag := fs.Duration("feed-max-lag", workflow.DefaultFeedMaxLag, "on PostgreSQL, how far behind the change feed this replica's index may fall before /healthz answers 503 (env GPUMARKET_FEED_MAX_LAG)")
	if v := getenv("GPUMARKET_FEED_MAX_LAG"); v != "" {
		if err := fs.Set("feed-max-lag", v); err != nil {
			return fmt.Errorf("GPUMARKET_FEED_MAX_LAG: %w", err)
		}
	}
	dbMaxConns := fs.Int("db-max-conns", store.DefaultMaxConns, "on PostgreSQL, the most connections this replica's pools open (the change feed holds one more); keep replicas × (this + 1) under the server's max_connections less its reserved ones (docs/postgres.md) (env GPUMARKET_DB_MAX_CONNS)")
	if v := getenv("GPUMARKET_DB_MAX_CONNS"); v != "" {
		if err := fs.Set("db-max-conns", v); err != nil {
			return fmt.Errorf("GPUMARKET_DB_MAX_CONNS: %w", err)
		}
	}
	dbFeedURL := fs.String("db-feed-url", getenv("GPUMARKET_DB_FEED_URL"), "on PostgreSQL behind PgBouncer in transaction mode, a postgres:// URL straight to the server for the change feed's LISTEN (env GPUMARKET_DB_FEED_URL; default the -db URL)")
	requestTimeout := fs.Duration("request-timeout", web.DefaultRequestTimeout, "every request's deadline: a database that has not answered by then gets a 503 with Retry-After, and nothing commits after it (env GPUMARKET_REQUEST_TIMEOUT)")
	if v := getenv("GPUMARKET_REQUEST_TIMEOUT"); v != "" {
		if err := fs.Set("request-timeout", v); err != nil {
			return fmt.Errorf("GPUMARKET_REQUEST_TIMEOUT: %w", err)
		}
	}
	replica := fs.String("replica", envOr(getenv, "GPUMARKET_REPLICA", defaultReplica()), "this replica's name, on every log line (env GPUMARKET_REPLICA; default the host name)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *tick <= 0 {
		return errors.New("-tick must be positive")
	}
	if *feedMaxLag <= 0 {
		return errors.New("-feed-max-lag must be positive")
	}
	if *requestTimeout <= 0 || *requestTimeout >= serverWriteTimeout {
		return fmt.Errorf("-request-timeout must be positive and under the server's write timeout (%s)", serverWriteTimeout)
	}
	onPostgres := store.IsPostgresURL(*dbPath)
	if onPostgres && *sessionKey == "" {
		// Each replica would generate its own key into its own folder.
		return errors.New("on PostgreSQL every replica must sign sessions with the same key: set -session-key (or GPUMARKET_SESSION_KEY) to the same 64 hex characters on each")
	}
	// The data folder (session key, demo hosts' files): beside the SQLite
	// file, or ./data on PostgreSQL.
	dataDir := "./data"
	if !onPostgres {
		dataDir = filepath.Dir(*dbPath)
	}
	proxies, err := parseTrustedProxies(*trustedProxies)
	if err != nil {
		return err
	}

	// Buffered (logbuffer.go): no write per request line. Deferred first so
	// the last flush comes after everything the stop logs.
	logs := newLogBuffer(stderr, logBufferSize, logFlushInterval)
	defer logs.Close()
	log := slog.New(newBufferedHandler(logs, slog.LevelInfo)).With("replica", *replica)
	db, err := store.Open(ctx, *dbPath)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := db.LimitConnections(*dbMaxConns); err != nil {
		return fmt.Errorf("-db-max-conns: %w", err)
	}
	if *dbFeedURL != "" {
		if err := db.FollowDirect(*dbFeedURL); err != nil {
			return fmt.Errorf("-db-feed-url: %w", err)
		}
	}
	processor, err := bf.processor(db)
	if err != nil {
		return err
	}
	sender, err := mf.sender(*baseURL)
	if err != nil {
		return err
	}
	now := func() time.Time { return time.Now().UTC() }
	if *clockOffset != 0 {
		// Moving the clock with real money would settle bookings early.
		if !processor.Simulated() {
			return errors.New("-clock-offset is for tests and demos only; it is refused when a Stripe key is configured")
		}
		offset := *clockOffset
		now = func() time.Time { return time.Now().UTC().Add(offset) }
		log.Warn("TEST CLOCK: the server's clock is shifted", "offset", offset.String())
	}

	key, err := loadSessionKey(*sessionKey, dataDir)
	if err != nil {
		return err
	}
	if *demo {
		creds, err := seedDemo(ctx, db, time.Now().UTC())
		if err != nil {
			return fmt.Errorf("demo data: %w", err)
		}
		if creds, err = demoTwoFactor(ctx, db, key, creds, time.Now().UTC()); err != nil {
			return fmt.Errorf("demo data: %w", err)
		}
		for _, c := range creds {
			fmt.Fprintf(stdout, "demo %-9s %-28s password: %s", c.Role, c.Email, c.Password)
			if c.TOTPSecret != "" {
				fmt.Fprintf(stdout, "  two-factor key: %s", c.TOTPSecret)
			}
			fmt.Fprintln(stdout)
		}
	}

	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	wf, err := workflow.New(ctx, workflow.Config{Billing: processor, PlatformFeeBP: *bf.feeBP, Now: now,
		CodeNow: func() time.Time { return time.Now().UTC() }, Metrics: m, Replica: *replica,
		Mail: sender, BaseURL: *baseURL, SessionKey: key}, db, log)
	if err != nil {
		return err
	}
	err = metrics.RegisterSources(reg, metrics.Sources{
		Backlog: func(ctx context.Context) (metrics.Backlog, error) {
			b, err := db.CountSettlementBacklog(ctx)
			return metrics.Backlog(b), err
		},
		IndexSize:  func() int { return wf.Index().Len() },
		IndexAge:   wf.IndexAge,
		HoldsLease: wf.HoldsLease,
		FeedLag:    wf.FeedLag,
	})
	if err != nil {
		return err
	}
	_, e, err := web.New(ctx, web.Config{BaseURL: *baseURL, SessionKey: key, Demo: *demo, APIRatePerSecond: *apiRate,
		Now: now, Workflow: wf, TrustedProxies: proxies, Metrics: m, IndexMaxAge: workflow.IndexMaxAge(*tick),
		FeedMaxLag: *feedMaxLag, RequestTimeout: *requestTimeout}, db, log)
	if err != nil {
		return err
	}
	// The background work is joined before the database closes (deferred
	// above, so it runs after this): its step under way finishes first.
	bgCtx, stopBackground := context.WithCancel(context.Background())
	var background sync.WaitGroup
	background.Add(3)
	go func() {
		defer background.Done()
		wf.Run(bgCtx, *tick)
	}()
	go func() {
		defer background.Done()
		wf.MatchOrders(bgCtx) // standing orders, on every change the index follows
	}()
	go func() {
		defer background.Done()
		wf.Follow(bgCtx) // other replicas' changes, on PostgreSQL
	}()
	defer func() {
		stopBackground()
		background.Wait()
		log.Info("background work stopped")
	}()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", *addr, err)
	}
	// Demo only: simulated hosts run the agent against this server; they
	// stop (deferred last, so first) before the background work and the database.
	if *demo {
		hosts, err := startDemoHosts(ctx, db, *demoAgent, ln.Addr(), dataDir, now(), log)
		if err != nil {
			ln.Close()
			return err
		}
		defer hosts.Stop()
	}
	srv := &http.Server{
		Handler:           e,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      serverWriteTimeout,
		IdleTimeout:       120 * time.Second,
	}
	errc := make(chan error, 2)
	var ms *metricsServer
	if *metricsAddr != "" {
		if ms, err = listenMetrics(*metricsAddr, reg); err != nil {
			ln.Close()
			return err
		}
		fmt.Fprintf(stdout, "gpumarket metrics on %s\n", ms.ln.Addr())
		go func() { errc <- ms.serve() }()
	}
	fmt.Fprintf(stdout, "gpumarket listening on %s (open %s)\n", ln.Addr(), *baseURL)
	log.Info("listening", "addr", ln.Addr().String(), "url", *baseURL, "db", redactDB(*dbPath), "demo", *demo,
		"simulated_payments", processor.Simulated(), "metrics_addr", *metricsAddr, "trusted_proxies", *trustedProxies, "smtp", redactSMTP(*mf.smtpURL))

	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down: finishing in-flight requests")
	shutCtx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutCtx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if ms != nil {
		if err := ms.shutdown(shutCtx); err != nil {
			return fmt.Errorf("shutdown metrics: %w", err)
		}
	}
	log.Info("stopped")
	return nil
}

// loadSessionKey returns the session signing key: the configured hex value,
// or one generated once and kept in dir so restarts keep people logged in.
func loadSessionKey(configured, dir string) ([]byte, error) {
	if configured != "" {
		k, err := hex.DecodeString(configured)
		if err != nil || len(k) < 32 {
			return nil, errors.New("session key must be at least 32 bytes, hex encoded (64 hex characters)")
		}
		return k, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create data directory: %w", err)
	}
	path := filepath.Join(dir, "session.key")
	if b, err := os.ReadFile(path); err == nil {
		k, err := hex.DecodeString(strings.TrimSpace(string(b)))
		if err != nil || len(k) < 32 {
			return nil, fmt.Errorf("%s is not a valid session key; delete it to generate a new one", path)
		}
		return k, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("read session key: %w", err)
	}
	k := make([]byte, 64)
	if _, err := rand.Read(k); err != nil {
		return nil, err
	}
	if err := os.WriteFile(path, []byte(hex.EncodeToString(k)+"\n"), 0o600); err != nil {
		return nil, fmt.Errorf("write session key: %w", err)
	}
	return k, nil
}
