package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/account"
	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
	"github.com/gpumarket/gpumarket/store/pgtest"
	"github.com/gpumarket/gpumarket/workflow"
)

// TestReplicasOnOnePostgres runs three real `gpumarket serve` processes,
// built here, on one PostgreSQL database, as a load balancer would spread
// people over them:
//
//   - 64 buyers book the last 8 free devices of an offer at once, through
//     the API, spread over the three replicas: exactly 8 bookings are
//     made, every other booker gets a 409 saying the capacity is gone, and
//     no answer is a 5xx;
//   - an offer resumed and paused through one replica shows in (and
//     leaves) another replica's quotes within a second;
//   - the 8 winners pay (browser sessions signed on one replica, used on
//     another), the rentals run (an outage reported, so each settles with
//     a refund and a payout) and end; while the replica holding the
//     background lease settles them it is killed with SIGKILL, another
//     replica takes the lease over and finishes every settlement (the
//     payouts, held until the provider connects payouts after the kill).
//     Each reservation has one refund and one transfer at the local test
//     processor and in the ledger, and `gpumarket reconcile` is clean.
//
// Time passes as in the agent's integration test: the replicas are
// restarted on the same database with their clocks shifted
// (-clock-offset), once into the rentals and once past their end.
func TestReplicasOnOnePostgres(t *testing.T) {
	bin := buildServerBinary(t)
	dsn := pgtest.Database(t)
	ctx := context.Background()
	m := seedReplicaMarket(t, dsn)
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	fleet := &replicaFleet{bin: bin, dsn: dsn, sessionKey: hex.EncodeToString(key),
		names: []string{"replica-a", "replica-b", "replica-c"}}
	fleet.start(t, 0)

	// (a) The last devices. A first buyer takes one of the offer's two
	// nodes for the hour; 64 bookers then race for the other node's 8
	// devices, one device each, quoted and booked on replica i mod 3.
	start := time.Now().UTC().Truncate(time.Minute).Add(2 * time.Hour)
	end := start.Add(time.Hour)
	oneHour := func(devices int, offerID int64) string {
		return fmt.Sprintf(`{"version":1,"workload":{"kind":"training","devices":%d,"hours":1,"checkpoint_mins":60,"restart_mins":10},
			"constraints":{"offers":[%d],"earliest_start":%q,"deadline":%q}}`,
			devices, offerID, start.Format(time.RFC3339), end.Format(time.RFC3339))
	}
	filler := fleet.reps[0].book(t, m.filler, oneHour(replicaDevicesPerNode, m.race))
	if filler.status != http.StatusCreated {
		t.Fatalf("the first booking: %d\n%s", filler.status, filler.body)
	}
	request := oneHour(1, m.race)
	quoteIDs := make([]string, len(m.bookers))
	var wg sync.WaitGroup
	for i, tok := range m.bookers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			quoteIDs[i] = fleet.reps[i%3].quoteID(t, tok, request, m.race)
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	results := make([]apiAnswer, len(m.bookers))
	gate := make(chan struct{})
	for i, tok := range m.bookers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			results[i] = fleet.reps[i%3].call(tok, "POST", "/api/v1/reservations", `{"request":`+request+`,"quote_id":"`+quoteIDs[i]+`"}`)
		}()
	}
	raceStart := time.Now()
	close(gate)
	wg.Wait()
	raceTook := time.Since(raceStart)
	// The two ways a loser hears it: its replica's index already knew the
	// devices were taken, or the database found them taken at booking.
	loserMessages := map[string]int{
		"That quote is no longer available: capacity or prices changed. Here are fresh quotes.": 0,
		"Someone else just booked some of these devices. Please choose from fresh quotes.":      0,
	}
	var winners []replicaWinner
	for i, r := range results {
		switch r.status {
		case http.StatusCreated:
			var res struct {
				ID int64 `json:"id"`
			}
			if err := json.Unmarshal([]byte(r.body), &res); err != nil || res.ID == 0 {
				t.Fatalf("booker %d: a 201 without a reservation: %v\n%s", i, err, r.body)
			}
			winners = append(winners, replicaWinner{booker: i, reservation: res.ID})
		case http.StatusConflict:
			var body struct {
				Error struct {
					Code    string `json:"code"`
					Message string `json:"message"`
				} `json:"error"`
			}
			if err := json.Unmarshal([]byte(r.body), &body); err != nil {
				t.Fatalf("booker %d: a 409 that is not JSON: %v\n%s", i, err, r.body)
			}
			if _, ok := loserMessages[body.Error.Message]; !ok || body.Error.Code != string(market.CodeConflict) {
				t.Errorf("booker %d on %s: 409 %q (%s), want a conflict saying the capacity is gone", i, fleet.reps[i%3].name, body.Error.Message, body.Error.Code)
			}
			loserMessages[body.Error.Message]++
		default:
			t.Errorf("booker %d on %s: %d, want 201 or 409\n%s", i, fleet.reps[i%3].name, r.status, r.body)
		}
	}
	t.Logf("64 bookings over 3 replicas in %s: %d booked, conflicts %v", raceTook.Round(time.Millisecond), len(winners), loserMessages)
	if len(winners) != replicaDevicesPerNode {
		t.Fatalf("%d bookings made for the %d free devices", len(winners), replicaDevicesPerNode)
	}
	db, err := store.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	raw, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	var pieces, devices int
	if err := raw.QueryRowContext(ctx, `SELECT COUNT(*), COALESCE(SUM(p.devices), 0) FROM reservation_pieces p
		JOIN reservations r ON r.id = p.reservation_id WHERE p.offer_id = $1 AND r.state = 'held'`, m.race).Scan(&pieces, &devices); err != nil {
		t.Fatal(err)
	}
	if pieces != 1+replicaDevicesPerNode || devices != 2*replicaDevicesPerNode {
		t.Fatalf("the offer holds %d pieces of %d devices, want %d pieces of all its %d devices", pieces, devices, 1+replicaDevicesPerNode, 2*replicaDevicesPerNode)
	}

	// (b) An offer resumed, then paused, through replica A is quoted, then
	// no longer quoted, by replica B within a second.
	watch := fmt.Sprintf(`{"version":1,"workload":{"kind":"training","devices":1,"hours":1,"checkpoint_mins":60,"restart_mins":10},"constraints":{"offers":[%d]}}`, m.paused)
	for _, step := range []struct {
		state  string
		quoted bool
	}{{"active", true}, {"paused", false}} {
		if got := fleet.reps[1].quotes(t, m.watcher, watch); (got > 0) == step.quoted {
			t.Fatalf("before the change to %s replica B already quotes the offer %d times", step.state, got)
		}
		changed := time.Now()
		if r := fleet.reps[0].call(m.provider, "POST", fmt.Sprintf("/api/v1/provider/offers/%d/state", m.paused), `{"state":"`+step.state+`"}`); r.status != http.StatusNoContent {
			t.Fatalf("set the offer %s on replica A: %d\n%s", step.state, r.status, r.body)
		}
		for {
			if got := fleet.reps[1].quotes(t, m.watcher, watch); (got > 0) == step.quoted {
				break
			}
			if time.Since(changed) > time.Second {
				t.Fatalf("replica B's quotes do not show the offer %s a second after replica A changed it", step.state)
			}
			time.Sleep(25 * time.Millisecond)
		}
		t.Logf("offer set %s on replica A: replica B's quotes followed within %s", step.state, time.Since(changed).Round(time.Millisecond))
	}

	// (c) The winners pay, each signed in on one replica and paying on
	// the next: the session is the database's, signed with the shared key.
	for k, w := range winners {
		b := newReplicaBrowser(t, fleet.reps[k%3].url)
		b.logIn(fmt.Sprintf("booker%d@replicas.test", w.booker))
		b.base = fleet.reps[(k+1)%3].url
		res := fmt.Sprintf("/reservations/%d", w.reservation)
		checkout := b.post(res, res+"/pay", url.Values{})
		b.post(checkout, checkout, url.Values{})
		if got := fleet.reps[(k+2)%3].state(t, m.bookers[w.booker], w.reservation); got != string(market.ReservationConfirmed) {
			t.Fatalf("reservation %d is %s after paying, want confirmed", w.reservation, got)
		}
	}

	// The rentals run: the provider reports an outage on each (10 minutes
	// of one device), so each settles with a refund and a payout.
	fleet.restartAt(t, start.Add(30*time.Second))
	for _, w := range winners {
		waitFor(t, 10*time.Second, fmt.Sprintf("reservation %d active", w.reservation), func() bool {
			return fleet.reps[w.booker%3].state(t, m.bookers[w.booker], w.reservation) == string(market.ReservationActive)
		})
		_, err := db.ReportIncident(ctx, store.Incident{ReservationID: w.reservation, ReportedBy: store.ReportedByProvider, ReporterID: m.providerID,
			Incident: market.Incident{Kind: market.IncidentHostFailure, Start: start, End: start.Add(10 * time.Minute), DevicesAffected: 1,
				Note: "node 1 lost power"}}, fleet.now())
		if err != nil {
			t.Fatalf("report the outage on %d: %v", w.reservation, err)
		}
	}

	// Past the end the replica holding the lease settles them; as soon as
	// it has begun it is killed. The provider has not connected payouts
	// yet, so every payout is held: whatever the kill interrupted, the
	// payouts are left for another replica.
	fleet.restartAt(t, end.Add(3*time.Second))
	var settling int
	for deadline := time.Now().Add(15 * time.Second); settling == 0; time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no settlement began within 15 s of the rentals' end")
		}
		if err := raw.QueryRowContext(ctx, `SELECT COUNT(*) FROM settlements`).Scan(&settling); err != nil {
			t.Fatal(err)
		}
	}
	holder, err := db.LeaseHolder(ctx, workflow.BackgroundLease, fleet.now())
	if err != nil || holder == "" {
		t.Fatalf("settlement began with no lease holder: %q %v", holder, err)
	}
	victim := fleet.holding(t, holder)
	killed := time.Now()
	if err := victim.proc.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-victim.done
	var refunds int
	if err := raw.QueryRowContext(ctx, `SELECT COUNT(*) FROM settlements WHERE refund_done = 1`).Scan(&refunds); err != nil {
		t.Fatal(err)
	}
	t.Logf("killed %s (lease %s) with %d of %d settlements started, %d refunds made", victim.name, holder, settling, len(winners), refunds)

	// Another replica takes the lease over within its TTL and a tick or two.
	var successor *replicaProc
	waitFor(t, workflow.LeaseTTL(time.Second)+3*time.Second, "another replica to take the background lease", func() bool {
		h, err := db.LeaseHolder(ctx, workflow.BackgroundLease, fleet.now())
		if err != nil {
			t.Fatal(err)
		}
		if h == "" || h == holder {
			return false
		}
		successor = fleet.holding(t, h)
		return true
	})
	t.Logf("%s took the background lease over %s after the kill", successor.name, time.Since(killed).Round(time.Millisecond))
	for _, r := range fleet.reps {
		if r == victim {
			continue
		}
		want := "gpumarket_background_lease_held 0"
		if r == successor {
			want = "gpumarket_background_lease_held 1"
		}
		waitFor(t, 3*time.Second, r.name+" metrics: "+want, func() bool { return strings.Contains(r.metrics(t), want) })
	}

	// The provider connects payouts on a surviving replica, releasing the
	// held payouts to the new lease holder's retrier.
	alive := fleet.reps[0]
	if alive == victim {
		alive = fleet.reps[1]
	}
	p := newReplicaBrowser(t, alive.url)
	p.logIn("provider@replicas.test")
	onboard := p.post("/provider/reservations", "/provider/payouts/connect", url.Values{})
	p.post(onboard, onboard, url.Values{})
	waitFor(t, 20*time.Second, "every reservation settled", func() bool {
		var settled int
		if err := raw.QueryRowContext(ctx, `SELECT COUNT(*) FROM reservations WHERE state = 'settled'`).Scan(&settled); err != nil {
			t.Fatal(err)
		}
		return settled == len(winners)
	})

	// One refund and one transfer per reservation, each under its
	// idempotency key, at the processor and in the ledger.
	for _, w := range winners {
		st, err := db.FindSettlement(ctx, w.reservation)
		if err != nil {
			t.Fatal(err)
		}
		if st.State != store.SettlementDone || !st.RefundDone || st.RefundCents <= 0 || len(st.Transfers) != 1 || st.Transfers[0].Amount <= 0 {
			t.Fatalf("reservation %d's settlement: %+v, want done with a refund and one payout", w.reservation, st)
		}
		refundKey := market.EntryKey(w.reservation, market.EntryRefund, 0)
		transferKey := market.EntryKey(w.reservation, market.EntryTransfer, m.providerID)
		for _, c := range []struct {
			what, query string
			args        []any
			amount      market.Cents
		}{
			{"refunds of the payment at the processor", `SELECT COUNT(*), COALESCE(SUM(amount_cents), 0), MIN(idempotency_key) FROM local_processor_objects WHERE kind = 'refund' AND parent_id = $1`,
				[]any{st.PaymentIntentID}, st.RefundCents},
			{"transfers under its key at the processor", `SELECT COUNT(*), COALESCE(SUM(amount_cents), 0), MIN(idempotency_key) FROM local_processor_objects WHERE kind = 'transfer' AND idempotency_key = $1`,
				[]any{transferKey}, st.Transfers[0].Amount},
			{"refund entries in the ledger", `SELECT COUNT(*), COALESCE(SUM(amount_cents), 0), MIN(idempotency_key) FROM ledger_entries WHERE reservation_id = $1 AND kind = $2`,
				[]any{w.reservation, market.EntryRefund}, st.RefundCents},
			{"transfer entries in the ledger", `SELECT COUNT(*), COALESCE(SUM(amount_cents), 0), MIN(idempotency_key) FROM ledger_entries WHERE reservation_id = $1 AND kind = $2`,
				[]any{w.reservation, market.EntryTransfer}, st.Transfers[0].Amount},
		} {
			var n int
			var sum int64
			var key sql.NullString
			if err := raw.QueryRowContext(ctx, c.query, c.args...).Scan(&n, &sum, &key); err != nil {
				t.Fatal(err)
			}
			want := refundKey
			if strings.Contains(c.what, "transfer") {
				want = transferKey
			}
			if n != 1 || market.Cents(sum) != c.amount || key.String != want {
				t.Errorf("reservation %d: %d %s for %d cents under %q, want one for %d under %q", w.reservation, n, c.what, sum, key.String, c.amount, want)
			}
		}
	}
	var transfers int
	if err := raw.QueryRowContext(ctx, `SELECT COUNT(*) FROM local_processor_objects WHERE kind = 'transfer'`).Scan(&transfers); err != nil {
		t.Fatal(err)
	}
	if transfers != len(winners) {
		t.Errorf("%d transfers at the processor for %d settlements", transfers, len(winners))
	}

	fleet.stop(t)
	cmd := exec.Command(bin, "reconcile", "-db", dsn)
	cmd.Env = replicaEnv()
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "reconciled: no differences") {
		t.Errorf("gpumarket reconcile: %v\n%s", err, out)
	}
}

