package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/account"
	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
	"github.com/gpumarket/gpumarket/store/pgtest"
)

// loadFreshness is the bound the replicas are started with (-feed-max-lag)
// and the test holds them to: a change committed through replica A shows
// in replica B's quotes within it, or B's /healthz says it is behind.
const loadFreshness = 2 * time.Second

// TestReplicasUnderLoadAndAnOutage runs two real replicas, A and B, on a
// PostgreSQL server of their own while A books at a steady rate
// (loadRate bookings a second, each answered 201 or, while the server is
// down, 503):
//
//   - under load, an offer paused or resumed through A, and capacity
//     booked through A, show in B's quotes within loadFreshness, and B's
//     /healthz stays 200 throughout;
//   - when B's reads of the changes it hears are held up (a lock on a
//     table only the follower's reads touch, as an overloaded database
//     holds them), B's /healthz answers 503 "feed":"lagging" once its lag
//     passes the bound, while A's stays 200; when the reads go through, B
//     catches up and says so;
//   - the server is stopped: both replicas' /healthz answer 503
//     "database":"unreachable", their pages and API 503 with Retry-After
//     and the "cannot reach its database" page, the bookings 503 — never
//     500, never a hang;
//   - the server is started again: B's feed reconnects within seconds,
//     and once B's /healthz says ok, a change A made after the restart
//     shows in B's quotes within the bound (B never says ok while it has
//     neither heard nor reloaded what it missed);
//   - every booking answered 201 is in the database, and both replicas
//     stop cleanly.
func TestReplicasUnderLoadAndAnOutage(t *testing.T) {
	began := time.Now()
	bin := buildServerBinary(t)
	srv := pgtest.StartServer(t)
	dsn := newServerDatabase(t, srv.URL)
	m := seedReplicaMarket(t, dsn)
	// A buyer may hold 3 unpaid bookings: the loader and the probes book
	// with buyers of their own, each at most 3 times.
	loadBuyers, probeBuyers := seedBuyers(t, dsn, "load", 200), seedBuyers(t, dsn, "probe", 20)
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	fleet := &replicaFleet{bin: bin, dsn: dsn, sessionKey: hex.EncodeToString(key), names: []string{"replica-a", "replica-b"},
		args: []string{"-feed-max-lag", loadFreshness.String(), "-api-rate", "1000"}}
	t.Logf("built, seeded: %s", time.Since(began).Round(time.Millisecond))
	fleet.start(t, 0)
	t.Logf("started: %s", time.Since(began).Round(time.Millisecond))
	a, b := fleet.reps[0], fleet.reps[1]
	raw, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()

	// Hours of the load offer: the loader books one device of hour 100+i
	// for its i-th booking; probe k books one device of hour 10+k, after
	// which B may no longer quote all 16 devices of that hour.
	base := time.Now().UTC().Truncate(time.Hour).Add(time.Hour)
	hourRequest := func(offer int64, devices, hour int) string {
		at := base.Add(time.Duration(hour) * time.Hour)
		return fmt.Sprintf(`{"version":1,"workload":{"kind":"training","devices":%d,"hours":1,"checkpoint_mins":60,"restart_mins":10},
			"constraints":{"offers":[%d],"earliest_start":%q,"deadline":%q}}`,
			devices, offer, at.Format(time.RFC3339), at.Add(time.Hour).Format(time.RFC3339))
	}
	watch := fmt.Sprintf(`{"version":1,"workload":{"kind":"training","devices":1,"hours":1,"checkpoint_mins":60,"restart_mins":10},"constraints":{"offers":[%d]}}`, m.paused)

	ld := &loader{rep: a, tokens: loadBuyers, request: func(i int) string { return hourRequest(m.load, 1, 100+i) }}
	ld.start()
	defer ld.stop()

	// visible polls B until ok holds, failing the test past loadFreshness.
	visible := func(what string, ok func() bool) time.Duration {
		t.Helper()
		began := time.Now()
		for !ok() {
			if time.Since(began) > loadFreshness {
				t.Fatalf("%s: not in replica B's quotes %s after replica A's change (loader: %s)", what, loadFreshness, ld.summary())
			}
			time.Sleep(10 * time.Millisecond)
		}
		return time.Since(began)
	}
	paused := true
	toggle := func(what string) time.Duration {
		t.Helper()
		state := "active"
		if !paused {
			state = "paused"
		}
		if r := a.call(m.provider, "POST", fmt.Sprintf("/api/v1/provider/offers/%d/state", m.paused), `{"state":"`+state+`"}`); r.status != http.StatusNoContent {
			t.Fatalf("%s: set the offer %s on replica A: %d\n%s", what, state, r.status, r.body)
		}
		paused = !paused
		return visible(what+": offer "+state, func() bool { return (b.quotes(t, m.watcher, watch) > 0) == !paused })
	}
	probeHour := 10
	prober := func() string { return probeBuyers[probeHour%len(probeBuyers)] }
	take := func(what string) time.Duration {
		t.Helper()
		probeHour++
		whole := hourRequest(m.load, 2*replicaDevicesPerNode, probeHour)
		if n := b.quotes(t, m.watcher, whole); n == 0 {
			t.Fatalf("%s: replica B quotes no whole hour %d before it is booked", what, probeHour)
		}
		if r := a.book(t, prober(), hourRequest(m.load, 1, probeHour)); r.status != http.StatusCreated {
			t.Fatalf("%s: book hour %d on replica A: %d\n%s", what, probeHour, r.status, r.body)
		}
		return visible(fmt.Sprintf("%s: hour %d booked", what, probeHour), func() bool { return b.quotes(t, m.watcher, whole) == 0 })
	}

	// (a) Under load: B follows within the bound and says it is healthy.
	healthB := watchHealth(b)
	var seen []time.Duration
	for range 8 {
		time.Sleep(400 * time.Millisecond)
		seen = append(seen, toggle("under load"), take("under load"))
	}
	if bad := healthB.stop(); len(bad) > 0 {
		t.Fatalf("replica B's /healthz under load, within its bound: %v", bad)
	}
	slices.Sort(seen)
	t.Logf("under load (%s): replica B's quotes followed replica A's %d changes within %s (median %s)",
		ld.summary(), len(seen), seen[len(seen)-1].Round(time.Millisecond), seen[len(seen)/2].Round(time.Millisecond))

	// (b) B's reads of what it hears are held up: the follower reads each
	// changed offer's provider record, which reads disputes; bookings do
	// not. B's lag passes the bound and its /healthz says so; A's does not.
	ctx := context.Background()
	hold, err := raw.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hold.ExecContext(ctx, `LOCK TABLE disputes IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	probeHour++
	stalled := hourRequest(m.load, 2*replicaDevicesPerNode, probeHour)
	if r := a.book(t, prober(), hourRequest(m.load, 1, probeHour)); r.status != http.StatusCreated {
		t.Fatalf("book hour %d on replica A with B held up: %d\n%s", probeHour, r.status, r.body)
	}
	booked := time.Now()
	var lagging health
	waitFor(t, loadFreshness+5*time.Second, "replica B's /healthz to say its feed is lagging", func() bool {
		lagging = getHealth(b)
		return lagging.status == http.StatusServiceUnavailable && lagging.Feed == "lagging"
	})
	if took := time.Since(booked); took < loadFreshness || lagging.FeedLagMillis < loadFreshness.Milliseconds() {
		t.Errorf("replica B said lagging %s after the change, lag %d ms, before its bound %s", took, lagging.FeedLagMillis, loadFreshness)
	}
	if h := getHealth(a); h.status != http.StatusOK {
		t.Errorf("replica A's /healthz while B is held up: %d %+v", h.status, h)
	}
	t.Logf("replica B held up: /healthz 503 lagging %s after the change (lag %d ms); A's 200", time.Since(booked).Round(time.Millisecond), lagging.FeedLagMillis)
	if err := hold.Rollback(); err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	visible("after B's reads went through: the held-up booking", func() bool { return b.quotes(t, m.watcher, stalled) == 0 })
	waitFor(t, loadFreshness, "replica B's /healthz to be ok again", func() bool { return getHealth(b).status == http.StatusOK })
	t.Logf("replica B caught up %s after its reads went through", time.Since(released).Round(time.Millisecond))

	// (c) The database stops.
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	stoppedAt := time.Now()
	for _, r := range fleet.reps {
		waitFor(t, 10*time.Second, r.name+" /healthz 503 database unreachable", func() bool {
			h := getHealth(r)
			return h.status == http.StatusServiceUnavailable && h.Database == "unreachable"
		})
		t.Logf("%s: /healthz 503 %s after the stop", r.name, time.Since(stoppedAt).Round(time.Millisecond))
		for _, path := range []string{"/", "/api/v1/ping"} {
			began := time.Now()
			status, retry, body := getPage(r, path)
			if status != http.StatusServiceUnavailable || retry != "5" || !strings.Contains(body, "cannot reach its database") {
				t.Errorf("%s %s with PostgreSQL stopped: %d, Retry-After %q\n%.1000s", r.name, path, status, retry, body)
			}
			if took := time.Since(began); took > 5*time.Second {
				t.Errorf("%s %s answered after %s", r.name, path, took)
			}
		}
	}
	waitFor(t, 5*time.Second, "a booking answered 503 while the database is down", func() bool { return ld.count(http.StatusServiceUnavailable) > 0 })
	time.Sleep(time.Second) // the feeds try to rejoin a few times

	// (d) It starts again. A change through A as soon as A can write;
	// B must have it in its quotes the first time its /healthz says ok.
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	state := "active"
	if !paused {
		state = "paused"
	}
	waitFor(t, 10*time.Second, "replica A to change the offer after the restart", func() bool {
		return a.call(m.provider, "POST", fmt.Sprintf("/api/v1/provider/offers/%d/state", m.paused), `{"state":"`+state+`"}`).status == http.StatusNoContent
	})
	paused = !paused
	changed := time.Since(restarted)
	var states []string
	for {
		h := getHealth(b)
		if len(states) == 0 || states[len(states)-1] != h.summary() {
			states = append(states, h.summary())
		}
		if h.status == http.StatusOK {
			break
		}
		if time.Since(restarted) > 10*time.Second {
			t.Fatalf("replica B's /healthz not ok 10 s after PostgreSQL returned: %v", states)
		}
		time.Sleep(10 * time.Millisecond)
	}
	healthyAfter := time.Since(restarted)
	// B may have rejoined before A's change, and hear it on the feed; or
	// after, and have it from the reload. Either way it shows within the
	// bound; a replica that said ok without reloading never would.
	followed := visible("after the restart: offer "+state, func() bool { return (b.quotes(t, m.watcher, watch) > 0) == !paused })
	if healthyAfter > 5*time.Second {
		t.Errorf("replica B's feed rejoined %s after PostgreSQL returned, want within 5 s", healthyAfter)
	}
	t.Logf("PostgreSQL back: replica A wrote %s later, replica B's /healthz ok %s later, A's change in its quotes %s after that (seen: %v)",
		changed.Round(time.Millisecond), healthyAfter.Round(time.Millisecond), followed.Round(time.Millisecond), states)

	// (e) Fresh again under load, then every acknowledged booking is stored.
	waitFor(t, 10*time.Second, "a booking answered 201 after the restart", func() bool { return ld.countSince(http.StatusCreated, restarted) > 0 })
	seen = seen[:0]
	for range 2 {
		seen = append(seen, toggle("after the restart"), take("after the restart"))
	}
	slices.Sort(seen)
	t.Logf("after the restart: replica B followed within %s", seen[len(seen)-1].Round(time.Millisecond))
	ld.stop()
	t.Logf("loader: %s", ld.summary())
	for status, n := range ld.statuses() {
		if status != http.StatusCreated && status != http.StatusServiceUnavailable {
			t.Errorf("%d bookings answered %d, want 201 or (while the database was down) 503; e.g. %s", n, status, ld.example(status))
		}
	}
	var stored int
	if err := raw.QueryRowContext(ctx, `SELECT COUNT(*) FROM reservations r JOIN users u ON u.id = r.buyer_id WHERE u.email LIKE 'load%'`).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if created := ld.count(http.StatusCreated); stored != created {
		t.Errorf("%d bookings answered 201, %d stored", created, stored)
	}
	fleet.stop(t)
	t.Logf("stopped: %s", time.Since(began).Round(time.Millisecond))
}

// seedBuyers stores n buyers <prefix><i>@replicas.test with write tokens
// and returns the tokens.
func seedBuyers(t *testing.T, dsn, prefix string, n int) []string {
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
	var tokens []string
	for i := range n {
		email := fmt.Sprintf("%s%d@replicas.test", prefix, i)
		u, err := db.CreateUser(ctx, market.User{Email: email, DisplayName: email, IsBuyer: true}, hash, now)
		if err != nil {
			t.Fatal(err)
		}
		_, tok, err := db.CreateAPIToken(ctx, u.ID, "load", store.TokenScopeWrite, now)
		if err != nil {
			t.Fatal(err)
		}
		tokens = append(tokens, tok)
	}
	return tokens
}

// newServerDatabase creates an empty database on the server whose
// maintenance database is admin and returns its URL.
func newServerDatabase(t *testing.T, admin string) string {
	t.Helper()
	db, err := sql.Open("pgx", admin)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE DATABASE gpumarket`); err != nil {
		t.Fatal(err)
	}
	return strings.Replace(admin, "/postgres?", "/gpumarket?", 1)
}

