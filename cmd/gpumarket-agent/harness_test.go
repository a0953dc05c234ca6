package main

// The harness of the integration tests that run the real server and the
// real agent (integration_test.go, replace_integration_test.go,
// metered_integration_test.go): the programs built once, a marketplace
// set up through its pages as people would (a provider's approved offer
// with payouts connected, a buyer with an SSH key and an API token), host
// tokens and agents per node, and the people's sessions.

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pquerna/otp/totp"
	"golang.org/x/crypto/ssh"

	"github.com/gpumarket/gpumarket/store"
)

// itMarket is a running marketplace with an approved offer of a provider
// who has connected payouts, and a buyer with an SSH key and an API token
// of scope write.
type itMarket struct {
	t        *testing.T
	bins     binaries
	dir      string // the test's temporary directory: the database, tokens, keys and state
	db       string // the server's database
	srv      *testServer
	provider *browser
	admin    *browser // signed in with two-factor set up
	buyer    *browser
	offerID  string
	buyerKey string // the buyer's public key, an authorized_keys line
	apiToken string // the buyer's API token
}

// itOfferForm is the offer form the integration tests list, before the
// test's own fields: one node of 8 H100 SXM at $3.17 per device-hour,
// wall-clock billing, 99.5 % uptime with credits of 10 % below 99.5 % and
// 25 % below 99 %, capped at 100 %, available from today for two months.
// The tests derive their figures from these terms.
func itOfferForm(today time.Time) url.Values {
	return url.Values{
		"title": {"8 H100 SXM, agent test"}, "accelerator": {"nvidia-h100-80gb-sxm"}, "memory_gb": {"80"},
		"devices_per_node": {"8"}, "nodes": {"1"}, "interconnect": {"nvlink"}, "network": {"none"},
		"cpu_cores": {"96"}, "ram_gb": {"1024"}, "storage_gb": {"8000"},
		"driver_version": {"550.90"}, "cuda_version": {"12.4"}, "os_image": {"Ubuntu 22.04"}, "container_runtime": {"Docker 26"},
		"region": {"us-west-or"}, "carbon": {""},
		"available_from": {today.Format("2006-01-02T15:04")}, "available_until": {today.AddDate(0, 2, 0).Format("2006-01-02T15:04")},
		"min_rental_hours": {"1"}, "max_rental_hours": {"720"}, "provisioning_mins": {"10"},
		"price": {"3.17"}, "storage_price": {"0.08"}, "egress_price": {"0.05"},
		"billing_basis": {"wall_clock"}, "uptime": {"99.5"}, "credit_schedule": {"99.5:10, 99:25"},
		"credit_cap": {"100"}, "free_cancel_hours": {"24"}, "cancel_fee": {"25"},
	}
}