// replicaDevicesPerNode is the devices of each of the raced offer's two nodes.
const replicaDevicesPerNode = 8

// replicaMarket is what seedReplicaMarket stored: API tokens and ids.
type replicaMarket struct {
	providerID      int64
	provider        string   // the provider's API token
	filler, watcher string   // buyers' API tokens
	bookers         []string // 64 buyers' API tokens; booker i is booker<i>@replicas.test
	race, paused    int64    // offers: the raced one; one paused
	load            int64    // an offer booked by the hour under load
}

// replicaWinner is a booker whose booking was made, and the reservation.
type replicaWinner struct {
	booker      int
	reservation int64
}

// seedReplicaMarket stores, through the store, a provider with three approved
// offers of 2 nodes of 8 H100s (one paused) and no payout account yet, and
// 66 buyers with write tokens, all with the password replicaPassword.
func seedReplicaMarket(t *testing.T, dsn string) replicaMarket {
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
	user := func(email string, provider bool) (market.User, string) {
		t.Helper()
		u, err := db.CreateUser(ctx, market.User{Email: email, DisplayName: email, IsBuyer: !provider, IsProvider: provider}, hash, now)
		if err != nil {
			t.Fatal(err)
		}
		_, tok, err := db.CreateAPIToken(ctx, u.ID, "replicas", store.TokenScopeWrite, now)
		if err != nil {
			t.Fatal(err)
		}
		return u, tok
	}
	prov, provTok := user("provider@replicas.test", true)
	m := replicaMarket{providerID: prov.ID, provider: provTok}
	from := now.Truncate(time.Hour)
	offer := func(title string, price market.Cents) int64 {
		t.Helper()
		o := market.Offer{
			ProviderID: prov.ID, Title: title, AcceleratorID: "nvidia-h100-80gb-sxm", MemoryGB: 80,
			DevicesPerNode: replicaDevicesPerNode, Nodes: 2, Interconnect: market.InterconnectNVLink, NetworkID: "infiniband-400", PlacementGroup: true,
			CPUCores: 96, RAMGB: 1024, StorageGB: 8000, DriverVersion: "550.90", CUDAVersion: "12.4",
			OSImage: "Ubuntu 22.04", ContainerRuntime: "Docker 26", RegionID: "eu-north-se",
			AvailableFrom: from, AvailableUntil: from.AddDate(0, 0, 30), MinRentalHours: 1, MaxRentalHours: 720,
			ProvisioningMins: 10, PriceCentsPerDeviceHour: price, StorageCentsPerGBMonth: 8, EgressCentsPerGB: 5,
			BillingBasis: market.BillingWallClock, UptimeBP: 9950, CreditSchedule: []market.CreditTier{{BelowBP: 9950, CreditBP: 1000}, {BelowBP: 9900, CreditBP: 2500}},
			CreditCapBP: 10000, FreeCancelHours: 24, CancelFeeBP: 2500,
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
		return created.ID
	}
	m.race = offer("2 × 8 H100, raced", 317)
	m.paused = offer("2 × 8 H100, paused", 289)
	m.load = offer("2 × 8 H100, booked under load", 301)
	if err := db.SetOfferState(ctx, prov.ID, m.paused, market.OfferPaused, now); err != nil {
		t.Fatal(err)
	}
	_, m.filler = user("filler@replicas.test", false)
	_, m.watcher = user("watcher@replicas.test", false)
	for i := range 64 {
		_, tok := user(fmt.Sprintf("booker%d@replicas.test", i), false)
		m.bookers = append(m.bookers, tok)
	}
	return m
}

const replicaPassword = "a long enough password"

// buildServerBinary builds this command, once per test run, into a
// temporary directory removed when the run ends (TestMain).
func buildServerBinary(t *testing.T) string {
	t.Helper()
	built.once.Do(func() {
		dir, err := os.MkdirTemp("", "gpumarket-bin-")
		if err != nil {
			built.err = err
			return
		}
		built.dir, built.bin = dir, filepath.Join(dir, "gpumarket")
		if out, err := exec.Command("go", "build", "-o", built.bin, ".").CombinedOutput(); err != nil {
			built.err = fmt.Errorf("%v\n%s", err, out)
		}
	})
	if built.err != nil {
		t.Fatalf("build: %v", built.err)
	}
	return built.bin
}

// built is the server binary buildServerBinary built.
var built struct {
	once     sync.Once
	dir, bin string
	err      error
}

// replicaEnv is the test's environment without GPUMARKET_* settings.
func replicaEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GPUMARKET_") {
			out = append(out, kv)
		}
	}
	return out
}