// loadRate is the loader's bookings a second.
const loadRate = 10

// loader books through one replica at loadRate a second, one device of
// the hour its request names for each, with its tokens in turn; each
// booking is a quote and a reservation, and its answer is kept.
type loader struct {
	rep     *replicaProc
	tokens  []string
	request func(i int) string

	mu      sync.Mutex
	answers []loadAnswer
	began   time.Time
	quit    chan struct{}
	wg      sync.WaitGroup
	once    sync.Once
}

type loadAnswer struct {
	at     time.Time
	status int
	body   string
}

func (l *loader) start() {
	l.quit, l.began = make(chan struct{}), time.Now()
	tick := time.NewTicker(time.Second / loadRate)
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-l.quit:
				return
			case <-tick.C:
			}
			l.wg.Add(1)
			go func() {
				defer l.wg.Done()
				a := l.book(l.tokens[i%len(l.tokens)], l.request(i))
				l.mu.Lock()
				l.answers = append(l.answers, loadAnswer{at: time.Now(), status: a.status, body: a.body})
				l.mu.Unlock()
			}()
		}
	}()
}

// book quotes and books the first quote; a quote that is not 200 is the
// answer.
func (l *loader) book(token, request string) apiAnswer {
	q := l.rep.call(token, "POST", "/api/v1/quotes", request)
	if q.status != http.StatusOK {
		return q
	}
	var body struct {
		Quotes []struct {
			QuoteID string `json:"quote_id"`
		} `json:"quotes"`
	}
	if err := json.Unmarshal([]byte(q.body), &body); err != nil || len(body.Quotes) == 0 {
		return apiAnswer{status: -1, body: "no quote: " + q.body}
	}
	return l.rep.call(token, "POST", "/api/v1/reservations", `{"request":`+request+`,"quote_id":"`+body.Quotes[0].QuoteID+`"}`)
}

