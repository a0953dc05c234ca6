package main

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

// The container test's engine: podman with runc and the vfs driver, as
// this machine needs (docs/testing.md), and ulimits below its hard limits.
var (
	testPodman        = []string{"podman", "--runtime", "runc", "--storage-driver", "vfs"}
	testContainerArgs = "--ulimit nofile=1024:1024 --ulimit nproc=4096:4096"
)

const (
	sshdTestImage = "localhost/gpumarket-sshd-test:2"
	// testCDIKind is the fake CDI spec's kind: simulated GPUs, each a file
	// mounted at /dev/fake-gpu-<index>, so the test sees which devices a
	// container was given (no GPU here; a real host has nvidia.com/gpu
	// from the NVIDIA Container Toolkit).
	testCDIKind = "gpumarket.test/gpu"
)

// TestContainerModeAgainstServer runs the real server, the real agent in
// container mode and real podman: a provider lists a 4-device node that
// runs buyer containers (and another offer that does not); a buyer asks
// for quotes with a runtime (an image with sshd, built here by podman
// import) and is told one offer does not run containers; they book two
// 2-device rentals at the same hour on the node and pay. Before the start
// the agent pulls (the image is local: present); at the start each piece
// gets a container with only its two devices (a fake CDI spec), the buyer
// really logs in over SSH on the published port, leaves a file and a
// process in the first, and the second sees neither and only its own
// devices. At the end both containers are gone and SSH is refused.
func TestContainerModeAgainstServer(t *testing.T) {
	if _, err := exec.LookPath("podman"); err != nil {
		t.Fatal("podman is not installed: run scripts/install-test-deps.sh (the container test runs real podman)")
	}
	if os.Getuid() != 0 {
		t.Skip("the container test runs rootful podman and writes a CDI spec in /var/run/cdi: run it as root (CI does)")
	}
	bins := buildBinaries(t)
	buildSSHDImage(t)
	writeFakeCDISpec(t, 4)
	dir := t.TempDir()
	db := filepath.Join(dir, "m.db")
	srv := startServer(t, bins, db, freeAddr(t), 0)

	provider := newBrowser(t, srv.URL)
	provider.signUp(db, "hosts@containers.test", true)
	today := time.Now().UTC().Truncate(24 * time.Hour)
	offer := func(title, engine string) {
		provider.mustPost("/provider/offers/new", "/provider/offers", url.Values{
			"title": {title}, "accelerator": {"nvidia-h100-80gb-sxm"}, "memory_gb": {"80"},
			"devices_per_node": {"4"}, "nodes": {"1"}, "interconnect": {"nvlink"}, "network": {"roce-400"},
			"cpu_cores": {"96"}, "ram_gb": {"1024"}, "storage_gb": {"8000"},
			"driver_version": {"550.90"}, "cuda_version": {"12.4"}, "os_image": {"Ubuntu 22.04"}, "container_runtime": {"Podman 4"},
			"container_engine": {engine}, "container_cdi": {map[bool]string{true: "1"}[engine != ""]},
			"region": {"us-west-or"}, "carbon": {""},
			"available_from": {today.Format("2006-01-02T15:04")}, "available_until": {today.AddDate(0, 2, 0).Format("2006-01-02T15:04")},
			"min_rental_hours": {"1"}, "max_rental_hours": {"720"}, "provisioning_mins": {"10"},
			"price": {"2.50"}, "storage_price": {"0.08"}, "egress_price": {"0.05"},
			"billing_basis": {"wall_clock"}, "uptime": {"99.5"}, "credit_schedule": {"99.5:10"},
			"credit_cap": {"100"}, "free_cancel_hours": {"24"}, "cancel_fee": {"25"},
		}, http.StatusSeeOther)
	}
	offer("4 × H100, buyer containers", "podman")
	offer("4 × H100, bare host", "")
	srv.createAdmin(t, "ops@containers.test")
	admin := newBrowser(t, srv.URL)
	admin.logIn("ops@containers.test")
	admin.setUpTwoFactor()
	var offerIDs []string
	for _, m := range regexp.MustCompile(`/admin/offers/(\d+)/review`).FindAllStringSubmatch(admin.get("/admin/offers").body, -1) {
		if len(offerIDs) == 0 || offerIDs[len(offerIDs)-1] != m[1] {
			offerIDs = append(offerIDs, m[1])
		}
	}
	if len(offerIDs) != 2 {
		t.Fatalf("review queue holds offers %v, want two", offerIDs)
	}
	for _, id := range offerIDs {
		admin.mustPost("/admin/offers", "/admin/offers/"+id+"/review", url.Values{"decision": {"approved"}}, http.StatusSeeOther)
	}
	containerOffer := offerIDs[0]
	if !strings.Contains(provider.get("/offers/"+containerOffer).body, "Runs buyer containers with podman, GPUs by CDI") {
		t.Error("the offer page does not say it runs buyer containers")
	}
	r := provider.mustPost("/provider/reservations", "/provider/payouts/connect", url.Values{}, http.StatusSeeOther)
	onboard := provider.path(r.location)
	provider.mustPost(onboard, onboard, url.Values{}, http.StatusSeeOther)
	provider.mustPost("/provider/hosts", "/provider/hosts/tokens", url.Values{"offer_id": {containerOffer}, "node": {"0"}}, http.StatusSeeOther)
	token := regexp.MustCompile(`gph_[A-Za-z0-9_-]{43}`).FindString(provider.get("/provider/hosts").body)
	if token == "" {
		t.Fatal("no host token shown")
	}
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	// The buyer's key: the public half on the account page, the private
	// half to log in with.
	buyer := newBrowser(t, srv.URL)
	buyer.signUp(db, "ada@containers.test", false)
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sshPub, _ := ssh.NewPublicKey(pub)
	signer, _ := ssh.NewSignerFromKey(priv)
	buyer.mustPost("/account", "/account/ssh-keys", url.Values{"public_key": {strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sshPub))) + " ada"}}, http.StatusSeeOther)
	buyer.mustPost("/account", "/account/tokens", url.Values{"token_name": {"ci"}, "token_scope": {"write"}}, http.StatusSeeOther)
	apiToken := regexp.MustCompile(`gpm_[A-Za-z0-9_-]+`).FindString(buyer.get("/account").body)

	start := time.Now().UTC().Truncate(time.Minute).Add(2 * time.Hour)
	end := start.Add(time.Hour)
	request := fmt.Sprintf(`{"version":1,"workload":{"kind":"training","devices":2,"hours":1},
		"constraints":{"families":["H100"],"earliest_start":%q,"deadline":%q},
		"runtime":{"image":%q,"launch":"ssh","env":[{"name":"HF_TOKEN","value":"hf_never_shown","secret":true}]}}`,
		start.Format(time.RFC3339), end.Format(time.RFC3339), sshdTestImage)
	book := func() int64 {
		var quotes struct {
			Quotes []struct {
				QuoteID string `json:"quote_id"`
				Pieces  []struct {
					OfferID int64 `json:"offer_id"`
				} `json:"pieces"`
			} `json:"quotes"`
			Explanation struct {
				Summary    string         `json:"summary"`
				Eliminated map[string]int `json:"eliminated"`
			} `json:"explanation"`
		}
		srv.api(t, apiToken, "POST", "/api/v1/quotes", request, http.StatusOK, &quotes)
		if len(quotes.Quotes) == 0 || strconv.FormatInt(quotes.Quotes[0].Pieces[0].OfferID, 10) != containerOffer {
			t.Fatalf("quotes %+v, want the container offer %s", quotes, containerOffer)
		}
		if quotes.Explanation.Eliminated["container"] != 1 || !strings.Contains(quotes.Explanation.Summary, "1 do not run containers") {
			t.Fatalf("explanation %+v, want the bare host counted as not running containers", quotes.Explanation)
		}
		var booked apiReservation
		srv.api(t, apiToken, "POST", "/api/v1/reservations", `{"request":`+request+`,"quote_id":"`+quotes.Quotes[0].QuoteID+`"}`, http.StatusCreated, &booked)
		resPath := fmt.Sprintf("/reservations/%d", booked.ID)
		r := buyer.mustPost(resPath, resPath+"/pay", url.Values{}, http.StatusSeeOther)
		checkout := buyer.path(r.location)
		buyer.mustPost(checkout, checkout, url.Values{}, http.StatusSeeOther)
		return booked.ID
	}
	first, second := book(), book()
	if page := buyer.get(fmt.Sprintf("/reservations/%d", first)).body; strings.Contains(page, "hf_never_shown") || !strings.Contains(page, sshdTestImage) {
		t.Error("the reservation page shows a secret, or not the image")
	}

	keysFile := filepath.Join(dir, "authorized_keys")
	if err := os.WriteFile(keysFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"-server", srv.URL, "-token-file", tokenFile, "-state", filepath.Join(dir, "state.json"),
		"-interval", "2s", "-simulate", "H100 80GB SXM x4", "-authorized-keys", keysFile,
		"-host", "127.0.0.1", "-ssh-user", "gpu",
		"-containers", "podman", "-engine-args", strings.Join(testPodman[1:], " "), "-container-args", testContainerArgs,
		"-container-dir", filepath.Join(dir, "containers"), "-publish-address", "127.0.0.1", "-cdi-kind", testCDIKind}
	startAgent(t, bins, args)
	t.Cleanup(func() { removeTestContainers(first, second) })

	// Before the start the agent is asked to prepare: the image is pulled
	// (here: found) and the buyer reads it on the reservation page.
	srv = srv.restartAt(t, start.Add(-10*time.Minute))
	waitUntil(t, 30*time.Second, "the reservation page says the image is pulled", func() bool {
		return strings.Contains(buyer.get(fmt.Sprintf("/reservations/%d", first)).body, "image pulled")
	})

	// At the start: a container per piece, each with its connection.
	srv = srv.restartAt(t, start.Add(-2*time.Second))
	ports := map[int64]int{}
	for _, id := range []int64{first, second} {
		waitUntil(t, 60*time.Second, fmt.Sprintf("reservation %d's container is ready", id), func() bool {
			got := srv.reservation(t, apiToken, id)
			if len(got.Access) == 1 && got.Access[0].State == "ready" {
				ports[id] = got.Access[0].Port
				return true
			}
			return false
		})
	}
	page := buyer.get(fmt.Sprintf("/reservations/%d", first)).body
	if got := testidText(page, "container-phase"); got != "ready" {
		t.Errorf("the reservation page shows the container %q, want ready", got)
	}
	if got := testidText(page, "access-command"); got != fmt.Sprintf("ssh -p %d root@127.0.0.1", ports[first]) {
		t.Errorf("the reservation page shows the command %q", got)
	}

	// The buyer logs in to the first: only devices 0 and 1; leaves a file
	// and a process behind.
	if out := sshRun(t, signer, ports[first], "ls /dev | grep fake-gpu"); out != "fake-gpu-0\nfake-gpu-1" {
		t.Fatalf("the first container sees devices %q, want fake-gpu-0 and fake-gpu-1", out)
	}
	sshRun(t, signer, ports[first], "echo mine > /root/first-was-here; setsid sleep 1234 </dev/null >/dev/null 2>&1 & echo started")
	if out := sshRun(t, signer, ports[first], "cat /root/first-was-here; ps | grep -c '[s]leep 1234'"); out != "mine\n1" {
		t.Fatalf("in the first container: %q, want its file and its process", out)
	}
	// The second: its own two devices, none of the first's files or processes.
	if out := sshRun(t, signer, ports[second], "ls /dev | grep fake-gpu"); out != "fake-gpu-2\nfake-gpu-3" {
		t.Fatalf("the second container sees devices %q, want fake-gpu-2 and fake-gpu-3", out)
	}
	if out := sshRun(t, signer, ports[second], "ls /root; ps | grep -c '[s]leep 1234'; hostname"); !strings.HasSuffix(out, "0\n"+containerName(pieceOf(t, second))) || strings.Contains(out, "first-was-here") {
		t.Fatalf("the second container sees %q: want no file or process of the first, its own hostname", out)
	}

	// At the end both containers are stopped and removed and SSH is refused.
	srv = srv.restartAt(t, end.Add(-2*time.Second))
	for _, id := range []int64{first, second} {
		waitUntil(t, 60*time.Second, fmt.Sprintf("reservation %d's container is removed", id), func() bool {
			got := srv.reservation(t, apiToken, id)
			return len(got.Access) == 1 && got.Access[0].State == "removed"
		})
		if out, err := exec.Command(testPodman[0], append(testPodman[1:], "ps", "-a", "-q", "--filter", "label=gpumarket.reservation="+strconv.FormatInt(id, 10))...).Output(); err != nil || strings.TrimSpace(string(out)) != "" {
			t.Errorf("reservation %d's container is still there: %q %v", id, out, err)
		}
		if c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", ports[id]), 2*time.Second); err == nil {
			c.Close()
			t.Errorf("reservation %d: port %d still accepts connections after the end", id, ports[id])
		}
		if got := testidText(buyer.get(fmt.Sprintf("/reservations/%d", id)).body, "container-phase"); got != "removed" {
			t.Errorf("reservation %d's page shows the container %q, want removed", id, got)
		}
	}
}

