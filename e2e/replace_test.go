package e2e

import (
	"context"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/playwright-community/playwright-go"

	"github.com/gpumarket/gpumarket/store"
)

// TestBuyerConfirmsReplacementInTheBrowser: a provider lists two offers; a buyer books the
// first for 2 hours with the "ask me first" replacement policy chosen on the request builder,
// and pays. The real agent on its node installs the buyer's key at the start and is then killed
// (SIGKILL). Past the grace period (the server restarted 5 minutes later, the market up
// meanwhile) the buyer's reservation page offers the replacement; the buyer opens it, confirms
// with the button, and the page shows the rental moved to the other offer. It reconciles.
func TestBuyerConfirmsReplacementInTheBrowser(t *testing.T) {
	srv := startServer(t, withArgs(moneyArgs...))
	provider := newPage(t)
	signUp(t, provider, srv, "rey@replace.test", "Rey Replace", "Replace Compute", false, true)
	srv.createAdmin(t, "ops@replace.test", "an admin password 123")
	admin := newPage(t)
	logIn(t, admin, srv, "ops@replace.test", "an admin password 123")
	titles := []string{"H100 rack A, replacement test", "H100 rack B, replacement test"}
	for _, title := range titles {
		gotoOK(t, provider, srv.URL+"/provider/offers/new")
		o := quebecH100
		o.Title, o.MemoryGB = title, "80"
		fillOffer(t, provider, o)
		fillTerms(t, provider)
		click(t, provider.GetByTestId("offer-submit"), "submit the offer")
		expectText(t, provider.GetByTestId("flash"), "pending review", "flash after submitting")
		gotoOK(t, admin, srv.URL+"/admin/offers")
		click(t, admin.GetByTestId("review-row").Filter(playwright.LocatorFilterOptions{HasText: title}).GetByTestId("approve"), "approve")
	}

	// The buyer adds a key, then books 4 devices for 2 hours, asking to be asked on failure.
	buyer := newPage(t)
	signUp(t, buyer, srv, "ria@replace.test", "Ria Buyer", "", true, false)
	key := publicKey(t, "ria@laptop")
	gotoOK(t, buyer, srv.URL+"/account")
	fill(t, field(buyer, "Public key"), key)
	click(t, buyer.GetByTestId("add-ssh-key"), "Add key")
	start := time.Now().UTC().Truncate(time.Hour).Add(2 * time.Hour)
	q := url.Values{
		"workload.kind": {"training"}, "workload.devices": {"4"}, "workload.hours": {"2"},
		"workload.checkpoint_mins": {"60"}, "workload.restart_mins": {"10"}, "constraints.families": {"H100"},
		"constraints.earliest_start": {start.Format("2006-01-02T15:04")}, "constraints.deadline": {start.Add(48 * time.Hour).Format("2006-01-02T15:04")},
		"preferences.cost_weight": {"100"},
	}
	gotoOK(t, buyer, srv.URL+"/requests?"+q.Encode())
	selectOption(t, field(buyer, "Replacement"), "Ask me first")
	click(t, buyer.GetByTestId("get-quotes"), "Get quotes")
	expectText(t, buyer.GetByTestId("on-failure"), "offers you another machine", "what happens on failure")
	booked := buyer.GetByTestId("quote").First()
	bookedTitle := titles[0]
	if text, _ := booked.TextContent(); strings.Contains(text, titles[1]) {
		bookedTitle = titles[1]
	}
	click(t, booked.GetByTestId("reserve"), "Reserve")
	expectText(t, buyer.GetByTestId("reservation-state"), "held", "state after reserving")
	resPath := strings.TrimPrefix(buyer.URL(), srv.URL)
	click(t, buyer.GetByTestId("pay"), "Pay")
	click(t, buyer.GetByTestId("pay-simulated"), "Pay (simulated)")
	expectText(t, buyer.GetByTestId("reservation-state"), "confirmed", "state after paying")

	// The booked offer's node 0 gets a host token and the real agent.
	gotoOK(t, provider, srv.URL+"/provider/hosts")
	node := provider.GetByTestId("host-offer").Filter(playwright.LocatorFilterOptions{HasText: bookedTitle}).Locator(`[data-testid="host-node"][data-node="0"]`)
	click(t, node.GetByTestId("create-host-token"), "Create token for node 0")
	token, err := provider.GetByTestId("new-host-token").Locator("div.mono").TextContent()
	if err != nil || !strings.HasPrefix(strings.TrimSpace(token), "gph_") {
		t.Fatalf("the new host token is not shown: %q %v", token, err)
	}
	dir := t.TempDir()
	agentBin := buildAgent(t, dir)
	keysFile := filepath.Join(dir, "authorized_keys")
	startAgent := func(srv *server) *exec.Cmd {
		cmd := exec.Command(agentBin, "-server", srv.URL, "-state", filepath.Join(dir, "state.json"), "-interval", "2s",
			"-simulate", "H100 80GB SXM x4", "-authorized-keys", keysFile, "-host", "203.0.113.9", "-port", "2201", "-ssh-user", "gpu")
		cmd.Env = append(serverEnv(), "GPUMARKET_AGENT_TOKEN="+strings.TrimSpace(token))
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
	srv = restartAt(t, srv, start.Add(-3*time.Second))
	agent := startAgent(srv)
	waitForText(t, buyer, srv.URL+resPath, buyer.GetByTestId("access-command"), "ssh -p 2201 gpu@203.0.113.9")

	// Ten minutes in, the host dies.
	srv = restartAt(t, srv, start.Add(10*time.Minute))
	time.Sleep(5 * time.Second) // a few heartbeats on the new clock
	if err := agent.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	agent.Wait()
	last := time.Now().Add(time.Until(start.Add(10 * time.Minute))).Add(-5 * time.Second) // the server's clock, about
	srv.stop(t)
	at := start.Add(16 * time.Minute)
	db, err := store.Open(context.Background(), srv.DB)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.RecordServerBeat(context.Background(), "up-meanwhile", last, at); err != nil {
		t.Fatal(err)
	}
	db.Close()
	srv.reported = true
	srv = startServer(t, withDB(srv.DB), withArgs(append(append([]string(nil), moneyArgs...), "-clock-offset", offsetTo(at))...))

	// The buyer is offered the replacement on the reservation page and confirms it.
	waitForText(t, buyer, srv.URL+resPath, buyer.GetByTestId("replacement-state"), "offered")
	click(t, buyer.GetByTestId("replacement-confirm-link"), "Review and confirm…")
	expectText(t, buyer.Locator("main"), "host failure on node 1", "what failed")
	shot(t, buyer, "replacement-offer")
	click(t, buyer.GetByTestId("confirm-replacement"), "Move my rental")
	expectText(t, buyer.GetByTestId("flash"), "Your rental was moved to the replacement", "flash after confirming")
	expectText(t, buyer.GetByTestId("replacement-state"), "replaced", "the replacement's state")
	if n, _ := buyer.GetByTestId("replacement-new").Count(); n != 1 {
		t.Fatal("the reservation page does not show the replacement")
	}
	expectText(t, buyer.GetByTestId("replacement-new"), "4 device(s)", "the replacement's pieces")
	fitsPhone(t, buyer, "the reservation page with its replacement (the panel the statement shows too)")
	shot(t, buyer, "replaced")
	srv.reconcile(t)
}
