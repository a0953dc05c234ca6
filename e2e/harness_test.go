// Package e2e drives the real gpumarket binary with a real browser: TestMain builds the binary once
// and starts headless Chromium through playwright-go; each test starts its own server on a free port
// with its own database and opens fresh browser contexts against it.
//
// What the harness needs (scripts/install-test-deps.sh installs it; `make test` runs that first):
//   - Chromium at /usr/bin/chromium, or the path in E2E_CHROMIUM;
//   - the Playwright driver folder at e2e/driver (package -> node_modules/playwright-core), or the
//     folder in PLAYWRIGHT_DRIVER_PATH; node on PATH, or PLAYWRIGHT_NODEJS_PATH.
//
// If the binary, the driver or the browser cannot start, the whole package fails: browser tests
// are never skipped.
package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/playwright-community/playwright-go"

	"github.com/gpumarket/gpumarket/mail/mailtest"
)

const (
	// defaultTimeout bounds every Playwright action and wait on a page, in milliseconds.
	defaultTimeout = 10_000
	// serverStartTimeout bounds how long a server may take to answer /healthz.
	serverStartTimeout = 20 * time.Second
	// serverStopTimeout bounds how long a server may take to exit after SIGINT.
	serverStopTimeout = 10 * time.Second
)

// viewport is a browser window size in CSS pixels.
type viewport struct {
	Name          string
	Width, Height int
}

var (
	// wide is a laptop screen; newPage uses it unless told otherwise.
	wide = viewport{Name: "wide", Width: 1280, Height: 900}
	// narrow is a phone held upright.
	narrow = viewport{Name: "narrow", Width: 390, Height: 844}
)

// suite is what TestMain sets up once for every test in the package.
type suite struct {
	root           string // repository root
	binary         string // the gpumarket binary under test
	screenshotsDir string
	pw             *playwright.Playwright
	browser        playwright.Browser
}

// env is the package's shared setup; TestMain fills it before any test runs.
var env suite

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	tmp, err := os.MkdirTemp("", "gpumarket-e2e-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		return 1
	}
	defer os.RemoveAll(tmp)

	if err := env.setUp(tmp); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: setup failed: %v\n", err)
		env.tearDown()
		return 1
	}
	code := m.Run()
	if err := env.tearDown(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: teardown: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

func (s *suite) setUp(tmp string) error {
	// go test runs a package's tests in the package's folder.
	root, err := filepath.Abs("..")
	if err != nil {
		return err
	}
	s.root = root
	s.screenshotsDir = os.Getenv("E2E_SCREENSHOTS")
	if s.screenshotsDir == "" {
		s.screenshotsDir = filepath.Join(root, "e2e", "screenshots")
	}

	s.binary = filepath.Join(tmp, "gpumarket")
	build := exec.Command("go", "build", "-o", s.binary, "./cmd/gpumarket")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("build ./cmd/gpumarket: %w\n%s", err, out)
	}

	driverDir := os.Getenv("PLAYWRIGHT_DRIVER_PATH")
	if driverDir == "" {
		driverDir = filepath.Join(root, "e2e", "driver")
	}
	if _, err := os.Stat(filepath.Join(driverDir, "package", "cli.js")); err != nil {
		return fmt.Errorf("no Playwright driver in %s (run `make test-deps`): %w", driverDir, err)
	}
	if os.Getenv("PLAYWRIGHT_NODEJS_PATH") == "" {
		node, err := exec.LookPath("node")
		if err != nil {
			return fmt.Errorf("node is needed to run the Playwright driver (run `make test-deps`): %w", err)
		}
		os.Setenv("PLAYWRIGHT_NODEJS_PATH", node)
	}
	// playwright.Run never downloads: with SkipInstallBrowsers it only checks the driver's version.
	s.pw, err = playwright.Run(&playwright.RunOptions{DriverDirectory: driverDir, SkipInstallBrowsers: true})
	if err != nil {
		return fmt.Errorf("start Playwright driver in %s: %w", driverDir, err)
	}

	chromium := os.Getenv("E2E_CHROMIUM")
	if chromium == "" {
		chromium = "/usr/bin/chromium"
	}
	s.browser, err = s.pw.Chromium.Launch(playwright.BrowserTypeLaunchOptions{
		ExecutablePath: playwright.String(chromium),
		Headless:       playwright.Bool(true),
		// Root has no sandbox; the network is closed, so nothing may phone home.
		Args: []string{
			"--no-sandbox",
			"--disable-gpu",
			"--disable-background-networking",
			"--disable-component-update",
			"--disable-sync",
			"--no-first-run",
		},
	})
	if err != nil {
		return fmt.Errorf("launch Chromium at %s (run `make test-deps`): %w", chromium, err)
	}
	return nil
}

