package e2e

import (
	"crypto/ed25519"
	"crypto/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/playwright-community/playwright-go"
	"golang.org/x/crypto/ssh"
)

// TestHostHandsMachinesToBuyer: a provider lists an offer and registers its host on the hosts
// page (a host token for node 0, shown once); the real agent (built here, simulated probe, a
// temporary authorized_keys) reports it and the page shows it online with its devices. A buyer
// adds an SSH key on the account page, books and pays; when the rental starts (the server
// restarted with its clock just before it) the agent installs the key and the buyer's
// reservation page shows how to connect, while the provider's hosts page says the keys are
// installed without showing the connection.
func TestHostHandsMachinesToBuyer(t *testing.T) {
	srv := startServer(t, withArgs(moneyArgs...))

	provider := newPage(t)
	signUp(t, provider, srv, "hal@hosts.test", "Hal Hosts", "Host Compute", false, true)
	gotoOK(t, provider, srv.URL+"/provider/offers/new")
	o := quebecH100
	o.Title = "H100 rack with an agent, Québec"
	o.MemoryGB = "80"
	fillOffer(t, provider, o)
	fillTerms(t, provider)
	click(t, provider.GetByTestId("offer-submit"), "submit the offer")
	expectText(t, provider.GetByTestId("flash"), "pending review", "flash after submitting")
	srv.createAdmin(t, "ops@hosts.test", "an admin password 123")
	admin := newPage(t)
	logIn(t, admin, srv, "ops@hosts.test", "an admin password 123")
	gotoOK(t, admin, srv.URL+"/admin/offers")
	click(t, admin.GetByTestId("review-row").Filter(playwright.LocatorFilterOptions{HasText: o.Title}).GetByTestId("approve"), "approve")

	// The provider registers node 0: the token is shown once, to be copied to the host.
	gotoOK(t, provider, srv.URL+"/provider/hosts")
	offer := provider.GetByTestId("host-offer").Filter(playwright.LocatorFilterOptions{HasText: o.Title})
	node := offer.Locator(`[data-testid="host-node"][data-node="0"]`)
	expectText(t, node.GetByTestId("host-status"), "no agent yet", "node 0 before its agent runs")
	click(t, node.GetByTestId("create-host-token"), "Create token for node 0")
	expectText(t, provider.GetByTestId("flash"), "shown only once", "flash after creating the token")
	token, err := provider.GetByTestId("new-host-token").Locator("div.mono").TextContent()
	if err != nil || !strings.HasPrefix(strings.TrimSpace(token), "gph_") {
		t.Fatalf("the new host token is not shown: %q %v", token, err)
	}
	token = strings.TrimSpace(token)
	shot(t, provider, "token")

	// The agent runs on the host and the hosts page shows it online.
	dir := t.TempDir()
	agentBin := buildAgent(t, dir)
	keysFile := filepath.Join(dir, "authorized_keys")
	startAgent := func(srv *server) *exec.Cmd {
		cmd := exec.Command(agentBin, "-server", srv.URL, "-state", filepath.Join(dir, "state.json"), "-interval", "2s",
			"-simulate", "H100 80GB SXM x4", "-authorized-keys", keysFile, "-host", "203.0.113.9", "-port", "2201", "-ssh-user", "gpu")
		cmd.Env = append(serverEnv(), "GPUMARKET_AGENT_TOKEN="+token)
		out := &syncBuffer{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatalf("start the agent: %v", err)
		}
		t.Cleanup(func() {
			cmd.Process.Signal(os.Interrupt)
			cmd.Wait()
			if t.Failed() {
				t.Logf("agent output:\n%s", out)
			}
		})
		return cmd
	}
	agent := startAgent(srv)
	waitForText(t, provider, srv.URL+"/provider/hosts", node.GetByTestId("host-status"), "online")
	expectText(t, node.GetByTestId("host-health"), "4 of 4 devices healthy", "node 0's health")
	expectText(t, node.GetByTestId("host-token"), token[:8], "node 0's token prefix")

	// The buyer adds a key on the account page, then books and pays.
	buyer := newPage(t)
	signUp(t, buyer, srv, "bea@hosts.test", "Bea Buyer", "", true, false)
	key := publicKey(t, "bea@laptop")
	gotoOK(t, buyer, srv.URL+"/account")
	fill(t, field(buyer, "Public key"), key)
	click(t, buyer.GetByTestId("add-ssh-key"), "Add key")
	expectText(t, buyer.GetByTestId("ssh-key"), "bea@laptop", "the key listed on the account page")
	start := time.Now().UTC().Truncate(time.Hour).Add(2 * time.Hour)
	resID := reserve(t, buyer, srv, 4, 1, start)
	click(t, buyer.GetByTestId("pay"), "Pay")
	click(t, buyer.GetByTestId("pay-simulated"), "Pay (simulated)")
	expectText(t, buyer.GetByTestId("reservation-state"), "confirmed", "state after paying")
	expectText(t, buyer.GetByTestId("access-state"), "Your keys are installed at the start", "access before the start")
	if n, _ := buyer.GetByTestId("access-command").Count(); n != 0 {
		t.Error("the reservation page shows a connection before the start")
	}

	// Just before the start the agent, now reporting to the restarted server, installs the key
	// and the buyer sees how to connect.
	agent.Process.Signal(os.Interrupt)
	agent.Wait()
	srv = restartAt(t, srv, start.Add(-3*time.Second))
	startAgent(srv)
	waitForText(t, buyer, srv.URL+"/reservations/"+resID, buyer.GetByTestId("access-command"), "ssh -p 2201 gpu@203.0.113.9")
	expectText(t, buyer.GetByTestId("access-host"), "203.0.113.9", "host")
	expectText(t, buyer.GetByTestId("access-port"), "2201", "port")
	expectText(t, buyer.GetByTestId("access-user"), "gpu", "user")
	expectText(t, buyer.GetByTestId("access-machine"), "online", "the machine's status")
	expectText(t, buyer.GetByTestId("access-state"), "Ready: your keys are installed", "access once installed")
	shot(t, buyer, "connect")
	phoneAccess(t, buyer)
	if b, err := os.ReadFile(keysFile); err != nil || !strings.Contains(string(b), key) {
		t.Errorf("the buyer's key is not in authorized_keys: %v\n%s", err, b)
	}

	gotoOK(t, provider, srv.URL+"/provider/hosts")
	expectText(t, node.GetByTestId("host-access"), "The buyer's keys are installed", "the provider's view of the keys")
	if n, _ := provider.GetByText("gpu@203.0.113.9").Count(); n != 0 {
		t.Error("the provider's hosts page shows the buyer's connection")
	}
	srv.reconcile(t)
}

