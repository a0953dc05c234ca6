// Command loadgen measures the JSON API under load, and seeds a database
// with a realistic market to measure it against.
//
//	loadgen -seed -db ./data/load.db -offers 100000          # prints an API token
//	loadgen -url http://127.0.0.1:8090 -token gpm_… -c 32 -d 15s -mix narrow=9,broad=1
//	loadgen -url http://127.0.0.1:8090,http://127.0.0.1:8091 …  # clients spread over replicas
//
// Request kinds: narrow (POST /api/v1/quotes naming a model and two
// regions), broad (POST /api/v1/quotes with any model, anywhere, split
// allowed), anon (the broad request as a visitor's GET /requests), ping (GET /api/v1/ping: authentication and rate limit, no
// matcher) and static (GET /static/app.css: no database at all). It reports
// requests per second and p50/p90/p99 latency per kind, and the errors.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	seed := fs.Bool("seed", false, "seed the database at -db with a market instead of sending load")
	dbPath := fs.String("db", "./data/load.db", "with -seed: SQLite database to create and fill")
	offers := fs.Int("offers", 100_000, "with -seed: how many listed offers")
	trace := fs.String("trace", "../shared/data/alibaba-gpu-v2023/csv", "with -seed: directory of the Alibaba GPU trace CSVs for offer shapes (a built-in distribution when absent)")
	tokenOut := fs.String("token-out", "", "with -seed: also write the API token to this file")
	target := fs.String("url", "http://127.0.0.1:8080", "base URL of the server, or several separated by commas (replicas of one marketplace: client i sends to the i-th mod n)")
	token := fs.String("token", os.Getenv("GPUMARKET_TOKEN"), "API token (env GPUMARKET_TOKEN)")
	conc := fs.Int("c", 32, "concurrent clients")
	dur := fs.Duration("d", 10*time.Second, "how long to send load")
	warmup := fs.Duration("warmup", 2*time.Second, "load sent first and not measured")
	mix := fs.String("mix", "narrow=9,broad=1", "request kinds and weights: narrow, broad, ping, static")
	fleet := fs.Bool("fleet", false, "run a fleet of simulated provider agents against a fleet server of its own (docs/agent.md)")
	fleetServer := fs.Bool("fleet-server", false, "serve the fleet's marketplace at -db (started by -fleet)")
	agents := fs.String("agents", "1000,5000,10000", "with -fleet: fleet sizes, one after the other")
	interval := fs.Duration("interval", 10*time.Second, "with -fleet: each agent's heartbeat interval")
	payEvery := fs.Duration("pay-every", time.Second, "with -fleet: a rental paid on a fresh node this often")
	narrowClients := fs.Int("narrow-clients", 4, "with -fleet: clients sending narrow quotes beside the fleet")
	oldEvery := fs.Int("old-every", 10, "with -fleet: every N-th agent is an old one, heartbeats only (0: none)")
	writeEvery := fs.Bool("write-every-heartbeat", false, "with -fleet: the server writes every heartbeat in full (the figures before absorbing)")
	ramp := fs.Float64("ramp", 100, "with -fleet: new agents started per second at most (their first heartbeats are written in full)")
	fleetProfile := fs.String("fleet-profile", "", "with -fleet: write CPU profiles of the server and the agents over each size's measurement to this directory")
	fleetOffers := fs.Int("fleet-offers", 10_000, "with -fleet: market offers beside the fleet's, for the quote yardstick")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *fleetServer {
		n, err := strconv.Atoi(*agents)
		if err != nil || n < 1 {
			return errors.New("-fleet-server: -agents is the number of fleet nodes")
		}
		return runFleetServer(ctx, *dbPath, *offers, n, *writeEvery, stdout)
	}
	if *fleet {
		var sizes []int
		for _, f := range strings.Split(*agents, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				return fmt.Errorf("-agents %q: want sizes such as 1000,5000,10000", *agents)
			}
			sizes = append(sizes, n)
		}
		dir, err := os.MkdirTemp("", "gpumarket-fleet.")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		return runFleet(ctx, fleetConfig{sizes: sizes, interval: *interval, dur: *dur, offers: *fleetOffers, payEvery: *payEvery,
			narrowClients: *narrowClients, dir: dir, writeEvery: *writeEvery, oldEvery: *oldEvery, rampPerSec: *ramp, profileDir: *fleetProfile}, stdout, stderr)
	}
	if *seed {
		return seedMarket(ctx, *dbPath, *offers, *trace, *tokenOut, stdout)
	}
	if *token == "" {
		return errors.New("-token is required (loadgen -seed prints one)")
	}
	if *conc < 1 || *dur <= 0 {
		return errors.New("-c must be at least 1 and -d positive")
	}
	kinds, err := parseMix(*mix)
	if err != nil {
		return err
	}
	var bases []string
	for _, u := range strings.Split(*target, ",") {
		bases = append(bases, strings.TrimSuffix(strings.TrimSpace(u), "/"))
	}
	return load(ctx, bases, *token, *conc, *warmup, *dur, kinds, stdout)
}

