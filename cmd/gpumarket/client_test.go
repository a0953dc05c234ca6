package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
	"golang.org/x/crypto/ssh"

	"github.com/gpumarket/gpumarket/billing"
	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
	"github.com/gpumarket/gpumarket/web"
	"github.com/gpumarket/gpumarket/workflow"
)

// The client is tested as a person runs it: the real binary, built once,
// against the real server (web.New over a SQLite file, the local test
// processor) over HTTP, with its exit codes and its stdout and stderr.

var clientBinary struct {
	once sync.Once
	path string
	err  error
}

// gpumarketBinary builds this command once per test run.
func gpumarketBinary(t *testing.T) string {
	t.Helper()
	clientBinary.once.Do(func() {
		dir, err := os.MkdirTemp("", "gpumarket-cli-")
		if err != nil {
			clientBinary.err = err
			return
		}
		clientBinary.path = filepath.Join(dir, "gpumarket")
		out, err := exec.Command("go", "build", "-o", clientBinary.path, ".").CombinedOutput()
		if err != nil {
			clientBinary.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if clientBinary.err != nil {
		t.Fatal(clientBinary.err)
	}
	return clientBinary.path
}

// cliServer is the marketplace the client talks to, with a clock the test moves.
type cliServer struct {
	t     *testing.T
	url   string
	db    *store.DB
	wf    *workflow.Service
	local *billing.Local
	clock atomic.Int64 // unix nanoseconds
}

func (s *cliServer) now() time.Time { return time.Unix(0, s.clock.Load()).UTC() }

// tick moves the clock to at and runs the background step there, as
// serve's loop does.
func (s *cliServer) tick(at time.Time) {
	s.clock.Store(at.UnixNano())
	s.wf.Tick(context.Background(), at)
}

func newCLIServer(t *testing.T, start time.Time) *cliServer {
	t.Helper()
	ctx := context.Background()
	db, err := store.Open(ctx, filepath.Join(t.TempDir(), "cli.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	s := &cliServer{t: t, db: db}
	s.clock.Store(start.UnixNano())
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	s.local = billing.NewLocal(billing.LocalConfig{Store: db})
	s.wf, err = workflow.New(ctx, workflow.Config{Billing: s.local, PlatformFeeBP: 1000, Now: s.now, BaseURL: "http://127.0.0.1"}, db, log)
	if err != nil {
		t.Fatal(err)
	}
	_, e, err := web.New(ctx, web.Config{BaseURL: "http://127.0.0.1", SessionKey: []byte(strings.Repeat("k", 32)), PasswordCost: bcrypt.MinCost,
		Now: s.now, Workflow: s.wf, APIRatePerSecond: 1000}, db, log)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	s.url = srv.URL
	return s
}

// user creates a confirmed account and an API token of scope for it.
func (s *cliServer) user(email string, provider bool, scope string) (market.User, string) {
	s.t.Helper()
	ctx := context.Background()
	u, err := s.db.CreateUser(ctx, market.User{Email: email, DisplayName: email, IsBuyer: !provider, IsProvider: provider}, []byte("x"), s.now())
	if err != nil {
		s.t.Fatal(err)
	}
	_, raw, err := s.db.CreateAPIToken(ctx, u.ID, "cli", scope, s.now())
	if err != nil {
		s.t.Fatal(err)
	}
	return u, raw
}

// offer lists an approved one-node offer of 8 H100s at cents per device-hour.
func (s *cliServer) offer(providerID int64, cents market.Cents) market.Offer {
	s.t.Helper()
	ctx := context.Background()
	now := s.now()
	acc, _ := market.FindAccelerator("nvidia-h100-80gb-sxm")
	o := market.Offer{ProviderID: providerID, Title: "Eight H100 for the CLI", AcceleratorID: acc.ID, MemoryGB: acc.MemoryGB,
		DevicesPerNode: 8, Nodes: 1, Interconnect: market.InterconnectNVLink, NetworkID: "none",
		CPUCores: 32, RAMGB: 256, StorageGB: 1000, DriverVersion: "550.90", CUDAVersion: "12.4", OSImage: "Ubuntu 22.04",
		ContainerRuntime: "Docker", RegionID: "us-east-va", AvailableFrom: now, AvailableUntil: now.AddDate(0, 2, 0),
		MinRentalHours: 1, MaxRentalHours: 720, ProvisioningMins: 10, PriceCentsPerDeviceHour: cents,
		BillingBasis: market.BillingWallClock, UptimeBP: 9950, CreditCapBP: 10000, FreeCancelHours: 24, CancelFeeBP: 2500}
	if err := market.ValidateOffer(&o, now); err != nil {
		s.t.Fatal(err)
	}
	o, err := s.db.CreateOffer(ctx, o, now)
	if err != nil {
		s.t.Fatal(err)
	}
	if err := s.db.ReviewOffer(ctx, o.ID, market.ReviewApproved, "", now); err != nil {
		s.t.Fatal(err)
	}
	s.wf.RefreshOffer(ctx, o.ID)
	return o
}

// saveCard saves the local processor's succeeding test card for the user,
// as the account page's setup does.
func (s *cliServer) saveCard(userID int64) {
	s.t.Helper()
	s.saveCardNumber(userID, "4242 4242 4242 4242")
}

// saveCardNumber saves the local processor's test card of that number
// (e.g. 4000 0000 0000 0002, which declines); the newest is the default.
func (s *cliServer) saveCardNumber(userID int64, number string) {
	s.t.Helper()
	ctx := context.Background()
	co, err := s.local.CreateSetupCheckout(ctx, billing.SetupInput{UserID: userID, SuccessURL: "http://127.0.0.1/account", CancelURL: "http://127.0.0.1/account"})
	if err != nil {
		s.t.Fatal(err)
	}
	m, err := s.local.CompleteSetup(co.ID, number)
	if err != nil {
		s.t.Fatal(err)
	}
	if _, err := s.db.SavePaymentMethod(ctx, userID, market.PaymentMethod{Customer: m.Customer, ProcessorMethodID: m.PaymentMethodID, Label: m.Label}, s.now()); err != nil {
		s.t.Fatal(err)
	}
}

// addSSHKey gives the user a public key, which the agent installs.
func (s *cliServer) addSSHKey(userID int64) {
	s.t.Helper()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		s.t.Fatal(err)
	}
	sp, err := ssh.NewPublicKey(pub)
	if err != nil {
		s.t.Fatal(err)
	}
	line := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sp)))
	k := market.SSHKey{UserID: userID, Type: sp.Type(), Bits: 256, Fingerprint: ssh.FingerprintSHA256(sp), Comment: "cli@test", Line: line + " cli@test"}
	if _, err := s.db.AddSSHKey(context.Background(), userID, k, s.now()); err != nil {
		s.t.Fatal(err)
	}
}

// agent posts as the provider's agent with a host token.
func (s *cliServer) agent(token, path string, body any) map[string]any {
	s.t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, s.url+path, bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		s.t.Fatalf("agent %s: %d %s", path, resp.StatusCode, data)
	}
	var out map[string]any
	_ = json.Unmarshal(data, &out)
	return out
}