// newMarket builds the programs, serves a fresh database and sets the
// marketplace up through its pages: the provider (hosts@NAME.test) lists
// itOfferForm with the fields of offer set over it, an admin
// (ops@NAME.test) approves it, the provider connects payouts (simulated
// onboarding), and the buyer (buyer@NAME.test) adds an SSH key and creates
// an API token on the account page.
func newMarket(t *testing.T, name string, offer url.Values) *itMarket {
	t.Helper()
	m := &itMarket{t: t, bins: buildBinaries(t), dir: t.TempDir()}
	m.db = filepath.Join(m.dir, "m.db")
	m.srv = startServer(t, m.bins, m.db, freeAddr(t), 0)

	m.provider = newBrowser(t, m.srv.URL)
	m.provider.signUp(m.db, "hosts@"+name+".test", true)
	form := itOfferForm(time.Now().UTC().Truncate(24 * time.Hour))
	for k, v := range offer {
		form[k] = v
	}
	m.provider.mustPost("/provider/offers/new", "/provider/offers", form, http.StatusSeeOther)

	m.srv.createAdmin(t, "ops@"+name+".test")
	m.admin = newBrowser(t, m.srv.URL)
	m.admin.logIn("ops@" + name + ".test")
	m.admin.setUpTwoFactor() // admin pages require it
	found := regexp.MustCompile(`/admin/offers/(\d+)/review`).FindStringSubmatch(m.admin.get("/admin/offers").body)
	if found == nil {
		t.Fatal("the offer is not in the review queue")
	}
	m.offerID = found[1]
	m.admin.mustPost("/admin/offers", "/admin/offers/"+m.offerID+"/review", url.Values{"decision": {"approved"}}, http.StatusSeeOther)

	r := m.provider.mustPost("/provider/reservations", "/provider/payouts/connect", url.Values{}, http.StatusSeeOther)
	onboard := m.provider.path(r.location)
	m.provider.mustPost(onboard, onboard, url.Values{}, http.StatusSeeOther)

	m.buyer = newBrowser(t, m.srv.URL)
	m.buyer.signUp(m.db, "buyer@"+name+".test", false)
	m.buyerKey = newPublicKey(t, "buyer@laptop")
	m.buyer.mustPost("/account", "/account/ssh-keys", url.Values{"public_key": {m.buyerKey}}, http.StatusSeeOther)
	m.buyer.mustPost("/account", "/account/tokens", url.Values{"token_name": {"ci"}, "token_scope": {"write"}}, http.StatusSeeOther)
	m.apiToken = regexp.MustCompile(`gpm_[A-Za-z0-9_-]+`).FindString(m.buyer.get("/account").body)
	if m.apiToken == "" {
		t.Fatal("the account page does not show the new API token")
	}
	return m
}

// itHost is one node's agent: its host token (in a file of mode 0600),
// its authorized_keys, its address and its arguments; proc once started.
type itHost struct {
	node  int
	token string
	keys  string // the authorized_keys file
	addr  string // the address the agent reports to buyers
	args  []string
	proc  *process
}

// host prepares node's agent: the provider creates its host token on the
// hosts page (shown once), written to a file; authorized_keys holds keys
// ("" for an empty file); the agent (simulated probe of 8 H100, a beat
// every 2 s) reports addr, port 2222 and user gpu. It is not started.
func (m *itMarket) host(node int, addr, keys string) *itHost {
	m.t.Helper()
	m.provider.mustPost("/provider/hosts", "/provider/hosts/tokens", url.Values{"offer_id": {m.offerID}, "node": {fmt.Sprint(node)}}, http.StatusSeeOther)
	h := &itHost{node: node, addr: addr, keys: filepath.Join(m.dir, fmt.Sprintf("authorized_keys_%d", node))}
	for _, tok := range regexp.MustCompile(`gph_[A-Za-z0-9_-]{43}`).FindAllString(m.provider.get("/provider/hosts").body, -1) {
		h.token = tok // the newest, shown once
	}
	if h.token == "" {
		m.t.Fatalf("the hosts page does not show the new host token for node %d", node)
	}
	tokenFile := filepath.Join(m.dir, fmt.Sprintf("token_%d", node))
	if err := os.WriteFile(tokenFile, []byte(h.token+"\n"), 0o600); err != nil {
		m.t.Fatal(err)
	}
	if err := os.WriteFile(h.keys, []byte(keys), 0o600); err != nil {
		m.t.Fatal(err)
	}
	h.args = []string{"-server", m.srv.URL, "-token-file", tokenFile, "-state", filepath.Join(m.dir, fmt.Sprintf("state_%d.json", node)),
		"-interval", "2s", "-simulate", "H100 80GB SXM x8", "-authorized-keys", h.keys,
		"-host", addr, "-port", "2222", "-ssh-user", "gpu"}
	return h
}

// start runs the host's agent until the test ends (again after a kill:
// the same token, state and keys).
func (m *itMarket) start(h *itHost) {
	m.t.Helper()
	h.proc = startAgent(m.t, m.bins, h.args)
}

// The real programs, built once per test run.

type binaries struct{ server, agent string }

var (
	buildOnce sync.Once
	built     binaries
	buildErr  error
)