// sshRun logs in as root on the port with the buyer's key and runs cmd,
// returning its trimmed output.
func sshRun(t *testing.T, signer ssh.Signer, port int, cmd string) string {
	t.Helper()
	var c *ssh.Client
	var err error
	for i := 0; i < 60; i++ { // sshd may not listen yet
		c, err = ssh.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port), &ssh.ClientConfig{User: "root", Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)},
			HostKeyCallback: ssh.InsecureIgnoreHostKey(), Timeout: 5 * time.Second})
		if err == nil {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("ssh to port %d: %v", port, err)
	}
	defer c.Close()
	s, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	out, err := s.CombinedOutput(cmd)
	if err != nil {
		t.Fatalf("ssh %q: %v\n%s", cmd, err, out)
	}
	return strings.TrimSpace(string(out))
}

// pieceOf is a reservation's one piece id, read from the container labels.
func pieceOf(t *testing.T, reservation int64) int64 {
	t.Helper()
	out, err := exec.Command(testPodman[0], append(testPodman[1:], "ps", "-a", "--format", "{{.Labels}}", "--filter",
		"label=gpumarket.reservation="+strconv.FormatInt(reservation, 10))...).Output()
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`gpumarket.piece:(\d+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("no container of reservation %d: %s", reservation, out)
	}
	id, _ := strconv.ParseInt(string(m[1]), 10, 64)
	return id
}

// removeTestContainers removes what a failed test left.
func removeTestContainers(reservations ...int64) {
	for _, id := range reservations {
		out, _ := exec.Command(testPodman[0], append(testPodman[1:], "ps", "-a", "-q", "--filter", "label=gpumarket.reservation="+strconv.FormatInt(id, 10))...).Output()
		for _, c := range strings.Fields(string(out)) {
			_ = exec.Command(testPodman[0], append(testPodman[1:], "rm", "-f", c)...).Run()
		}
	}
}

// buildSSHDImage builds the test image unless present
// (scripts/build-sshd-test-image.sh: busybox and the host's sshd, imported
// with podman; no registry is reachable here).
func buildSSHDImage(t *testing.T) {
	t.Helper()
	cmd := exec.Command("bash", "../../scripts/build-sshd-test-image.sh")
	cmd.Env = append(os.Environ(), "PODMAN_FLAGS="+strings.Join(testPodman[1:], " "))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the sshd test image: %v\n%s", err, out)
	}
}

// writeFakeCDISpec writes a CDI spec of n simulated GPUs (testCDIKind) in
// /var/run/cdi, removed when the test ends: device i mounts a file that
// names it at /dev/fake-gpu-i.
func writeFakeCDISpec(t *testing.T, n int) {
	t.Helper()
	dir := t.TempDir()
	type mount struct {
		HostPath      string   `json:"hostPath"`
		ContainerPath string   `json:"containerPath"`
		Options       []string `json:"options"`
	}
	type device struct {
		Name           string `json:"name"`
		ContainerEdits struct {
			Mounts []mount `json:"mounts"`
		} `json:"containerEdits"`
	}
	spec := struct {
		CDIVersion string   `json:"cdiVersion"`
		Kind       string   `json:"kind"`
		Devices    []device `json:"devices"`
	}{CDIVersion: "0.5.0", Kind: testCDIKind}
	for i := 0; i < n; i++ {
		f := filepath.Join(dir, fmt.Sprintf("gpu%d", i))
		if err := os.WriteFile(f, []byte(strconv.Itoa(i)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		d := device{Name: strconv.Itoa(i)}
		d.ContainerEdits.Mounts = []mount{{HostPath: f, ContainerPath: fmt.Sprintf("/dev/fake-gpu-%d", i), Options: []string{"ro", "bind"}}}
		spec.Devices = append(spec.Devices, d)
	}
	b, _ := json.Marshal(spec)
	if err := os.MkdirAll("/var/run/cdi", 0o755); err != nil {
		t.Fatal(err)
	}
	path := "/var/run/cdi/gpumarket-test.json"
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(path) })
}