// kind is one kind of request in the mix.
type kind struct {
	name   string
	weight int
}

func parseMix(s string) ([]kind, error) {
	var out []kind
	for _, part := range strings.Split(s, ",") {
		name, w, ok := strings.Cut(strings.TrimSpace(part), "=")
		n, err := strconv.Atoi(w)
		if !ok || err != nil || n < 0 {
			return nil, fmt.Errorf("-mix %q: want kind=weight,…", s)
		}
		switch name {
		case "narrow", "broad", "anon", "ping", "static":
		default:
			return nil, fmt.Errorf("-mix: unknown kind %q (want narrow, broad, anon, ping or static)", name)
		}
		if n > 0 {
			out = append(out, kind{name, n})
		}
	}
	if len(out) == 0 {
		return nil, errors.New("-mix has no kind with a positive weight")
	}
	return out, nil
}

// stats are one client's measurements of one kind.
type stats struct {
	lat    []time.Duration
	errors int
	status map[int]int
	first  string // first error, for the report
}

func load(ctx context.Context, bases []string, token string, conc int, warmup, dur time.Duration, kinds []kind, stdout io.Writer) error {
	merged, elapsed, err := measure(ctx, bases, token, conc, warmup, dur, kinds)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "target %s, %d clients, %s measured after %s warm-up\n", strings.Join(bases, " + "), conc, elapsed.Round(time.Millisecond), warmup)
	fmt.Fprintf(stdout, "%-8s %9s %9s %9s %9s %9s %9s %7s\n", "kind", "requests", "req/s", "p50", "p90", "p99", "max", "errors")
	var all []time.Duration
	var allErrors int
	names := make([]string, 0, len(merged))
	for k := range merged {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		s := merged[k]
		all = append(all, s.lat...)
		allErrors += s.errors
		printRow(stdout, k, s.lat, s.errors, elapsed)
	}
	if len(names) > 1 {
		printRow(stdout, "all", all, allErrors, elapsed)
	}
	for _, k := range names {
		if s := merged[k]; s.errors > 0 {
			fmt.Fprintf(stdout, "%s errors: %v; first: %s\n", k, s.status, s.first)
		}
	}
	return nil
}