// buildAgent builds the provider agent into dir.
func buildAgent(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "gpumarket-agent")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/gpumarket-agent")
	cmd.Dir = env.root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build ./cmd/gpumarket-agent: %v\n%s", err, out)
	}
	return bin
}

// publicKey returns a fresh Ed25519 public key as an authorized_keys line.
func publicKey(t *testing.T, comment string) string {
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

// waitForText reloads url until l says want (heartbeats come every 2 seconds).
func waitForText(t *testing.T, page playwright.Page, url string, l playwright.Locator, want string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		gotoOK(t, page, url)
		if n, _ := l.Count(); n > 0 {
			if text, _ := l.First().TextContent(); strings.Contains(text, want) {
				return
			}
		}
		if time.Now().After(deadline) {
			text, _ := l.First().TextContent()
			t.Fatalf("%s still says %q, want %q", url, text, want)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// phoneAccess checks the reservation page's access cell at 390 px (issue 31 item 2): the ssh
// command reads on whole lines of the screen, the machine's status badge is not cut off, nothing
// scrolls sideways, and the Copy button (shown by the script) sits beside the command. Without
// the script the command is still selectable text in a <code>.
func phoneAccess(t *testing.T, page playwright.Page) {
	t.Helper()
	orig := page.ViewportSize()
	if err := page.SetViewportSize(narrow.Width, narrow.Height); err != nil {
		t.Fatal(err)
	}
	defer page.SetViewportSize(orig.Width, orig.Height)
	noHorizontalOverflow(t, page, "the reservation's access on a phone")
	cmd := page.GetByTestId("access-command").First()
	if b := box(t, cmd, "the ssh command"); b.Width < 250 {
		t.Errorf("the ssh command is %.0f px wide on a %d px phone", b.Width, narrow.Width)
	}
	within(t, cmd, "the ssh command")
	within(t, page.GetByTestId("access-machine").First(), "the machine's status badge")
	if tag, err := cmd.Evaluate(`e => e.tagName + " " + getComputedStyle(e).userSelect`, nil); err != nil || tag != "CODE all" {
		t.Errorf("the ssh command is %v (%v), want a <code> selectable whole", tag, err)
	}
	copyButton := page.GetByTestId("access-copy").First()
	expectVisible(t, copyButton, "the Copy button")
	within(t, copyButton, "the Copy button")
	shot(t, page, "connect-phone")
}