// buildBinaries builds ./cmd/gpumarket and ./cmd/gpumarket-agent into a
// temporary directory kept for the test binary's life.
func buildBinaries(t *testing.T) binaries {
	t.Helper()
	buildOnce.Do(func() {
		root, err := filepath.Abs(filepath.Join("..", ".."))
		if err != nil {
			buildErr = err
			return
		}
		out, err := os.MkdirTemp("", "gpumarket-agent-it-")
		if err != nil {
			buildErr = err
			return
		}
		built = binaries{server: filepath.Join(out, "gpumarket"), agent: filepath.Join(out, "gpumarket-agent")}
		for pkg, bin := range map[string]string{"./cmd/gpumarket": built.server, "./cmd/gpumarket-agent": built.agent} {
			cmd := exec.Command("go", "build", "-o", bin, pkg)
			cmd.Dir = root
			if b, err := cmd.CombinedOutput(); err != nil {
				buildErr = fmt.Errorf("build %s: %w\n%s", pkg, err, b)
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return built
}

// process is a running program with its output.
type process struct {
	cmd    *exec.Cmd
	output *syncBuffer
	done   chan struct{}
}

func startProcess(t *testing.T, name string, env []string, args ...string) *process {
	t.Helper()
	p := &process{cmd: exec.Command(name, args...), output: &syncBuffer{}, done: make(chan struct{})}
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = p.output, p.output
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.cmd.Wait()
		close(p.done)
	}()
	return p
}

// stop interrupts the process and waits for it (killing it after 15 s).
func (p *process) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
	}
}

// cleanEnv is the test's environment without GPUMARKET_* settings.
func cleanEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GPUMARKET_") {
			out = append(out, kv)
		}
	}
	return out
}

// startAgent runs the agent until the test ends, logging its output if
// the test fails.
func startAgent(t *testing.T, bins binaries, args []string) *process {
	t.Helper()
	p := startProcess(t, bins.agent, cleanEnv(), args...)
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			t.Logf("agent output:\n%s", p.output)
		}
	})
	return p
}

// testServer is a running `gpumarket serve` on a free port.
type testServer struct {
	URL  string
	addr string
	bins binaries
	db   string
	proc *process
}

