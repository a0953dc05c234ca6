// Package pgtest gives tests a real PostgreSQL server: a throwaway cluster
// started from the machine's PostgreSQL binaries (Debian's postgresql
// package) in a temporary folder on a free port, or the server named by
// GPUMARKET_TEST_POSTGRES_URL. Tests ask for a fresh database each.
//
// A package's tests run on PostgreSQL when GPUMARKET_TEST_DB=postgres; its
// TestMain calls Run. A server that cannot start fails the run: it is never
// a skip.
package pgtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
)

// Enabled reports whether this test run is on PostgreSQL.
func Enabled() bool { return os.Getenv("GPUMARKET_TEST_DB") == "postgres" }

var (
	mu       sync.Mutex
	adminURL string // the running server's maintenance database
	stopFn   func() error
	counter  atomic.Int64

	// The durable server (DurableDatabase), started on first use.
	durableURL  string
	durableStop func() error
)

// Run is a TestMain body: on PostgreSQL it starts the server before the
// tests; either way it stops the server after them, when one was started
// (a test that asked for a Database on an SQLite run starts one).
func Run(m *testing.M) int {
	if Enabled() {
		if err := ensure(); err != nil {
			fmt.Fprintln(os.Stderr, "pgtest:", err)
			return 1
		}
	}
	code := m.Run()
	if err := Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "pgtest: stop:", err)
	}
	return code
}

// Stop stops the throwaway servers (the durable one too), if they were
// started.
func Stop() error {
	mu.Lock()
	defer mu.Unlock()
	var errs []error
	if stopFn != nil {
		errs = append(errs, stopFn())
		stopFn, adminURL = nil, ""
	}
	if durableStop != nil {
		errs = append(errs, durableStop())
		durableStop, durableURL = nil, ""
	}
	return errors.Join(errs...)
}

func ensure() error {
	mu.Lock()
	defer mu.Unlock()
	if adminURL != "" {
		return nil
	}
	if u := os.Getenv("GPUMARKET_TEST_POSTGRES_URL"); u != "" {
		adminURL = u
		return nil
	}
	srv, err := start(false)
	if err != nil {
		return err
	}
	adminURL, stopFn = srv.URL, srv.Remove
	return nil
}

// Database creates an empty database for t on the test server (starting
// it if needed) and returns its URL. The server is thrown away at the end
// of the run, so databases are not dropped.
func Database(t testing.TB) string {
	t.Helper()
	u, err := NewDatabase()
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return u
}

// NewDatabase is Database for code without a testing.TB (benchmarks' setup,
// TestMain).
func NewDatabase() (string, error) {
	if err := ensure(); err != nil {
		return "", err
	}
	mu.Lock()
	admin := adminURL
	mu.Unlock()
	return createDatabase(admin)
}

// DurableDatabase is Database on a server that keeps PostgreSQL's
// durability (fsync, full_page_writes and synchronous_commit on, as in
// production), for benchmarks whose figures must include the cost of a
// durable commit. It is a second throwaway server, started on first use
// and stopped by Stop (so by Run), or the server named by
// GPUMARKET_TEST_POSTGRES_URL, whose settings are its own.
func DurableDatabase(tb testing.TB) string {
	tb.Helper()
	mu.Lock()
	if durableURL == "" {
		if u := os.Getenv("GPUMARKET_TEST_POSTGRES_URL"); u != "" {
			durableURL = u
		} else if srv, err := start(true); err == nil {
			durableURL, durableStop = srv.URL, srv.Remove
		} else {
			mu.Unlock()
			tb.Fatalf("pgtest: durable server: %v", err)
		}
	}
	admin := durableURL
	mu.Unlock()
	u, err := createDatabase(admin)
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	return u
}

// createDatabase creates a database with a new name on the server whose
// maintenance database is admin, and returns its URL.
func createDatabase(admin string) (string, error) {
	name := fmt.Sprintf("t%d_%d", os.Getpid(), counter.Add(1))
	db, err := sql.Open("pgx", admin)
	if err != nil {
		return "", err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := db.ExecContext(ctx, `CREATE DATABASE `+name); err != nil {
		return "", fmt.Errorf("create database %s: %w", name, err)
	}
	pu, err := url.Parse(admin)
	if err != nil {
		return "", err
	}
	pu.Path = "/" + name
	return pu.String(), nil
}

// Start initialises and starts a PostgreSQL cluster in a new temporary
// folder, listening on 127.0.0.1 at a free port, and returns the URL of its
// "postgres" database and a function that stops it and removes the folder.
// Run as root, the cluster runs as the "postgres" user (initdb refuses
// root). Durability is off (fsync, full_page_writes): the data is thrown
// away.
func Start() (string, func() error, error) {
	s, err := start(false)
	if err != nil {
		return "", nil, err
	}
	return s.URL, s.Remove, nil
}

// Server is a throwaway PostgreSQL cluster of one test's own (StartServer),
// which the test may stop and start again — an outage — on the same port
// with the same data.
type Server struct {
	// URL is the cluster's "postgres" database.
	URL string

	run                 func(name string, args ...string) *exec.Cmd
	dir, data, opts, lg string
	mu                  sync.Mutex
	running             bool
}

// StartServer is Start, returning a Server the test can stop and start;
// it is removed when t ends.
func StartServer(t testing.TB) *Server {
	t.Helper()
	s, err := start(false)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Remove(); err != nil {
			t.Errorf("pgtest: %v", err)
		}
	})
	return s
}