// measure sends the mix from conc clients for warmup and then dur, and
// returns what was measured after the warm-up, by kind, and for how long.
func measure(ctx context.Context, bases []string, token string, conc int, warmup, dur time.Duration, kinds []kind) (map[string]*stats, time.Duration, error) {
	bodies, err := requestBodies(time.Now().UTC())
	if err != nil {
		return nil, 0, err
	}
	transport := &http.Transport{MaxIdleConns: conc, MaxIdleConnsPerHost: conc, MaxConnsPerHost: conc,
		DisableCompression: true, IdleConnTimeout: time.Minute}
	client := &http.Client{Transport: transport, Timeout: 30 * time.Second}
	total := 0
	for _, k := range kinds {
		total += k.weight
	}

	start := time.Now()
	measureFrom, end := start.Add(warmup), start.Add(warmup+dur)
	results := make([]map[string]*stats, conc)
	var wg sync.WaitGroup
	for i := range conc {
		results[i] = map[string]*stats{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(i), 42))
			base := bases[i%len(bases)]
			for ctx.Err() == nil {
				now := time.Now()
				if !now.Before(end) {
					return
				}
				k := pick(kinds, total, rng)
				req, err := newRequest(ctx, base, token, k, bodies, rng)
				if err != nil {
					return
				}
				t0 := time.Now()
				status, err := do(client, req)
				lat := time.Since(t0)
				if t0.Before(measureFrom) {
					continue
				}
				s := results[i][k]
				if s == nil {
					s = &stats{status: map[int]int{}}
					results[i][k] = s
				}
				s.lat = append(s.lat, lat)
				s.status[status]++
				if err != nil || status != http.StatusOK {
					s.errors++
					if s.first == "" {
						s.first = fmt.Sprintf("status %d %v", status, err)
					}
				}
			}
		}()
	}
	wg.Wait()
	elapsed := min(time.Since(measureFrom), dur)

	merged := map[string]*stats{}
	for _, r := range results {
		for k, s := range r {
			m := merged[k]
			if m == nil {
				m = &stats{status: map[int]int{}}
				merged[k] = m
			}
			m.lat = append(m.lat, s.lat...)
			m.errors += s.errors
			for code, n := range s.status {
				m.status[code] += n
			}
			if m.first == "" {
				m.first = s.first
			}
		}
	}
	return merged, elapsed, nil
}

func printRow(w io.Writer, name string, lat []time.Duration, errs int, elapsed time.Duration) {
	slices.Sort(lat)
	q := func(p float64) string {
		if len(lat) == 0 {
			return "-"
		}
		return fmtDur(lat[min(len(lat)-1, int(p*float64(len(lat))))])
	}
	fmt.Fprintf(w, "%-8s %9d %9.0f %9s %9s %9s %9s %7d\n", name, len(lat), float64(len(lat))/elapsed.Seconds(),
		q(0.50), q(0.90), q(0.99), q(1), errs)
}

func fmtDur(d time.Duration) string {
	if d < time.Millisecond {
		return fmt.Sprintf("%dµs", d.Microseconds())
	}
	return fmt.Sprintf("%.2fms", float64(d.Microseconds())/1000)
}

func pick(kinds []kind, total int, rng *rand.Rand) string {
	n := rng.IntN(total)
	for _, k := range kinds {
		if n < k.weight {
			return k.name
		}
		n -= k.weight
	}
	return kinds[len(kinds)-1].name
}

func newRequest(ctx context.Context, base, token, k string, bodies map[string][][]byte, rng *rand.Rand) (*http.Request, error) {
	var req *http.Request
	var err error
	switch k {
	case "anon":
		// A visitor's broad request on the request builder, as its script
		// sends it: no token. The forwarded address, a new one each time,
		// counts only when the server trusts 127.0.0.1 as a proxy.
		req, err = http.NewRequestWithContext(ctx, http.MethodGet, base+"/requests?"+anonQueries[rng.IntN(len(anonQueries))], nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("X-Quotes-Partial", "1")
		req.Header.Set("X-Forwarded-For", fmt.Sprintf("10.77.%d.%d", rng.IntN(256), 1+rng.IntN(254)))
		return req, nil
	case "narrow", "broad":
		b := bodies[k][rng.IntN(len(bodies[k]))]
		req, err = http.NewRequestWithContext(ctx, http.MethodPost, base+"/api/v1/quotes", bytes.NewReader(b))
		if err == nil {
			req.Header.Set("Content-Type", "application/json")
		}
	case "ping":
		req, err = http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/v1/ping", nil)
	default:
		req, err = http.NewRequestWithContext(ctx, http.MethodGet, base+"/static/app.css", nil)
	}
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	return req, nil
}

// do sends req and reads the whole response, so the connection is reused.
func do(client *http.Client, req *http.Request) (int, error) {
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, err
}
