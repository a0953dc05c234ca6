package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/account"
	"github.com/gpumarket/gpumarket/agentapi"
	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
	"github.com/gpumarket/gpumarket/store/pgtest"
)

// TestPushReachesTheAgentsReplica: two real `gpumarket serve` processes on
// one PostgreSQL database. The node's agent (the real protocol over HTTP)
// sends one heartbeat to replica B and then holds the long-poll there; it
// sends no other heartbeat (as with a 60 s interval), so only a push can bring
// it anything within the test. The buyer books and pays on replica A: the
// long-poll on B answers with the buyer's key to install within a second
// of the payment, long before its 15 s wait ends, which only the change
// feed (A's commit heard on B: workflow.Follow waking B's long-polls) can
// explain. The agent reports the key installed on B and holds the
// long-poll again; the rental's end (the replicas restarted with their
// clocks just before it) removes the key as fast, from B's own clock.
// Then a metered rental is started and stopped on A: the installation and
// the removal both reach B's long-poll through the change feed within a
// second. (A running hourly rental cannot be cancelled: the stop of a
// metered one is the change on A that ends access.)
func TestPushReachesTheAgentsReplica(t *testing.T) {
	bin := buildServerBinary(t)
	dsn := pgtest.Database(t)
	m := seedPushMarket(t, dsn)
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	fleet := &replicaFleet{bin: bin, dsn: dsn, sessionKey: hex.EncodeToString(key), names: []string{"replica-a", "replica-b"}}
	fleet.start(t, 0)
	a, b := fleet.reps[0], fleet.reps[1]
	ag := &pushAgent{t: t, base: b.url, token: m.hostToken, http: &http.Client{Timeout: 30 * time.Second}}

	hb := ag.heartbeat()
	if !hb.Push || hb.Version == "" || len(hb.Assignments) != 0 {
		t.Fatalf("replica B's first heartbeat answer: %+v, want push, a version and nothing to do", hb)
	}

	// The booking on A starts at once (the offer provisions in 0 minutes);
	// the long-poll is held on B only once that start has passed, so the
	// piece's start cannot be what wakes it: only the payment can.
	booked := a.book(t, m.buyer, `{"version":1,"workload":{"kind":"training","devices":8,"hours":1,"checkpoint_mins":60,"restart_mins":10},"constraints":{"offers":[`+fmt.Sprint(m.offer)+`]}}`)
	if booked.status != http.StatusCreated {
		t.Fatalf("book on replica A: %d\n%s", booked.status, booked.body)
	}
	var res struct {
		ID     int64 `json:"id"`
		Pieces []struct {
			Start time.Time `json:"start"`
		} `json:"pieces"`
	}
	if err := json.Unmarshal([]byte(booked.body), &res); err != nil || res.ID == 0 || len(res.Pieces) != 1 {
		t.Fatalf("the booking: %v\n%s", err, booked.body)
	}
	time.Sleep(time.Until(res.Pieces[0].Start) + 200*time.Millisecond)

	poll := ag.longPoll(hb.Version)
	select {
	case got := <-poll:
		t.Fatalf("the long-poll on B answered before the payment: %+v", got)
	case <-time.After(300 * time.Millisecond):
	}
	buyer := newReplicaBrowser(t, a.url)
	buyer.logIn("buyer@push.test")
	page := fmt.Sprintf("/reservations/%d", res.ID)
	checkout := buyer.post(page, page+"/pay", url.Values{})
	paid := time.Now()
	buyer.post(checkout, checkout, url.Values{}) // the local processor's payment page, on A
	installed := ag.await(poll, paid, "the payment on replica A")
	if len(installed.Assignments) != 1 || installed.Assignments[0].State != "install" ||
		installed.Assignments[0].ReservationID != res.ID || !slicesContain(installed.Assignments[0].SSHKeys, pushBuyerKey) {
		t.Fatalf("the long-poll after the payment: %+v, want the buyer's key to install", installed)
	}
	piece := installed.Assignments[0].PieceID
	ag.report(piece, agentapi.ReportInstalled)

	// The report changes the assignments' version (reported: true): take
	// it. Then the rental's end: the replicas are restarted with their
	// clocks a few seconds before it, the agent holds the long-poll on B
	// again, and the removal reaches it at the end, from B's own clock
	// (the next start or end of a piece on the node), not at a heartbeat.
	known := ag.longPollNow(installed.Version).Version
	end := installed.Assignments[0].End
	fleet.restartAt(t, end.Add(-8*time.Second)) // within one long-poll's 15 s wait, with time to start
	a, b = fleet.reps[0], fleet.reps[1]
	ag.base = b.url
	if left := end.Sub(fleet.now()); left < time.Second {
		t.Fatalf("the replicas took so long to restart that the rental ends in %s: no time to hold the long-poll", left)
	}
	poll = ag.longPoll(known)
	select {
	case got := <-poll:
		t.Fatalf("the long-poll on B answered before the rental's end (%s away): %+v", end.Sub(fleet.now()), got)
	case <-time.After(300 * time.Millisecond):
	}
	removed := ag.await(poll, time.Now().Add(end.Sub(fleet.now())), "the rental's end")
	if len(removed.Assignments) != 1 || removed.Assignments[0].State != "remove" || removed.Assignments[0].PieceID != piece {
		t.Fatalf("the long-poll at the rental's end: %+v, want the piece's key to remove", removed)
	}
	ag.report(piece, agentapi.ReportRemoved)

	// A metered rental, started and stopped on A: both reach the agent on
	// B through the change feed, the stop (the removal of the key) as fast
	// as the start.
	known = ag.longPollNow(removed.Version).Version
	poll = ag.longPoll(known)
	started := time.Now()
	var metered struct {
		ReservationID int64 `json:"reservation_id"`
	}
	if r := a.call(m.buyer, "POST", fmt.Sprintf("/api/v1/offers/%d/metered", m.offer), `{"devices":8,"max_minutes":0}`); r.status != http.StatusCreated ||
		json.Unmarshal([]byte(r.body), &metered) != nil || metered.ReservationID == 0 {
		t.Fatalf("start a metered rental on replica A: %d\n%s", r.status, r.body)
	}
	installed = ag.await(poll, started, "the metered rental's start on replica A")
	if len(installed.Assignments) != 1 || installed.Assignments[0].State != "install" || installed.Assignments[0].ReservationID != metered.ReservationID {
		t.Fatalf("the long-poll after the metered start: %+v, want the buyer's key to install", installed)
	}
	piece = installed.Assignments[0].PieceID
	ag.report(piece, agentapi.ReportInstalled)
	known = ag.longPollNow(installed.Version).Version
	poll = ag.longPoll(known)
	select {
	case got := <-poll:
		t.Fatalf("the long-poll on B answered before the metered rental stopped: %+v", got)
	case <-time.After(300 * time.Millisecond):
	}
	stopped := time.Now()
	if r := a.call(m.buyer, "POST", fmt.Sprintf("/api/v1/reservations/%d/stop", metered.ReservationID), ""); r.status != http.StatusOK {
		t.Fatalf("stop the metered rental on replica A: %d\n%s", r.status, r.body)
	}
	removed = ag.await(poll, stopped, "the metered rental's stop on replica A")
	if len(removed.Assignments) != 1 || removed.Assignments[0].State != "remove" || removed.Assignments[0].PieceID != piece {
		t.Fatalf("the long-poll after the metered stop: %+v, want the piece's key to remove", removed)
	}
	ag.report(piece, agentapi.ReportRemoved)
}