// start starts a new cluster, with PostgreSQL's durability kept when
// durable.
func start(durable bool) (*Server, error) {
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "gpumarket-pg-")
	if err != nil {
		return nil, err
	}
	cleanup := func() { os.RemoveAll(dir) }
	asRoot := os.Geteuid() == 0
	run := func(name string, args ...string) *exec.Cmd {
		path := filepath.Join(bin, name)
		if asRoot {
			return exec.Command("runuser", append([]string{"-u", "postgres", "--", path}, args...)...)
		}
		return exec.Command(path, args...)
	}
	if asRoot {
		pg, err := user.Lookup("postgres")
		if err != nil {
			cleanup()
			return nil, fmt.Errorf("running as root needs a \"postgres\" user to run the server (apt-get install postgresql creates it): %w", err)
		}
		uid, _ := strconv.Atoi(pg.Uid)
		gid, _ := strconv.Atoi(pg.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			cleanup()
			return nil, err
		}
	}
	data := filepath.Join(dir, "data")
	if out, err := run("initdb", "-D", data, "-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync").CombinedOutput(); err != nil {
		cleanup()
		return nil, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	port, err := freePort()
	if err != nil {
		cleanup()
		return nil, err
	}
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c max_connections=300", port, dir)
	if durable {
		opts += " -c fsync=on -c full_page_writes=on -c synchronous_commit=on"
	} else {
		opts += " -c fsync=off -c full_page_writes=off"
	}
	s := &Server{URL: fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port),
		run: run, dir: dir, data: data, opts: opts, lg: filepath.Join(dir, "log")}
	if err := s.Start(); err != nil {
		cleanup()
		return nil, err
	}
	return s, nil
}

// Start starts the stopped server again (a new one is started already).
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running {
		return nil
	}
	if out, err := s.run("pg_ctl", "-D", s.data, "-l", s.lg, "-o", s.opts, "-w", "-t", "60", "start").CombinedOutput(); err != nil {
		log, _ := os.ReadFile(s.lg)
		return fmt.Errorf("pg_ctl start: %v\n%s\n%s", err, out, log)
	}
	s.running = true
	return nil
}

// Stop stops the server as an operator's stop does (pg_ctl's fast mode:
// sessions are ended, clients see the connection closed), keeping its
// data for Start.
func (s *Server) Stop() error { return s.stop("fast") }

func (s *Server) stop(mode string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.running {
		return nil
	}
	if out, err := s.run("pg_ctl", "-D", s.data, "-m", mode, "-w", "stop").CombinedOutput(); err != nil {
		return fmt.Errorf("pg_ctl stop: %v\n%s", err, out)
	}
	s.running = false
	return nil
}

// Remove stops the server if it runs and removes its folder.
func (s *Server) Remove() error {
	err := s.stop("immediate")
	os.RemoveAll(s.dir)
	return err
}

// binDir finds the server binaries: PG_BIN, else the newest
// /usr/lib/postgresql/<version>/bin, else initdb on PATH.
func binDir() (string, error) {
	if d := os.Getenv("PG_BIN"); d != "" {
		return d, nil
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	sort.Slice(matches, func(i, j int) bool { return version(matches[i]) > version(matches[j]) })
	if len(matches) > 0 {
		return filepath.Dir(matches[0]), nil
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", fmt.Errorf("no PostgreSQL server binaries (initdb) found: install Debian's postgresql package (scripts/install-test-deps.sh does) or set GPUMARKET_TEST_POSTGRES_URL")
}

func version(initdb string) int {
	v, _ := strconv.Atoi(strings.Split(strings.TrimPrefix(initdb, "/usr/lib/postgresql/"), "/")[0])
	return v
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// DSN is what a test opens: a new PostgreSQL database on a PostgreSQL run,
// else sqlitePath.
func DSN(t testing.TB, sqlitePath string) string {
	t.Helper()
	if Enabled() {
		return Database(t)
	}
	return sqlitePath
}