// stop stops booking and waits for the bookings under way.
func (l *loader) stop() {
	l.once.Do(func() { close(l.quit) })
	l.wg.Wait()
}

func (l *loader) statuses() map[int]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[int]int{}
	for _, a := range l.answers {
		out[a.status]++
	}
	return out
}

func (l *loader) count(status int) int { return l.countSince(status, time.Time{}) }

func (l *loader) countSince(status int, since time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, a := range l.answers {
		if a.status == status && !a.at.Before(since) {
			n++
		}
	}
	return n
}

func (l *loader) example(status int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, a := range l.answers {
		if a.status == status {
			return fmt.Sprintf("%.500s", a.body)
		}
	}
	return ""
}

func (l *loader) summary() string {
	n := l.count(http.StatusCreated)
	return fmt.Sprintf("%d booked on %s in %s, %.1f/s, answers %v", n, l.rep.name,
		time.Since(l.began).Round(100*time.Millisecond), float64(n)/time.Since(l.began).Seconds(), l.statuses())
}

// health is one answer of /healthz.
type health struct {
	status        int
	Database      string `json:"database"`
	Feed          string `json:"feed"`
	FeedLagMillis int64  `json:"feed_lag_millis"`
}

func (h health) summary() string {
	return fmt.Sprintf("%d database %s feed %s", h.status, h.Database, h.Feed)
}