// freeAddr returns a loopback address with a port nothing listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startServer serves db on addr with the clock shifted by offset, a
// background round every second and a stated platform fee.
func startServer(t *testing.T, bins binaries, db, addr string, offset time.Duration) *testServer {
	t.Helper()
	s := &testServer{URL: "http://" + addr, addr: addr, bins: bins, db: db}
	s.proc = startProcess(t, bins.server, cleanEnv(), "serve", "-addr", addr, "-db", db, "-base-url", s.URL,
		"-tick", "1s", "-platform-fee-bp", "1200", "-clock-offset", fmt.Sprintf("%ds", int64(offset/time.Second)))
	t.Cleanup(func() {
		s.stop(t)
		if t.Failed() {
			t.Logf("server output:\n%s", s.proc.output)
		}
	})
	waitUntil(t, 20*time.Second, "the server answers /healthz", func() bool {
		select {
		case <-s.proc.done:
			t.Fatalf("the server exited:\n%s", s.proc.output)
		default:
		}
		resp, err := http.Get(s.URL + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return s
}

// stop interrupts the server and fails the test unless it exits cleanly.
func (s *testServer) stop(t *testing.T) {
	t.Helper()
	select {
	case <-s.proc.done:
		return
	default:
	}
	s.proc.stop()
	if s.proc.cmd.ProcessState == nil || !s.proc.cmd.ProcessState.Success() {
		t.Errorf("the server did not stop cleanly: %v", s.proc.cmd.ProcessState)
	}
}

// restartAt stops the server and serves the same database again with the
// server's clock at at (to the second), on the same address, so the
// agent finds it again.
func (s *testServer) restartAt(t *testing.T, at time.Time) *testServer {
	t.Helper()
	s.stop(t)
	return startServer(t, s.bins, s.db, s.addr, time.Until(at))
}

// restartUpAt is restartAt with the market recorded as up from upSince to
// at meanwhile (store.RecordServerBeat), as a server running all along
// would have recorded it.
func (s *testServer) restartUpAt(t *testing.T, at, upSince time.Time) *testServer {
	t.Helper()
	s.stop(t)
	db, err := store.Open(context.Background(), s.db)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.RecordServerBeat(context.Background(), "up-meanwhile", upSince, at); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return startServer(t, s.bins, s.db, s.addr, time.Until(at))
}

// createAdmin runs `gpumarket admin create` on the server's database.
func (s *testServer) createAdmin(t *testing.T, email string) {
	t.Helper()
	cmd := exec.Command(s.bins.server, "admin", "create", "-db", s.db, "-email", email, "-name", "Ops")
	cmd.Env = append(cleanEnv(), "GPUMARKET_ADMIN_PASSWORD="+testPassword)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("admin create: %v\n%s", err, out)
	}
}

// reconcile runs `gpumarket reconcile` on the stopped server's database
// and fails the test unless it finds no difference.
func (s *testServer) reconcile(t *testing.T) {
	t.Helper()
	s.stop(t)
	cmd := exec.Command(s.bins.server, "reconcile", "-db", s.db)
	cmd.Env = cleanEnv()
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "reconciled: no differences") {
		t.Errorf("gpumarket reconcile: %v\n%s", err, out)
	}
}

// apiReservation is GET /api/v1/reservations/:id's answer, as far as the
// test reads it.
type apiReservation struct {
	ID     int64  `json:"id"`
	State  string `json:"state"`
	Access []struct {
		Node          int        `json:"node"`
		State         string     `json:"state"`
		Host          string     `json:"host"`
		Port          int        `json:"port"`
		User          string     `json:"user"`
		SSHCommand    string     `json:"ssh_command"`
		Online        bool       `json:"online"`
		LastHeartbeat *time.Time `json:"last_heartbeat"`
	} `json:"access"`
}

func (s *testServer) reservation(t *testing.T, token string, id int64) apiReservation {
	t.Helper()
	var out apiReservation
	s.api(t, token, "GET", fmt.Sprintf("/api/v1/reservations/%d", id), "", http.StatusOK, &out)
	return out
}

// api calls the JSON API with a bearer token and decodes the answer,
// which must have the status want.
func (s *testServer) api(t *testing.T, token, method, path, body string, want int, out any) {
	t.Helper()
	req, err := http.NewRequest(method, s.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("%s %s: %d, want %d\n%s", method, path, resp.StatusCode, want, b)
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("%s %s: %v\n%s", method, path, err, b)
	}
}

// browser is a person's session: its own cookies, forms posted with the
// CSRF token of the page they are on, redirects not followed.
type browser struct {
	t    *testing.T
	base string
	http *http.Client
}

const testPassword = "a long enough password"

func newBrowser(t *testing.T, base string) *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{t: t, base: base, http: &http.Client{Jar: jar, Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

type page struct {
	status   int
	body     string
	location string
}

func (b *browser) get(path string) page {
	b.t.Helper()
	resp, err := b.http.Get(b.base + path)
	if err != nil {
		b.t.Fatal(err)
	}
	return readPage(b.t, resp)
}

var csrfRe = regexp.MustCompile(`name="_csrf" value="([^"]+)"`)

// mustPost submits a form from the page from and fails unless the answer
// has the status want.
func (b *browser) mustPost(from, path string, form url.Values, want int) page {
	b.t.Helper()
	m := csrfRe.FindStringSubmatch(b.get(from).body)
	if m == nil {
		b.t.Fatalf("no form on %s", from)
	}
	form.Set("_csrf", m[1])
	resp, err := b.http.PostForm(b.base+path, form)
	if err != nil {
		b.t.Fatal(err)
	}
	p := readPage(b.t, resp)
	if p.status != want {
		b.t.Fatalf("POST %s: %d, want %d\n%.3000s", path, p.status, want, p.body)
	}
	return p
}

// path is a redirect's location without the server's base URL.
func (b *browser) path(location string) string {
	return strings.TrimPrefix(location, b.base)
}

// signUp creates an account through the sign-up form, confirms its
// address from the link in the server's outbox (the database at dbPath)
// and logs in.
func (b *browser) signUp(dbPath, email string, provider bool) {
	b.t.Helper()
	form := url.Values{"email": {email}, "password": {testPassword}, "display_name": {"Tester " + email}}
	if provider {
		form.Set("is_provider", "1")
	} else {
		form.Set("is_buyer", "1")
	}
	b.mustPost("/signup", "/signup", form, http.StatusSeeOther)
	db, err := store.Open(context.Background(), dbPath)
	if err != nil {
		b.t.Fatal(err)
	}
	defer db.Close()
	all, err := db.ListMail(context.Background(), 0, 100)
	if err != nil {
		b.t.Fatal(err)
	}
	link := ""
	for _, m := range all {
		if m.To == email && m.Kind == store.MailVerifyAddress && link == "" {
			link = m.URLPath
		}
	}
	if link == "" {
		b.t.Fatalf("no verification mail to %s", email)
	}
	if p := b.get(link); p.status != http.StatusSeeOther {
		b.t.Fatalf("confirm %s from %q: %d", email, link, p.status)
	}
	b.logIn(email)
}

func (b *browser) logIn(email string) {
	b.t.Helper()
	b.mustPost("/login", "/login", url.Values{"email": {email}, "password": {testPassword}}, http.StatusSeeOther)
}

// setUpTwoFactor turns on two-factor sign-in for the signed-in account
// through its pages, with a code computed from the secret the page shows.
func (b *browser) setUpTwoFactor() {
	b.t.Helper()
	b.mustPost("/account", "/account/two-factor", url.Values{}, http.StatusSeeOther)
	m := regexp.MustCompile(`data-testid="totp-secret">([A-Z2-7 ]+)<`).FindStringSubmatch(b.get("/account/two-factor").body)
	if m == nil {
		b.t.Fatal("no two-factor secret on the setup page")
	}
	code, err := totp.GenerateCode(strings.ReplaceAll(m[1], " ", ""), time.Now())
	if err != nil {
		b.t.Fatal(err)
	}
	b.mustPost("/account/two-factor", "/account/two-factor/confirm", url.Values{"code": {code}}, http.StatusSeeOther)
}

func readPage(t *testing.T, resp *http.Response) page {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return page{status: resp.StatusCode, body: string(b), location: resp.Header.Get("Location")}
}

// readBooks reads a reservation's incidents and settlement from the
// database of a stopped server.
func readBooks(t *testing.T, path string, reservationID int64) ([]store.Incident, store.Settlement) {
	t.Helper()
	db, err := store.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	incs, err := db.ListIncidents(context.Background(), reservationID)
	if err != nil {
		t.Fatal(err)
	}
	st, err := db.FindSettlement(context.Background(), reservationID)
	if err != nil {
		t.Fatal(err)
	}
	return incs, st
}

// testidText is the text of the first element with the data-testid id.
func testidText(body, id string) string {
	m := regexp.MustCompile(`data-testid="` + regexp.QuoteMeta(id) + `"[^>]*>([^<]*)<`).FindStringSubmatch(body)
	if m == nil {
		return ""
	}
	return strings.TrimSpace(html.UnescapeString(m[1]))
}

// newPublicKey returns a fresh Ed25519 public key as an authorized_keys line.
func newPublicKey(t *testing.T, comment string) string {
	t.Helper()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sp, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sp))) + " " + comment
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// waitUntil polls ok every 200 ms and fails the test if it is not true
// within d.
func waitUntil(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !ok(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting until %s", d, what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// roundHalfAway is num ÷ den for non-negative num and positive den,
// rounded half away from zero.
func roundHalfAway(num, den int64) int64 {
	return (2*num + den) / (2 * den)
}

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