func (s *suite) tearDown() error {
	var errs []error
	if s.browser != nil {
		errs = append(errs, s.browser.Close())
	}
	if s.pw != nil {
		errs = append(errs, s.pw.Stop())
	}
	return errors.Join(errs...)
}

// server is one running gpumarket process with its own database.
type server struct {
	// URL is the base URL without a trailing slash, e.g. http://127.0.0.1:41234.
	URL string
	// DB is the path of the server's SQLite database.
	DB string

	// mail is the SMTP server the server sends its mail to (withSMTP), or
	// nil when mail stays in the outbox.
	mail *mailtest.Server

	cmd    *exec.Cmd
	output *syncBuffer
	done   chan struct{} // closed when the process has exited
	err    error         // the process's exit error, set before done is closed

	reported bool // the output was already logged
}

// serverOption changes how startServer runs the binary.
type serverOption func(*serverConfig)

type serverConfig struct {
	demo bool
	args []string
	env  []string
	db   string
	mail *mailtest.Server
}

// withDemo starts the server with -demo, so it loads the demo data.
func withDemo() serverOption {
	return func(c *serverConfig) { c.demo = true }
}

// withDB runs the server on an existing database file (e.g. the DB of a server stopped earlier in
// the test, to restart it with other flags) instead of a fresh one.
func withDB(path string) serverOption {
	return func(c *serverConfig) { c.db = path }
}

// withArgs appends extra arguments to `gpumarket serve`.
func withArgs(args ...string) serverOption {
	return func(c *serverConfig) { c.args = append(c.args, args...) }
}

// withSMTP has the server send its mail to an SMTP server inside the test (mailtest: STARTTLS
// and a login), trusting its certificate, with the background loop ticking often so that mail
// goes out within a moment. The server's mailLink then reads the links from the mail received.
func withSMTP(t *testing.T) serverOption {
	t.Helper()
	m := mailtest.Start(t, false)
	cert := filepath.Join(t.TempDir(), "smtp-cert.pem")
	if err := os.WriteFile(cert, m.CertPEM, 0o600); err != nil {
		t.Fatalf("write the SMTP server's certificate: %v", err)
	}
	return func(c *serverConfig) {
		c.mail = m
		c.args = append(c.args, "-smtp-url", m.URL, "-mail-from", "GPU Market <gpus@market.test>", "-tick", "250ms")
		c.env = append(c.env, "SSL_CERT_FILE="+cert)
	}
}