// replicaFleet is the replicas serving one database, all with their
// clocks shifted by the same offset.
type replicaFleet struct {
	bin, dsn, sessionKey string
	names                []string
	args                 []string // more flags for every replica
	offset               time.Duration
	reps                 []*replicaProc
}

// replicaProc is one running `gpumarket serve`.
type replicaProc struct {
	name, url, metricsURL string
	proc                  *exec.Cmd
	output                *lockedBuffer
	done                  chan struct{}
	http                  *http.Client
}

// now is the replicas' clock.
func (f *replicaFleet) now() time.Time { return time.Now().UTC().Add(f.offset) }

// start starts every replica with the clock offset, each on free ports,
// and waits until all answer /healthz.
func (f *replicaFleet) start(t *testing.T, offset time.Duration) {
	t.Helper()
	f.offset = offset.Truncate(time.Second)
	f.reps = nil
	for _, name := range f.names {
		addr, maddr := freeLoopback(t), freeLoopback(t)
		r := &replicaProc{name: name, url: "http://" + addr, metricsURL: "http://" + maddr, output: &lockedBuffer{},
			done: make(chan struct{}), http: &http.Client{Timeout: 30 * time.Second}}
		r.proc = exec.Command(f.bin, "serve", "-addr", addr, "-db", f.dsn, "-base-url", r.url, "-session-key", f.sessionKey,
			"-replica", name, "-tick", "1s", "-metrics-addr", maddr, "-platform-fee-bp", "1200",
			"-clock-offset", fmt.Sprintf("%ds", int64(f.offset/time.Second)))
		r.proc.Args = append(r.proc.Args, f.args...)
		r.proc.Env = replicaEnv()
		r.proc.Stdout, r.proc.Stderr = r.output, r.output
		if err := r.proc.Start(); err != nil {
			t.Fatal(err)
		}
		go func() {
			r.proc.Wait()
			close(r.done)
		}()
		t.Cleanup(func() {
			r.stop(t)
			if t.Failed() {
				t.Logf("%s output:\n%s", r.name, r.output)
			}
		})
		f.reps = append(f.reps, r)
	}
	for _, r := range f.reps {
		waitFor(t, 30*time.Second, r.name+" answers /healthz", func() bool {
			select {
			case <-r.done:
				t.Fatalf("%s exited:\n%s", r.name, r.output)
			default:
			}
			resp, err := r.http.Get(r.url + "/healthz")
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		})
	}
}

