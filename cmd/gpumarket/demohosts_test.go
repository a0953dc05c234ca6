package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/account"
	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
)

// TestDemoRunsSimulatedHosts serves the demo with the real agent binary
// (built here): the demo provider's hosts page shows every node of the
// demo host offers online with its simulated devices, and the stop stops
// the agents before the background work.
func TestDemoRunsSimulatedHosts(t *testing.T) {
	dir := t.TempDir()
	password := seedDemoHostOffers(t, filepath.Join(dir, "data", "m.db"))
	agent := filepath.Join(dir, "gpumarket-agent")
	build := exec.Command("go", "build", "-o", agent, "../gpumarket-agent")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the agent: %v\n%s", err, out)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut lockedBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"serve", "-demo", "-addr", "127.0.0.1:0", "-db", filepath.Join(dir, "data", "m.db"), "-demo-agent", agent},
			env(nil), strings.NewReader(""), &out, &errOut)
	}()
	base := "http://" + waitListening(t, &out, &errOut)

	c := newFormClient(t, base)
	c.post("/login", "/login", url.Values{"email": {demoHostsProvider}, "password": {password}})
	var page string
	for deadline := time.Now().Add(20 * time.Second); ; {
		page = c.get("/provider/hosts")
		if strings.Count(page, `data-testid="host-status">online<`) == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the hosts page does not show the 3 demo hosts online:\n%s\n%s", page, errOut.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, want := range []string{"8 of 8 devices healthy", "agent 1.0.0, probe simulate"} {
		if strings.Count(page, want) != 3 {
			t.Errorf("the hosts page does not say %q for each demo host", want)
		}
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve: %v\n%s", err, errOut.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop")
	}
	log := errOut.String()
	hostsStopped, bgStopped := strings.Index(log, `msg="demo hosts stopped"`), strings.Index(log, `msg="background work stopped"`)
	if hostsStopped < 0 || bgStopped < hostsStopped {
		t.Errorf("the demo hosts did not stop before the background work:\n%s", log)
	}
	logs, _ := filepath.Glob(filepath.Join(dir, "data", "demo-hosts", "*.log"))
	if len(logs) != 3 {
		t.Fatalf("%d agent logs, want 3", len(logs))
	}
	for _, l := range logs {
		b, err := os.ReadFile(l)
		if err != nil || !strings.Contains(string(b), "gpumarket-agent stopped") {
			t.Errorf("%s: the agent did not stop cleanly:\n%s", l, b)
		}
	}
}

// TestDemoWithoutAgentServes: with no agent binary the demo still serves
// and says why it runs no simulated hosts.
func TestDemoWithoutAgentServes(t *testing.T) {
	dir := t.TempDir()
	seedDemoHostOffers(t, filepath.Join(dir, "m.db"))
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut lockedBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"serve", "-demo", "-addr", "127.0.0.1:0", "-db", filepath.Join(dir, "m.db"), "-demo-agent", filepath.Join(dir, "missing")},
			env(nil), strings.NewReader(""), &out, &errOut)
	}()
	waitListening(t, &out, &errOut)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("serve: %v", err)
	}
	if !strings.Contains(errOut.String(), `msg="demo hosts not started"`) || !strings.Contains(errOut.String(), "no agent binary at") {
		t.Errorf("no word of the missing agent:\n%s", errOut.String())
	}
}

// seedDemoHostOffers makes a small demo database at path: the demo
// provider of the simulated hosts with the demo host offers, and the saved
// demo credentials, so -demo serves it without seeding the whole demo
// (whose 90 days of history take long under the race detector). It
// returns the provider's password.
func seedDemoHostOffers(t *testing.T, path string) string {
	t.Helper()
	ctx := context.Background()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	db, err := store.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	const password = "a demo provider password"
	hash, err := account.Hash(password, account.DefaultCost)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	u, err := db.CreateUser(ctx, market.User{Email: demoHostsProvider, DisplayName: "Nordic Compute", IsProvider: true}, hash, now)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range demoProviders(now.Truncate(time.Hour)) {
		for _, o := range p.offers {
			if p.email != demoHostsProvider || !slices.Contains(demoHostOffers, o.Title) {
				continue
			}
			o.ProviderID = u.ID
			if err := market.ValidateOffer(&o, now); err != nil {
				t.Fatal(err)
			}
			created, err := db.CreateOffer(ctx, o, now)
			if err != nil {
				t.Fatal(err)
			}
			if err := db.ReviewOffer(ctx, created.ID, market.ReviewApproved, "", now); err != nil {
				t.Fatal(err)
			}
			n++
		}
	}
	if n != len(demoHostOffers) {
		t.Fatalf("%d of the %d demo host offers are demo offers", n, len(demoHostOffers))
	}
	creds, err := json.Marshal([]demoCredential{{Role: "provider", Email: demoHostsProvider, Password: password}})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.SetSetting(ctx, demoSettingKey, string(creds)); err != nil {
		t.Fatal(err)
	}
	return password
}

// waitListening waits for serve's "listening" line and returns its address.
func waitListening(t *testing.T, out, errOut *lockedBuffer) string {
	t.Helper()
	re := regexp.MustCompile(`gpumarket listening on (\S+)`)
	for deadline := time.Now().Add(30 * time.Second); ; {
		if m := re.FindStringSubmatch(out.String()); m != nil {
			return m[1]
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve never listened:\n%s", errOut.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// formClient is a browser session: cookies kept, forms posted with the
// CSRF token of the page they come from.
type formClient struct {
	t    *testing.T
	base string
	http *http.Client
}

func newFormClient(t *testing.T, base string) *formClient {
	jar, _ := cookiejar.New(nil)
	return &formClient{t: t, base: base, http: &http.Client{Jar: jar, Timeout: 60 * time.Second}}
}

func (c *formClient) get(path string) string {
	c.t.Helper()
	resp, err := c.http.Get(c.base + path)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	return string(b)
}

var csrfRe = regexp.MustCompile(`name="_csrf" value="([^"]+)"`)

func (c *formClient) post(from, path string, form url.Values) {
	c.t.Helper()
	m := csrfRe.FindStringSubmatch(c.get(from))
	if m == nil {
		c.t.Fatalf("no form on %s", from)
	}
	form.Set("_csrf", m[1])
	resp, err := c.http.PostForm(c.base+path, form)
	if err != nil {
		c.t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		c.t.Fatalf("POST %s: %s", path, resp.Status)
	}
}