// startServer runs `gpumarket serve` on a free port with a fresh database in t.TempDir(), waits
// until /healthz answers 200 and stops the server with SIGINT when the test ends. The server's
// output is logged if the test fails.
func startServer(t *testing.T, opts ...serverOption) *server {
	t.Helper()
	var cfg serverConfig
	for _, o := range opts {
		o(&cfg)
	}

	addr := freeAddr(t)
	s := &server{
		URL:    "http://" + addr,
		DB:     filepath.Join(t.TempDir(), "m.db"),
		output: &syncBuffer{},
		done:   make(chan struct{}),
		mail:   cfg.mail,
	}
	if cfg.db != "" {
		s.DB = cfg.db
	}
	args := []string{"serve", "-addr", addr, "-db", s.DB, "-base-url", s.URL}
	if cfg.demo {
		args = append(args, "-demo")
	}
	args = append(args, cfg.args...)

	s.cmd = exec.Command(env.binary, args...)
	s.cmd.Env = append(serverEnv(), cfg.env...)
	s.cmd.Stdout = s.output
	s.cmd.Stderr = s.output
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("start server: %v", err)
	}
	go func() {
		s.err = s.cmd.Wait()
		close(s.done)
	}()
	t.Cleanup(func() { s.stop(t) })

	if err := s.waitHealthy(serverStartTimeout); err != nil {
		s.reported = true
		t.Fatalf("server %s did not become healthy: %v\nserver output:\n%s", s.URL, err, s.output)
	}
	return s
}

// stop sends SIGINT, waits for a graceful exit and reports a server that would not stop, exited
// with an error, or ran during a failed test.
func (s *server) stop(t *testing.T) {
	t.Helper()
	select {
	case <-s.done:
		if !s.reported {
			t.Errorf("server exited before the test ended: %v\nserver output:\n%s", s.err, s.output)
		}
		return
	default:
	}
	if err := s.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Errorf("interrupt server: %v", err)
	}
	select {
	case <-s.done:
		if s.err != nil {
			t.Errorf("server exited with %v after SIGINT, want a graceful exit 0", s.err)
		}
	case <-time.After(serverStopTimeout):
		s.cmd.Process.Kill()
		<-s.done
		t.Errorf("server did not exit within %s of SIGINT", serverStopTimeout)
	}
	if t.Failed() && !s.reported {
		t.Logf("server output:\n%s", s.output)
	}
}

func (s *server) waitHealthy(timeout time.Duration) error {
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		select {
		case <-s.done:
			return fmt.Errorf("server exited: %v", s.err)
		default:
		}
		resp, err := client.Get(s.URL + "/healthz")
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("GET /healthz: %s", resp.Status)
		}
		last = err
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("timed out after %s: %v", timeout, last)
}

// createAdmin runs `gpumarket admin create` against the server's database, then signs the admin
// in and turns on two-factor sign-in as the admin pages require (setUpTwoFactor); logIn then enters
// a code computed from its secret.
func (s *server) createAdmin(t *testing.T, email, password string) {
	t.Helper()
	s.createAdminAccount(t, email, password)
	page := newPage(t)
	logIn(t, page, s, email, password)
	setUpTwoFactor(t, page, s, email)
	if err := page.Context().Close(); err != nil {
		t.Fatalf("close the setup browser: %v", err)
	}
}

// createAdminAccount runs `gpumarket admin create` against the server's database.
func (s *server) createAdminAccount(t *testing.T, email, password string) {
	t.Helper()
	name, _, _ := strings.Cut(email, "@")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, env.binary, "admin", "create", "-db", s.DB, "-email", email, "-name", name)
	cmd.Env = append(serverEnv(), "GPUMARKET_ADMIN_PASSWORD="+password)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("admin create %s: %v\n%s", email, err, out)
	}
}

// reconcile stops the server, so the background loop moves no money while the books are read,
// and runs `gpumarket reconcile -db` on its database as an operator would (no Stripe key: the
// ledger against the local test processor's records in the same file). The test fails unless it
// exits 0 saying there are no differences. Every test that moves money ends with it.
func (s *server) reconcile(t *testing.T) {
	t.Helper()
	s.stop(t)
	s.reported = true
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, env.binary, "reconcile", "-db", s.DB)
	cmd.Env = serverEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("gpumarket reconcile -db %s: %v, want exit 0\n%s", s.DB, err, out)
		return
	}
	if !strings.Contains(string(out), "reconciled: no differences") {
		t.Errorf("gpumarket reconcile -db %s exited 0 without saying it reconciled:\n%s", s.DB, out)
	}
}