func heartbeat(seq int64, at time.Time) map[string]any {
	devices := make([]map[string]any, 8)
	for i := range devices {
		devices[i] = map[string]any{"index": i, "uuid": fmt.Sprintf("GPU-%04d", i), "name": "NVIDIA H100 80GB HBM3", "memory_mib": 81559,
			"temperature_c": 41, "utilization_pct": 97, "ecc_uncorrected": 0, "power_w": 612.5, "healthy": true}
	}
	return map[string]any{"seq": seq, "sent_at": at.Format(time.RFC3339), "agent_version": "1.0.0", "probe": "simulate", "devices": devices, "error": ""}
}

// cliRun is one run of the binary.
type cliRun struct {
	code           int
	stdout, stderr string
}

// cli runs the client with env (besides a clean HOME and PATH) and args.
func (s *cliServer) cli(env map[string]string, args ...string) cliRun {
	s.t.Helper()
	cmd := s.command(env, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	r := cliRun{stdout: out.String(), stderr: errOut.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		s.t.Fatal(err)
	}
	return r
}

func (s *cliServer) command(env map[string]string, args ...string) *exec.Cmd {
	cmd := exec.Command(gpumarketBinary(s.t), args...)
	cmd.Env = []string{"HOME=" + s.t.TempDir(), "PATH=" + os.Getenv("PATH"), "GPUMARKET_URL=" + s.url}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	return cmd
}

func (r cliRun) must(t *testing.T, code int, wants ...string) {
	t.Helper()
	if r.code != code {
		t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", r.code, code, r.stdout, r.stderr)
	}
	for _, w := range wants {
		if !strings.Contains(r.stdout+r.stderr, w) {
			t.Fatalf("output lacks %q\nstdout: %s\nstderr: %s", w, r.stdout, r.stderr)
		}
	}
}

func TestClientAgainstTheServer(t *testing.T) {
	start := time.Now().UTC().Truncate(time.Hour).Add(time.Hour)
	s := newCLIServer(t, start)
	prov, provTok := s.user("prov-cli@example.com", true, "write")
	o := s.offer(prov.ID, 219)
	buyer, tok := s.user("buyer-cli@example.com", false, "write")
	_, readTok := s.user("reader-cli@example.com", false, "read")
	s.saveCard(buyer.ID)
	s.addSSHKey(buyer.ID)
	as := map[string]string{"GPUMARKET_TOKEN": tok}
	id := strconv.FormatInt(o.ID, 10)

	// search: the query language as it is; a table, or the API's JSON.
	s.cli(as, "search", "devices>=8 family=H100 price<2.50").must(t, 0, "ACCELERATOR", "nvidia-h100-80gb-sxm", "$2.19", "1 of 1 matching offers")
	s.cli(as, "search", "price<2.00").must(t, 0, "0 of 0 matching offers")
	js := s.cli(as, "search", "--json", "family=H100")
	js.must(t, 0)
	var list struct {
		Offers []struct{ ID int64 } `json:"offers"`
		Total  int                  `json:"total"`
	}
	if err := json.Unmarshal([]byte(js.stdout), &list); err != nil || list.Total != 1 || list.Offers[0].ID != o.ID {
		t.Fatalf("search --json: %v %+v\n%s", err, list, js.stdout)
	}
	s.cli(as, "search", "devices>>8").must(t, 1, "q", "(HTTP 400)")

	// quote: the effective cost itemised; --explain says why not.
	begin := start.Add(2 * time.Hour)
	req := []string{"--devices", "8", "--hours", "24", "--family", "H100", "--start", begin.Format(time.RFC3339)}
	instance := money(8 * 24 * 219) // devices × hours × price
	s.cli(as, append([]string{"quote", "--explain"}, req...)...).must(t, 0, "instance "+instance, "quote id ", "offer "+id+": 8 × nvidia-h100-80gb-sxm", "Why: ", "offers considered")
	none := s.cli(as, "quote", "--explain", "--devices", "16", "--hours", "24", "--family", "H100")
	none.must(t, 1, "no quotes for this request", "Why: ")
	bad := filepath.Join(t.TempDir(), "bad.json")
	os.WriteFile(bad, []byte(`{"version":1,"workload":{"kind":"training","devices":"eight","hours":24}}`), 0o600)
	s.cli(as, "quote", "--file", bad).must(t, 1, "workload.devices", "(HTTP 400)")
	s.cli(as, "quote", "--hours", "3").must(t, 2, "--devices")

	// Auth: no token, a forged one, a read token on a write route, a
	// config file others can read — and one of mode 600 that works.
	s.cli(nil, "list").must(t, 3, "no API token")
	s.cli(map[string]string{"GPUMARKET_TOKEN": "gpm_forged"}, "list").must(t, 3, "(HTTP 401)")
	s.cli(map[string]string{"GPUMARKET_TOKEN": readTok}, append([]string{"book"}, req...)...).must(t, 3, "read-only", "(HTTP 403)")
	cfg := filepath.Join(t.TempDir(), "config.json")
	os.WriteFile(cfg, []byte(`{"url":"`+s.url+`","token":"`+tok+`"}`), 0o644)
	s.cli(map[string]string{"GPUMARKET_CONFIG": cfg}, "list").must(t, 3, "chmod 600")
	os.Chmod(cfg, 0o600)
	s.cli(map[string]string{"GPUMARKET_CONFIG": cfg}, "list").must(t, 0, "ID", "STATE")
	s.cli(as, "show").must(t, 2, "usage: gpumarket show")
	s.cli(as, "frobnicate").must(t, 2, "unknown command")

	// book the best quote, pay with the saved card and wait for the machine.
	bookCmd := s.command(as, append([]string{"book", "--pay", "--wait", "--poll", "50ms", "--timeout", "60s"}, req...)...)
	var bookOut, bookErr bytes.Buffer
	bookCmd.Stdout, bookCmd.Stderr = &bookOut, &bookErr
	if err := bookCmd.Start(); err != nil {
		t.Fatal(err)
	}
	var res market.Reservation
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		rs, err := s.db.ListBuyerReservations(context.Background(), buyer.ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(rs) == 1 && rs[0].State == market.ReservationConfirmed {
			res = rs[0]
			break
		}
		if time.Now().After(deadline) {
			bookCmd.Process.Kill()
			t.Fatalf("not booked and paid: %+v\n%s", rs, bookErr.String())
		}
	}
	if res.AmountCents != 8*24*219 || !res.Start().Equal(begin) {
		t.Fatalf("booked %+v", res)
	}
	// The provider's agent, with a token made by the client: at the start
	// it installs the buyer's key and says how to connect.
	hostTok := s.cli(map[string]string{"GPUMARKET_TOKEN": provTok}, "hosts", "token", "create", "--offer", id, "--node", "0")
	hostTok.must(t, 0, "shown only once")
	ht := strings.TrimSpace(hostTok.stdout)
	if !strings.HasPrefix(ht, "gph_") {
		t.Fatalf("host token %q", ht)
	}
	s.tick(begin)
	rep := s.agent(ht, "/agent/v1/heartbeat", heartbeat(1, begin))
	asg, _ := rep["assignments"].([]any)
	if len(asg) != 1 {
		t.Fatalf("assignments: %v", rep)
	}
	piece := int64(asg[0].(map[string]any)["piece_id"].(float64))
	s.agent(ht, fmt.Sprintf("/agent/v1/assignments/%d/installed", piece), map[string]any{"host": "203.0.113.7", "port": 2222, "user": "gpu", "installed_at": begin.Format(time.RFC3339)})
	if err := bookCmd.Wait(); err != nil {
		t.Fatalf("book --wait: %v\n%s\n%s", err, bookOut.String(), bookErr.String())
	}
	if got := strings.TrimSpace(bookOut.String()); got != "ssh -p 2222 gpu@203.0.113.7" {
		t.Fatalf("book --wait printed %q (stderr %s)", got, bookErr.String())
	}
	mustHave(t, bookErr.String(), "booking the best quote: ", "waiting…")
	rid := strconv.FormatInt(res.ID, 10)

	// show, list; ssh runs the system ssh (a stub here) with the endpoint.
	s.cli(as, "show", rid).must(t, 0, "Reservation #"+rid+": active", "node 0 (8 devices): ready: ssh -p 2222 gpu@203.0.113.7")
	s.cli(as, "list").must(t, 0, rid, "active", money(8*24*219))
	bin := t.TempDir()
	record := filepath.Join(t.TempDir(), "ssh-args")
	os.WriteFile(filepath.Join(bin, "ssh"), []byte("#!/bin/sh\nprintf '%s\\n' \"$@\" > "+record+"\n"), 0o755)
	sshRun := s.command(as, "ssh", "-i", "/keys/id_ed25519", rid, "--", "nvidia-smi", "-L")
	for i, e := range sshRun.Env {
		if strings.HasPrefix(e, "PATH=") {
			sshRun.Env[i] = "PATH=" + bin + ":" + os.Getenv("PATH")
		}
	}
	if out, err := sshRun.CombinedOutput(); err != nil {
		t.Fatalf("ssh: %v %s", err, out)
	}
	args, _ := os.ReadFile(record)
	if got, want := string(args), "-p\n2222\n-i\n/keys/id_ed25519\ngpu@203.0.113.7\nnvidia-smi\n-L\n"; got != want {
		t.Fatalf("ssh ran with %q, want %q", got, want)
	}

	// extend: priced, booked as a held reservation, paid with the card.
	s.cli(as, "extend", rid, "--hours", "2", "--max-cents", "100").must(t, 1, "more than --max-cents")
	ext := s.cli(as, "extend", rid, "--hours", "2")
	ext.must(t, 0, "Extended by 2 hours for "+money(8*2*219))
	var extID string
	fmt.Sscanf(ext.stdout[strings.Index(ext.stdout, "as reservation #")+len("as reservation #"):], "%s", &extID)
	extID = strings.TrimRight(extID, " (")
	s.cli(as, "pay", extID).must(t, 0, "Reservation #"+extID+": confirmed")
	// 409: a running reservation is not cancelled this way; the server's message.
	s.cli(as, "cancel", rid).must(t, 1, "(HTTP 409)")
	// A held booking of a quote id, then cancelled.
	later := []string{"--devices", "8", "--hours", "4", "--family", "H100", "--start", begin.Add(72 * time.Hour).Format(time.RFC3339)}
	q := s.cli(as, append([]string{"quote"}, later...)...)
	q.must(t, 0, "quote id ")
	qid := strings.Fields(q.stdout[strings.Index(q.stdout, "quote id ")+len("quote id "):])[0]
	held := s.cli(as, append([]string{"book", "--json", "--quote-id", qid}, later...)...)
	held.must(t, 0, `"state": "held"`)
	var hr struct{ ID int64 }
	json.Unmarshal([]byte(held.stdout), &hr)
	s.cli(as, append([]string{"book", "--quote-id", qid}, later...)...).must(t, 1, "(HTTP 409)")
	s.cli(as, "cancel", strconv.FormatInt(hr.ID, 10)).must(t, 0, ": cancelled")
	s.cli(as, "reject", "--reason", "not what was listed", strconv.FormatInt(hr.ID, 10)).must(t, 1, "(HTTP 409)")

	// The exchange's lists, and the provider's offers and hosts.
	s.cli(as, "orders", "list").must(t, 0, `"orders": []`)
	s.cli(as, "bids", "list").must(t, 0, `"bids": []`)
	s.cli(as, "resale", "list").must(t, 0, `"listings": []`)
	s.cli(as, "orders").must(t, 2, "usage: gpumarket orders")
	// A standing order below the price stays open, then is cancelled.
	ord := s.cli(as, "orders", "place", "--devices", "8", "--hours", "4", "--family", "H100", "--start", begin.Add(96*time.Hour).Format(time.RFC3339),
		"--limit-cents", "1", "--fill-by", begin.Add(48*time.Hour).Format(time.RFC3339), "--on-fill", "hold")
	ord.must(t, 0, `"state": "open"`, `"limit_cents": 1`)
	var placed struct{ ID int64 }
	json.Unmarshal([]byte(ord.stdout), &placed)
	oid := strconv.FormatInt(placed.ID, 10)
	s.cli(as, "orders", "list").must(t, 0, `"id": `+oid)
	s.cli(as, "orders", "cancel", oid).must(t, 0, "Standing order "+oid+" cancelled.")
	s.cli(as, "orders", "place", "--devices", "8", "--hours", "4", "--limit-cents", "100", "--fill-by", "tomorrow").must(t, 2, "--fill-by")
	// A spot bid on an offer that is not interruptible: the server's 400.
	s.cli(as, "bids", "place", "--offer", id, "--devices", "2", "--max-cents", "150", "--first-hour", begin.Add(24*time.Hour).Format(time.RFC3339),
		"--last-hour", begin.Add(25*time.Hour).Format(time.RFC3339)).must(t, 1, "(HTTP 400)")
	sell := s.cli(as, "resale", "sell", rid, "--from", begin.Add(6*time.Hour).Format(time.RFC3339), "--price-cents", "20000")
	sell.must(t, 0, `"state": "open"`, `"price_cents": 20000`, `"reservation_id": `+rid)
	var listing struct{ ID int64 }
	json.Unmarshal([]byte(sell.stdout), &listing)
	lid := strconv.FormatInt(listing.ID, 10)
	s.cli(as, "resale", "list").must(t, 0, `"id": `+lid)
	s.cli(as, "resale", "withdraw", lid).must(t, 0, "Listing "+lid+" withdrawn.")
	s.cli(as, "resale", "withdraw", lid).must(t, 1, "(HTTP 409)")
	pv := map[string]string{"GPUMARKET_TOKEN": provTok}
	s.cli(pv, "offers", "list").must(t, 0, id, "active", "approved", "$2.19")
	s.cli(pv, "offers", "pause", id).must(t, 0, "Offer "+id+" paused.")
	s.cli(pv, "offers", "list").must(t, 0, "paused")
	s.cli(pv, "offers", "resume", id).must(t, 0, "active again")
	s.cli(pv, "hosts", "status").must(t, 0, "ONLINE", id+"  ", "yes", "8/8")
	s.cli(as, "offers", "list").must(t, 3, "does not list capacity", "(HTTP 403)")

	diffs, err := s.wf.Reconcile(context.Background(), workflow.ReconcileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range diffs {
		t.Errorf("reconcile: reservation %d: %s", d.ReservationID, d.What)
	}
}

func mustHave(t *testing.T, s string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(s, w) {
			t.Fatalf("%q lacks %q", s, w)
		}
	}
}

// `gpumarket metered`: start one device of an offer that allows it, read
// the balance, stop it; after the last draw the balance is the top-up less
// the draws. 20 minutes at 300¢/h = 100¢.
func TestClientMetered(t *testing.T) {
	start := time.Now().UTC().Truncate(time.Hour).Add(time.Hour)
	s := newCLIServer(t, start)
	ctx := context.Background()
	prov, _ := s.user("metered-prov@cli.test", true, "write")
	o := s.offer(prov.ID, 300)
	buyer, tok := s.user("metered-buyer@cli.test", false, "write")
	env := map[string]string{"GPUMARKET_TOKEN": tok}
	offer := strconv.FormatInt(o.ID, 10)
	s.cli(env, "metered", "start", "--devices", "1", offer).must(t, 1, "does not allow metered rentals")
	if err := s.wf.SetOfferMetered(ctx, prov.ID, o.ID, true, 0); err != nil {
		t.Fatal(err)
	}
	s.cli(env, "metered", "start", "--devices", "1", offer).must(t, 1, "Top up first")
	s.saveCard(buyer.ID)
	if _, err := s.wf.TopUpWithSavedCard(ctx, buyer.ID, 2000); err != nil {
		t.Fatal(err)
	}
	s.cli(env, "metered", "balance").must(t, 0, "Balance $20.00")
	run := s.cli(env, "metered", "start", "--devices", "1", offer)
	run.must(t, 0, "Metered rental #", "The clock starts when the machine is usable")
	rentals, err := s.db.ListMeteredRentals(ctx, buyer.ID)
	if err != nil || len(rentals) != 1 {
		t.Fatalf("rentals %+v %v", rentals, err)
	}
	m := rentals[0]
	tokNode, _, err := s.db.CreateHostToken(ctx, prov.ID, o.ID, 0, s.now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.wf.RecordInstalled(ctx, tokNode, m.PieceID, market.Connection{Host: "203.0.113.5", Port: 22, User: "gpu"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.wf.RecordAcceptance(ctx, tokNode, m.PieceID, market.AcceptanceResult{Metric: market.FigureBF16TFLOPS, PerDeviceMilli: []int64{900000}, DurationSeconds: 5}); err != nil {
		t.Fatal(err)
	}
	clock := s.now()
	for i := 1; i <= 20; i++ {
		s.tick(clock.Add(time.Duration(i) * time.Minute))
	}
	id := strconv.FormatInt(m.ReservationID, 10)
	s.cli(env, "metered", "stop", id).must(t, 0, "stopped")
	s.cli(env, "metered", "stop", id).must(t, 1, "already stopped")
	s.tick(clock.Add(23 * time.Minute))
	s.cli(env, "metered", "balance").must(t, 0, "Balance $19.00", "draws $1.00")
}