// pushLimit is how soon after a change (a payment on replica A, a
// rental's end) the long-poll on replica B must answer: far below its 15 s wait.
const pushLimit = time.Second

// pushMarket is what seedPushMarket stored.
type pushMarket struct {
	offer     int64
	hostToken string // the node's agent's token
	buyer     string // the buyer's API token
}

const pushBuyerKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIG01hsMAM7RpPI0A/8qBgEd+reLeY9Y/YXcvCKwu2ocf buyer@push.test"

// seedPushMarket stores a provider with one approved one-node offer of 8
// H100s that provisions at once and a host token for its node, and a
// buyer with an SSH key, an API token and the password replicaPassword.
func seedPushMarket(t *testing.T, dsn string) pushMarket {
	t.Helper()
	ctx := context.Background()
	db, err := store.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	hash, err := account.Hash(replicaPassword, account.DefaultCost)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	prov, err := db.CreateUser(ctx, market.User{Email: "provider@push.test", DisplayName: "Provider", IsProvider: true}, hash, now)
	if err != nil {
		t.Fatal(err)
	}
	buyer, err := db.CreateUser(ctx, market.User{Email: "buyer@push.test", DisplayName: "Buyer", IsBuyer: true}, hash, now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.AddSSHKey(ctx, buyer.ID, market.SSHKey{Type: "ssh-ed25519", Bits: 256, Fingerprint: "SHA256:push-test-key", Comment: "buyer@push.test",
		Line: pushBuyerKey}, now); err != nil {
		t.Fatal(err)
	}
	_, buyerTok, err := db.CreateAPIToken(ctx, buyer.ID, "push", store.TokenScopeWrite, now)
	if err != nil {
		t.Fatal(err)
	}
	o := market.Offer{
		ProviderID: prov.ID, Title: "1 × 8 H100, pushed", AcceleratorID: "nvidia-h100-80gb-sxm", MemoryGB: 80,
		DevicesPerNode: 8, Nodes: 1, Interconnect: market.InterconnectNVLink, NetworkID: "none", CPUCores: 96, RAMGB: 1024,
		StorageGB: 7680, DriverVersion: "550.54", CUDAVersion: "12.4", OSImage: "Ubuntu 22.04", ContainerRuntime: "Docker 26",
		RegionID: "us-west-or", AvailableFrom: now.Add(-time.Hour), AvailableUntil: now.Add(30 * 24 * time.Hour), MinRentalHours: 1,
		MaxRentalHours: 720, ProvisioningMins: 0, PriceCentsPerDeviceHour: 249, BillingBasis: market.BillingWallClock, UptimeBP: 9950,
		CreditSchedule: []market.CreditTier{{BelowBP: 9950, CreditBP: 1000}}, CreditCapBP: 5000, FreeCancelHours: 24, CancelFeeBP: 1000,
	}
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
	_, hostTok, err := db.CreateHostToken(ctx, prov.ID, created.ID, 0, now)
	if err != nil {
		t.Fatal(err)
	}
	// Metered rentals allowed, and a paid top-up to draw them from.
	if err := db.SetOfferMetered(ctx, prov.ID, created.ID, true, 60, now); err != nil {
		t.Fatal(err)
	}
	top, err := db.CreateTopUp(ctx, buyer.ID, 100_00, store.TopUpCheckout, now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.RecordTopUpPaid(ctx, top.ID, "pi_push_test_topup", now); err != nil {
		t.Fatal(err)
	}
	return pushMarket{offer: created.ID, hostToken: hostTok, buyer: buyerTok}
}

// pushAgent speaks the agent's protocol (agentapi) to one replica.
type pushAgent struct {
	t     *testing.T
	base  string
	token string
	http  *http.Client
	seq   int64
}

// do sends one request and decodes a 200's body into out.
func (ag *pushAgent) do(method, path string, body any, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, ag.base+"/"+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+ag.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := ag.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, b)
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(b, out)
}

// heartbeat sends one heartbeat with the offer's 8 healthy devices.
func (ag *pushAgent) heartbeat() agentapi.HeartbeatResponse {
	ag.t.Helper()
	if ag.seq == 0 {
		ag.seq = time.Now().UnixMilli()
	}
	ag.seq++
	devices := make([]market.HostDevice, 8)
	for i := range devices {
		devices[i] = market.HostDevice{Index: i, UUID: fmt.Sprintf("GPU-push-%d", i), Name: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559,
			TemperatureC: 40, PowerW: 70, Healthy: true}
	}
	var out agentapi.HeartbeatResponse
	if err := ag.do("POST", agentapi.PathHeartbeat, agentapi.Heartbeat{Seq: ag.seq, SentAt: time.Now().UTC(), AgentVersion: "push-test",
		Probe: "nvidia-smi", Devices: devices}, &out); err != nil {
		ag.t.Fatal(err)
	}
	return out
}

// pollAnswer is a long-poll's answer, or why there is none.
type pollAnswer struct {
	agentapi.Assignments
	at  time.Time
	err error
}

// longPoll holds the long-poll (the longest wait) in the background.
func (ag *pushAgent) longPoll(known string) <-chan pollAnswer {
	ch := make(chan pollAnswer, 1)
	go func() {
		var a pollAnswer
		a.err = ag.do("GET", fmt.Sprintf("%s?%s=%d&%s=%s", agentapi.PathAssignments, agentapi.QueryWait, agentapi.MaxWaitSeconds,
			agentapi.QueryKnown, url.QueryEscape(known)), nil, &a.Assignments)
		a.at = time.Now()
		ch <- a
	}()
	return ch
}

// longPollNow is the long-poll's answer at once (the version differs).
func (ag *pushAgent) longPollNow(known string) agentapi.Assignments {
	ag.t.Helper()
	a := <-ag.longPoll(known + "-not-it")
	if a.err != nil {
		ag.t.Fatal(a.err)
	}
	return a.Assignments
}

// await waits for the long-poll's answer, which must say changed within
// pushLimit of since.
func (ag *pushAgent) await(poll <-chan pollAnswer, since time.Time, what string) agentapi.Assignments {
	ag.t.Helper()
	var a pollAnswer
	select {
	case a = <-poll:
	case <-time.After(agentapi.MaxWaitSeconds*time.Second + 5*time.Second):
		ag.t.Fatalf("the long-poll on replica B never answered after %s", what)
	}
	if a.err != nil {
		ag.t.Fatal(a.err)
	}
	took := a.at.Sub(since)
	ag.t.Logf("%s reached the long-poll on replica B in %s", what, took.Round(time.Millisecond))
	if !a.Changed || took > pushLimit {
		ag.t.Fatalf("%s: the long-poll on B answered changed=%v %s later, want changed within %s (its wait is %d s; the agent sends no other heartbeat)",
			what, a.Changed, took.Round(time.Millisecond), pushLimit, agentapi.MaxWaitSeconds)
	}
	return a.Assignments
}

// report posts a piece's installed or removed report.
func (ag *pushAgent) report(pieceID int64, kind string) {
	ag.t.Helper()
	var body any = agentapi.Removed{RemovedAt: time.Now().UTC()}
	if kind == agentapi.ReportInstalled {
		body = agentapi.Installed{Connection: agentapi.Connection{Host: "node.push.test", Port: 22, User: "ubuntu"}, InstalledAt: time.Now().UTC()}
	}
	if err := ag.do("POST", agentapi.AssignmentPath(pieceID, kind), body, nil); err != nil {
		ag.t.Fatal(err)
	}
}

func slicesContain(ss []string, s string) bool {
	for _, x := range ss {
		if strings.TrimSpace(x) == s {
			return true
		}
	}
	return false
}