// serverEnv is the test process's environment without GPUMARKET_* settings, so a developer's own
// configuration cannot leak into a test server; tests pass what they mean as flags.
func serverEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GPUMARKET_") {
			out = append(out, kv)
		}
	}
	return out
}

// freeAddr returns a 127.0.0.1 address with a port nothing listens on right now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("find a free port: %v", err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// newPage opens a page in a fresh browser context (own cookies and storage) at the wide viewport,
// or the one given. Every action on it waits at most defaultTimeout. When the test fails, a
// full-page screenshot is saved to e2e/screenshots/<TestName>.png and the page's console errors
// are logged.
func newPage(t *testing.T, size ...viewport) playwright.Page {
	t.Helper()
	vp := wide
	if len(size) > 0 {
		vp = size[0]
	}
	bctx, err := env.browser.NewContext(playwright.BrowserNewContextOptions{
		Viewport: &playwright.Size{Width: vp.Width, Height: vp.Height},
		Locale:   playwright.String("en-GB"),
	})
	if err != nil {
		t.Fatalf("new browser context: %v", err)
	}
	bctx.SetDefaultTimeout(defaultTimeout)
	bctx.SetDefaultNavigationTimeout(defaultTimeout)
	page, err := bctx.NewPage()
	if err != nil {
		bctx.Close()
		t.Fatalf("new page: %v", err)
	}

	var mu sync.Mutex
	var problems []string
	page.OnConsole(func(m playwright.ConsoleMessage) {
		if m.Type() == "error" || m.Type() == "warning" {
			mu.Lock()
			problems = append(problems, fmt.Sprintf("console %s: %s", m.Type(), m.Text()))
			mu.Unlock()
		}
	})
	page.OnPageError(func(err error) {
		mu.Lock()
		problems = append(problems, "page error: "+err.Error())
		mu.Unlock()
	})

	t.Cleanup(func() {
		if t.Failed() {
			path := filepath.Join(env.screenshotsDir, fileName(t.Name())+".png")
			if err := screenshot(page, path); err != nil {
				t.Logf("failure screenshot: %v", err)
			} else {
				t.Logf("failure screenshot of %s: %s", page.URL(), path)
			}
			mu.Lock()
			for _, p := range problems {
				t.Log(p)
			}
			mu.Unlock()
		}
		bctx.Close()
	})
	return page
}

// shot saves full-page screenshots of the page as it is now, at the wide and the narrow viewport,
// to e2e/screenshots/<TestName>-<name>-wide.png and …-narrow.png, then restores the page's size.
func shot(t *testing.T, page playwright.Page, name string) {
	t.Helper()
	orig := page.ViewportSize()
	for _, vp := range []viewport{wide, narrow} {
		if err := page.SetViewportSize(vp.Width, vp.Height); err != nil {
			t.Fatalf("screenshot %s: resize to %s: %v", name, vp.Name, err)
		}
		path := filepath.Join(env.screenshotsDir, fileName(t.Name()+"-"+name+"-"+vp.Name)+".png")
		if err := screenshot(page, path); err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
	}
	if orig != nil {
		if err := page.SetViewportSize(orig.Width, orig.Height); err != nil {
			t.Fatalf("screenshot %s: restore size: %v", name, err)
		}
	}
}

func screenshot(page playwright.Page, path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	_, err := page.Screenshot(playwright.PageScreenshotOptions{
		Path:     playwright.String(path),
		FullPage: playwright.Bool(true),
	})
	return err
}

var unsafeFileChars = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)

// fileName turns a test name such as "TestOffer/narrow" into a safe file name.
func fileName(s string) string {
	return unsafeFileChars.ReplaceAllString(s, "_")
}

// expect holds Playwright's retrying assertions with the harness's timeout.
var expect = playwright.NewPlaywrightAssertions(defaultTimeout)

// syncBuffer is a bytes.Buffer safe for a process writing while a test reads.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