// getHealth asks a replica's /healthz; a transport error is a status of 0.
func getHealth(r *replicaProc) health {
	resp, err := r.http.Get(r.url + "/healthz")
	if err != nil {
		return health{}
	}
	defer resp.Body.Close()
	h := health{status: resp.StatusCode}
	json.NewDecoder(resp.Body).Decode(&h)
	return h
}

// getPage gets path as an anonymous browser (an API path with a token the
// server has never issued), returning its status, Retry-After and body.
func getPage(r *replicaProc, path string) (int, string, string) {
	req, _ := http.NewRequest("GET", r.url+path, nil)
	req.Header.Set("Authorization", "Bearer gpm_0000000000000000000000000000000000000000")
	resp, err := r.http.Do(req)
	if err != nil {
		return 0, "", err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Retry-After"), string(b)
}

// healthWatch asks a replica's /healthz every 50 ms until stopped and
// keeps every answer that is not 200.
type healthWatch struct {
	quit chan struct{}
	done chan []string
}

func watchHealth(r *replicaProc) *healthWatch {
	w := &healthWatch{quit: make(chan struct{}), done: make(chan []string, 1)}
	go func() {
		var bad []string
		for {
			select {
			case <-w.quit:
				w.done <- bad
				return
			case <-time.After(50 * time.Millisecond):
			}
			if h := getHealth(r); h.status != http.StatusOK {
				bad = append(bad, fmt.Sprintf("%s lag %d ms", h.summary(), h.FeedLagMillis))
			}
		}
	}()
	return w
}

func (w *healthWatch) stop() []string {
	close(w.quit)
	return <-w.done
}