// restartAt stops every replica and starts them again with their clocks at at.
func (f *replicaFleet) restartAt(t *testing.T, at time.Time) {
	t.Helper()
	f.stop(t)
	f.start(t, time.Until(at))
}

// stop stops every replica still running, each cleanly.
func (f *replicaFleet) stop(t *testing.T) {
	t.Helper()
	var wg sync.WaitGroup
	for _, r := range f.reps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.stop(t)
		}()
	}
	wg.Wait()
}

// holding returns the replica whose process holds the lease as holder
// (workflow names it replica/pid/random).
func (f *replicaFleet) holding(t *testing.T, holder string) *replicaProc {
	t.Helper()
	for _, r := range f.reps {
		if strings.HasPrefix(holder, fmt.Sprintf("%s/%d/", r.name, r.proc.Process.Pid)) {
			return r
		}
	}
	t.Fatalf("no running replica holds the lease as %q", holder)
	return nil
}

// stop interrupts the replica and fails the test unless it exits cleanly
// (one killed on purpose is left as it is).
func (r *replicaProc) stop(t *testing.T) {
	select {
	case <-r.done:
		return
	default:
	}
	r.proc.Process.Signal(os.Interrupt)
	select {
	case <-r.done:
	case <-time.After(20 * time.Second):
		r.proc.Process.Kill()
		<-r.done
	}
	if !r.proc.ProcessState.Success() {
		t.Errorf("%s did not stop cleanly: %v", r.name, r.proc.ProcessState)
	}
}

