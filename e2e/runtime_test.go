package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/playwright-community/playwright-go"
)

// TestBuyerPicksATemplateAndSeesItsContainer: a provider lists an offer whose host runs buyer
// containers (podman, GPUs by CDI) and registers node 0; a buyer saves a template (an image with
// sshd, built here by podman import; docs/agent.md) on the templates page, picks it on the request
// form, books and pays. The reservation page names the environment; with the real agent in
// container mode and real podman (a fake CDI spec of simulated GPUs), it shows "image pulled"
// before the start and "ready" with the SSH command at the start. (The image is local, so the
// "pulling image…" phase passes in an instant.)
func TestBuyerPicksATemplateAndSeesItsContainer(t *testing.T) {
	if _, err := exec.LookPath("podman"); err != nil {
		t.Fatal("podman is not installed: run scripts/install-test-deps.sh")
	}
	if os.Getuid() != 0 {
		t.Skip("runs rootful podman and writes a CDI spec in /var/run/cdi: run as root (CI does)")
	}
	podmanFlags := []string{"--runtime", "runc", "--storage-driver", "vfs"}
	build := exec.Command("bash", filepath.Join(env.root, "scripts", "build-sshd-test-image.sh"))
	build.Env = append(os.Environ(), "PODMAN_FLAGS="+strings.Join(podmanFlags, " "))
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the sshd test image: %v\n%s", err, out)
	}
	const image = "localhost/gpumarket-sshd-test:2"
	spec := `{"cdiVersion":"0.5.0","kind":"gpumarket.test/gpu","devices":[` +
		`{"name":"0","containerEdits":{"env":["FAKE_GPU_0=1"]}},{"name":"1","containerEdits":{"env":["FAKE_GPU_1=1"]}},` +
		`{"name":"2","containerEdits":{"env":["FAKE_GPU_2=1"]}},{"name":"3","containerEdits":{"env":["FAKE_GPU_3=1"]}}]}`
	if err := os.MkdirAll("/var/run/cdi", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile("/var/run/cdi/gpumarket-e2e.json", []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove("/var/run/cdi/gpumarket-e2e.json") })

	srv := startServer(t, withArgs(moneyArgs...))
	provider := newPage(t)
	signUp(t, provider, srv, "cy@containers.test", "Cy Containers", "Box Compute", false, true)
	gotoOK(t, provider, srv.URL+"/provider/offers/new")
	o := quebecH100
	o.Title = "H100 rack running your containers"
	o.MemoryGB = "80"
	fillOffer(t, provider, o)
	fillTerms(t, provider)
	selectOption(t, field(provider, "Runs buyer containers with"), "Podman")
	if err := provider.Locator("#f-container_cdi").Check(); err != nil {
		t.Fatal(err)
	}
	click(t, provider.GetByTestId("offer-submit"), "submit the offer")
	expectText(t, provider.GetByTestId("flash"), "pending review", "flash after submitting")
	srv.createAdmin(t, "ops@containers.test", "an admin password 123")
	admin := newPage(t)
	logIn(t, admin, srv, "ops@containers.test", "an admin password 123")
	gotoOK(t, admin, srv.URL+"/admin/offers")
	click(t, admin.GetByTestId("review-row").Filter(playwright.LocatorFilterOptions{HasText: o.Title}).GetByTestId("approve"), "approve")
	gotoOK(t, provider, srv.URL+"/provider/hosts")
	offer := provider.GetByTestId("host-offer").Filter(playwright.LocatorFilterOptions{HasText: o.Title})
	click(t, offer.Locator(`[data-testid="host-node"][data-node="0"]`).GetByTestId("create-host-token"), "Create token for node 0")
	token, err := provider.GetByTestId("new-host-token").Locator("div.mono").TextContent()
	if err != nil {
		t.Fatal(err)
	}
	token = strings.TrimSpace(token)

	// The buyer: a key, a template, the request form with the template picked.
	buyer := newPage(t)
	signUp(t, buyer, srv, "di@containers.test", "Di Buyer", "", true, false)
	gotoOK(t, buyer, srv.URL+"/account")
	fill(t, field(buyer, "Public key"), publicKey(t, "di@laptop"))
	click(t, buyer.GetByTestId("add-ssh-key"), "Add key")
	gotoOK(t, buyer, srv.URL+"/templates")
	fill(t, field(buyer, "Name"), "SSH box")
	fill(t, field(buyer, "Image"), image)
	selectOption(t, field(buyer, "Launch mode"), "SSH: an SSH server with my keys")
	click(t, buyer.GetByTestId("template-save"), "Save template")
	expectText(t, buyer.GetByTestId("flash"), "Saved the template", "flash after saving the template")
	expectText(t, buyer.GetByTestId("template-name"), "SSH box", "the template listed")

	start := time.Now().UTC().Truncate(time.Hour).Add(2 * time.Hour)
	gotoOK(t, buyer, srv.URL+"/requests?workload.kind=training&workload.devices=2&workload.hours=1&constraints.families=H100"+
		"&constraints.earliest_start="+start.Format("2006-01-02T15:04")+"&constraints.deadline="+start.Add(48*time.Hour).Format("2006-01-02T15:04"))
	if _, err := buyer.GetByTestId("runtime-template").SelectOption(playwright.SelectOptionValues{Values: &[]string{templateID(t, buyer, srv)}}); err != nil {
		t.Fatal(err)
	}
	click(t, buyer.GetByTestId("get-quotes"), "Get quotes")
	if v, _ := field(buyer, "Image").InputValue(); v != image {
		t.Fatalf("the template did not fill the image: %q", v)
	}
	click(t, buyer.GetByTestId("quote").First().GetByTestId("reserve"), "Reserve")
	expectText(t, buyer.GetByTestId("reservation-state"), "held", "state after reserving")
	resPath := strings.TrimPrefix(buyer.URL(), srv.URL) // the server's address changes with each restart
	click(t, buyer.GetByTestId("pay"), "Pay")
	click(t, buyer.GetByTestId("pay-simulated"), "Pay (simulated)")
	expectText(t, buyer.GetByTestId("access-image"), image, "the environment on the reservation page")

	// The agent in container mode.
	dir := t.TempDir()
	agentBin := buildAgent(t, dir)
	startAgent := func(srv *server) *exec.Cmd {
		cmd := exec.Command(agentBin, "-server", srv.URL, "-state", filepath.Join(dir, "state.json"), "-interval", "2s",
			"-simulate", "H100 80GB SXM x4", "-authorized-keys", filepath.Join(dir, "authorized_keys"), "-host", "127.0.0.1", "-ssh-user", "gpu",
			"-containers", "podman", "-engine-args", strings.Join(podmanFlags, " "),
			"-container-args", "--ulimit nofile=1024:1024 --ulimit nproc=4096:4096", "-container-dir", filepath.Join(dir, "containers"),
			"-publish-address", "127.0.0.1", "-cdi-kind", "gpumarket.test/gpu")
		cmd.Env = append(serverEnv(), "GPUMARKET_AGENT_TOKEN="+token)
		out := &syncBuffer{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
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
	t.Cleanup(func() {
		out, _ := exec.Command("podman", append(podmanFlags, "ps", "-a", "-q", "--filter", "label=gpumarket.piece")...).Output()
		for _, c := range strings.Fields(string(out)) {
			exec.Command("podman", append(podmanFlags, "rm", "-f", c)...).Run()
		}
	})
	srv = restartAt(t, srv, start.Add(-10*time.Minute))
	agent := startAgent(srv)
	waitForText(t, buyer, srv.URL+resPath, buyer.GetByTestId("container-phase"), "image pulled")
	shot(t, buyer, "pulled")
	// The restarted server listens elsewhere: the agent follows it.
	agent.Process.Signal(os.Interrupt)
	agent.Wait()
	srv = restartAt(t, srv, start.Add(-3*time.Second))
	startAgent(srv)
	waitForText(t, buyer, srv.URL+resPath, buyer.GetByTestId("container-phase"), "ready")
	expectText(t, buyer.GetByTestId("access-command"), "ssh -p ", "the SSH command")
	expectText(t, buyer.GetByTestId("access-user"), "root", "the container's user")
	expectText(t, buyer.GetByTestId("container-ports"), "22 → ", "the published port")
	shot(t, buyer, "ready")
}

// templateID reads the id of the buyer's first template from the templates page, then goes back.
func templateID(t *testing.T, page playwright.Page, srv *server) string {
	t.Helper()
	back := page.URL()
	gotoOK(t, page, srv.URL+"/templates")
	id, err := page.GetByTestId("template-row").First().GetAttribute("data-id")
	if err != nil || id == "" {
		t.Fatalf("no template listed: %v", err)
	}
	gotoOK(t, page, back)
	return id
}