// apiAnswer is an API call's status and body.
type apiAnswer struct {
	status int
	body   string
}

// call makes one API call with a bearer token; a transport error is a
// status of 0.
func (r *replicaProc) call(token, method, path, body string) apiAnswer {
	req, err := http.NewRequest(method, r.url+path, strings.NewReader(body))
	if err != nil {
		return apiAnswer{body: err.Error()}
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := r.http.Do(req)
	if err != nil {
		return apiAnswer{body: err.Error()}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return apiAnswer{body: err.Error()}
	}
	return apiAnswer{status: resp.StatusCode, body: string(b)}
}

// book quotes request and books its first quote.
func (r *replicaProc) book(t *testing.T, token, request string) apiAnswer {
	t.Helper()
	var q struct {
		Quotes []struct {
			QuoteID string `json:"quote_id"`
		} `json:"quotes"`
	}
	r.decode(t, r.call(token, "POST", "/api/v1/quotes", request), &q)
	if len(q.Quotes) == 0 {
		t.Fatalf("%s: no quote for %s", r.name, request)
	}
	return r.call(token, "POST", "/api/v1/reservations", `{"request":`+request+`,"quote_id":"`+q.Quotes[0].QuoteID+`"}`)
}

// quoteID returns the id of the first quote for request, which must be
// one device of offerID.
func (r *replicaProc) quoteID(t *testing.T, token, request string, offerID int64) string {
	var q struct {
		Quotes []struct {
			QuoteID string `json:"quote_id"`
			Pieces  []struct {
				OfferID int64 `json:"offer_id"`
				Devices int   `json:"devices"`
			} `json:"pieces"`
		} `json:"quotes"`
	}
	a := r.call(token, "POST", "/api/v1/quotes", request)
	if a.status != http.StatusOK || json.Unmarshal([]byte(a.body), &q) != nil {
		t.Errorf("%s: quotes: %d\n%s", r.name, a.status, a.body)
		return ""
	}
	if len(q.Quotes) == 0 || len(q.Quotes[0].Pieces) != 1 || q.Quotes[0].Pieces[0].OfferID != offerID || q.Quotes[0].Pieces[0].Devices != 1 {
		t.Errorf("%s: quotes %+v, want one device of offer %d", r.name, q.Quotes, offerID)
		return ""
	}
	return q.Quotes[0].QuoteID
}

// quotes returns how many quotes the replica gives for request.
func (r *replicaProc) quotes(t *testing.T, token, request string) int {
	t.Helper()
	var q struct {
		Quotes []json.RawMessage `json:"quotes"`
	}
	r.decode(t, r.call(token, "POST", "/api/v1/quotes", request), &q)
	return len(q.Quotes)
}

// state returns a reservation's state from the API.
func (r *replicaProc) state(t *testing.T, token string, id int64) string {
	t.Helper()
	var res struct {
		State string `json:"state"`
	}
	r.decode(t, r.call(token, "GET", fmt.Sprintf("/api/v1/reservations/%d", id), ""), &res)
	return res.State
}

func (r *replicaProc) decode(t *testing.T, a apiAnswer, out any) {
	t.Helper()
	if a.status != http.StatusOK {
		t.Fatalf("%s: %d\n%s", r.name, a.status, a.body)
	}
	if err := json.Unmarshal([]byte(a.body), out); err != nil {
		t.Fatalf("%s: %v\n%s", r.name, err, a.body)
	}
}

// metrics returns the replica's Prometheus scrape.
func (r *replicaProc) metrics(t *testing.T) string {
	t.Helper()
	resp, err := r.http.Get(r.metricsURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// replicaBrowser is a person's session: cookies kept (for every port of
// 127.0.0.1, so a session follows the person to another replica), forms
// posted with the CSRF token of the page they are on, redirects returned.
type replicaBrowser struct {
	t    *testing.T
	base string
	http *http.Client
}

func newReplicaBrowser(t *testing.T, base string) *replicaBrowser {
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &replicaBrowser{t: t, base: base, http: &http.Client{Jar: jar, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

func (b *replicaBrowser) logIn(email string) {
	b.t.Helper()
	b.post("/login", "/login", url.Values{"email": {email}, "password": {replicaPassword}})
}

// post submits form to path from the page from, wants a 303 and returns
// the path it leads to.
func (b *replicaBrowser) post(from, path string, form url.Values) string {
	b.t.Helper()
	resp, err := b.http.Get(b.base + from)
	if err != nil {
		b.t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := csrfRe.FindSubmatch(page)
	if m == nil {
		b.t.Fatalf("GET %s: %d, no form\n%.2000s", from, resp.StatusCode, page)
	}
	form.Set("_csrf", string(m[1]))
	resp, err = b.http.PostForm(b.base+path, form)
	if err != nil {
		b.t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		b.t.Fatalf("POST %s: %d, want 303\n%.2000s", path, resp.StatusCode, body)
	}
	loc, err := url.Parse(resp.Header.Get("Location"))
	if err != nil {
		b.t.Fatal(err)
	}
	return loc.RequestURI()
}

// freeLoopback returns a loopback address with a port nothing listens on now.
func freeLoopback(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// waitFor polls ok every 100 ms (within an API token's rate) until it
// holds, failing the test after d.
func waitFor(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !ok(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
