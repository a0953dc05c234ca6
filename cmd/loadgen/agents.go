package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpumarket/gpumarket/agentapi"
	"github.com/gpumarket/gpumarket/workflow"
)

// Simulated provider agents speaking the real protocol (docs/agent.md) over
// HTTP, one goroutine each: a heartbeat with eight devices every interval,
// the long-poll of the assignments held open in between (push agents) or
// nothing (old agents, as before the long-poll), the installed, removed and
// acceptance reports the assignments ask for.

// simAgent is one simulated node's agent.
type simAgent struct {
	node     fleetNode
	base     string
	client   *http.Client
	push     bool
	interval time.Duration
	rec      *fleetRecorder

	seq       int64
	devices   json.RawMessage // fleetDevices, encoded once
	installed map[int64]bool
	accepted  map[int64]bool
	removed   map[int64]bool
}

func newSimAgent(node fleetNode, base string, client *http.Client, push bool, interval time.Duration, rec *fleetRecorder) *simAgent {
	devices, _ := json.Marshal(fleetDevices())
	return &simAgent{node: node, base: base, client: client, push: push, interval: interval, rec: rec, devices: devices,
		installed: map[int64]bool{}, accepted: map[int64]bool{}, removed: map[int64]bool{}}
}

// simHeartbeat is agentapi.Heartbeat with its devices encoded once: the
// load tool shares the cores with the server it measures, so it spends
// little of them.
type simHeartbeat struct {
	Seq          int64           `json:"seq"`
	SentAt       time.Time       `json:"sent_at"`
	AgentVersion string          `json:"agent_version"`
	Probe        string          `json:"probe"`
	Devices      json.RawMessage `json:"devices"`
	Error        string          `json:"error"`
}

// run beats from after delay until ctx ends.
func (a *simAgent) run(ctx context.Context, delay time.Duration) {
	if !sleepCtx(ctx, delay) {
		return
	}
	// A fresh start at the Unix time in milliseconds, as the agent's state
	// file starts, so a later size's agent on the same node goes on above.
	a.seq = time.Now().UnixMilli()
	for ctx.Err() == nil {
		began := time.Now()
		a.seq++
		hb := simHeartbeat{Seq: a.seq, SentAt: began.UTC(), AgentVersion: "loadgen", Probe: "simulate", Devices: a.devices}
		var resp agentapi.HeartbeatResponse
		err := a.call(ctx, http.MethodPost, agentapi.PathHeartbeat, hb, &resp)
		var refused *refusal
		if errors.As(err, &refused) {
			// The writer is behind: sent again after Retry-After and a
			// random share of it, as the agent does.
			a.rec.heartbeatRefused()
			sleepCtx(ctx, refused.retryAfter+rand.N(refused.retryAfter))
			continue
		}
		a.rec.heartbeat(time.Since(began), err)
		if err == nil {
			a.act(ctx, resp.Assignments)
		}
		next := began.Add(a.interval)
		if err != nil || !a.push || !resp.Push {
			sleepCtx(ctx, time.Until(next))
			continue
		}
		known := resp.Version
		for ctx.Err() == nil {
			wait := time.Until(next)
			if wait < time.Second {
				break // the heartbeat goes now, a little early, rather than the node unreachable for the rest
			}
			var as agentapi.Assignments
			q := url.Values{agentapi.QueryWait: {strconv.Itoa(min(int(wait/time.Second), agentapi.MaxWaitSeconds))}, agentapi.QueryKnown: {known}}
			if err := a.call(ctx, http.MethodGet, agentapi.PathAssignments+"?"+q.Encode(), nil, &as); err != nil {
				a.rec.pollFailed(err)
				sleepCtx(ctx, time.Until(next))
				break
			}
			known = as.Version
			if as.Changed {
				a.act(ctx, as.Assignments)
			}
		}
	}
}

// act reports what the assignments ask. A push agent does not report
// "installed" again once the server says it has it; an old agent reports
// it at every heartbeat, as agents did before.
func (a *simAgent) act(ctx context.Context, as []agentapi.Assignment) {
	for _, x := range as {
		switch x.State {
		case agentapi.StateInstall:
			if !(a.push && a.installed[x.PieceID] && x.Reported) {
				in := agentapi.Installed{Connection: agentapi.Connection{Host: "203.0.113.7", Port: 22, User: "gpu"}, InstalledAt: time.Now().UTC()}
				if err := a.call(ctx, http.MethodPost, agentapi.AssignmentPath(x.PieceID, agentapi.ReportInstalled), in, nil); err != nil {
					a.rec.reportFailed(err)
					continue
				}
				if !a.installed[x.PieceID] {
					a.installed[x.PieceID] = true
					a.rec.keysInstalled(x.PieceID)
				}
			}
			if x.Acceptance && !a.accepted[x.PieceID] {
				acc := agentapi.Acceptance{Metric: "bf16_tflops", PerDevice: slices.Repeat([]float64{950}, x.Devices), DurationSeconds: 1}
				if err := a.call(ctx, http.MethodPost, agentapi.AssignmentPath(x.PieceID, agentapi.ReportAcceptance), acc, nil); err != nil {
					a.rec.reportFailed(err)
					continue
				}
				a.accepted[x.PieceID] = true
			}
		case agentapi.StateRemove:
			if a.removed[x.PieceID] {
				continue
			}
			if err := a.call(ctx, http.MethodPost, agentapi.AssignmentPath(x.PieceID, agentapi.ReportRemoved),
				agentapi.Removed{RemovedAt: time.Now().UTC()}, nil); err != nil {
				a.rec.reportFailed(err)
				continue
			}
			a.removed[x.PieceID] = true
		}
	}
}

// call sends one request with the node's token and decodes a 2xx answer.
func (a *simAgent) call(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.base+"/"+path, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+a.node.Token)
	resp, err := a.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if secs, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && secs > 0 && resp.StatusCode == http.StatusTooManyRequests {
		return &refusal{retryAfter: time.Duration(secs) * time.Second}
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s /%s: %d %s", method, path, resp.StatusCode, strings.TrimSpace(string(b)))
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

// refusal is a 429 with Retry-After.
type refusal struct{ retryAfter time.Duration }

func (r *refusal) Error() string { return fmt.Sprintf("429, retry after %s", r.retryAfter) }

func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// fleetRecorder gathers what the agents measure: heartbeat latencies and
// failures while measuring, and when each piece's keys were reported
// installed (Unix nanoseconds).
type fleetRecorder struct {
	mu        sync.Mutex
	measuring bool
	hb        []time.Duration
	hbErrors  int
	refused   int // heartbeats answered 429
	pollErrs  int
	repErrs   int
	firstErr  string
	installed map[int64]int64
	waiting   map[int64]chan struct{}
}

func newFleetRecorder() *fleetRecorder {
	return &fleetRecorder{installed: map[int64]int64{}, waiting: map[int64]chan struct{}{}}
}

func (r *fleetRecorder) noteErr(err error) {
	if r.firstErr == "" {
		r.firstErr = err.Error()
	}
}

func (r *fleetRecorder) heartbeat(d time.Duration, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.measuring {
		return
	}
	if err != nil && !strings.Contains(err.Error(), "context canceled") {
		r.hbErrors++
		r.noteErr(err)
		return
	}
	r.hb = append(r.hb, d)
}

func (r *fleetRecorder) heartbeatRefused() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.measuring {
		r.refused++
	}
}

func (r *fleetRecorder) pollFailed(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.measuring && !strings.Contains(err.Error(), "context canceled") {
		r.pollErrs++
		r.noteErr(err)
	}
}

func (r *fleetRecorder) reportFailed(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.measuring && !strings.Contains(err.Error(), "context canceled") {
		r.repErrs++
		r.noteErr(err)
	}
}

func (r *fleetRecorder) keysInstalled(piece int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.installed[piece]; ok {
		return
	}
	r.installed[piece] = time.Now().UnixNano()
	if ch := r.waiting[piece]; ch != nil {
		close(ch)
		delete(r.waiting, piece)
	}
}

// waitInstalled returns when the piece's keys were reported installed,
// waiting up to limit; false when they were not.
func (r *fleetRecorder) waitInstalled(ctx context.Context, piece int64, limit time.Duration) (int64, bool) {
	r.mu.Lock()
	if at, ok := r.installed[piece]; ok {
		r.mu.Unlock()
		return at, true
	}
	ch := r.waiting[piece]
	if ch == nil {
		ch = make(chan struct{})
		r.waiting[piece] = ch
	}
	r.mu.Unlock()
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
	case <-ctx.Done():
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	at, ok := r.installed[piece]
	return at, ok
}

// window starts (true) or ends a measurement, clearing what was measured
// before it when it starts.
func (r *fleetRecorder) window(on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.measuring = on
	if on {
		r.hb, r.hbErrors, r.refused, r.pollErrs, r.repErrs, r.firstErr = nil, 0, 0, 0, 0, ""
	}
}

// quantile is the q-quantile of sorted ds (0 when empty).
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	return ds[min(len(ds)-1, int(q*float64(len(ds))))]
}

// fleetConfig is what `loadgen -fleet` is asked to do.
type fleetConfig struct {
	sizes         []int
	interval      time.Duration
	dur           time.Duration
	offers        int
	payEvery      time.Duration
	narrowClients int
	dir           string
	writeEvery    bool
	oldEvery      int // every oldEvery-th agent is an old one (heartbeats only); 0: none
	rampPerSec    float64
	// profileDir, when not "", receives CPU profiles of the server and of
	// the agents' process over each size's measurement
	// (server-N.prof, agents-N.prof: go tool pprof).
	profileDir string
}

// fleetRow is one fleet size's figures.
type fleetRow struct {
	agents                int
	heartbeatsPerSec      float64
	hbP50, hbP99          time.Duration
	hbErrors, otherErrors int
	refused               int
	firstErr              string
	counts                workflow.AgentCounts
	push, old             []time.Duration // pay → keys installed
	missed                int
	narrowPerSec, narrowQ float64
	narrowP99, idleNarrow time.Duration
	// serverCores and agentCores are the CPU the server's process and the
	// agents' (this one, the narrow quotes' clients included) used over
	// the measurement, in cores.
	serverCores, agentCores float64
}

// runFleet is `loadgen -fleet`: the fleet server in a child process, then
// for each size the agents, the quote yardstick and the payments beside.
func runFleet(ctx context.Context, cfg fleetConfig, stdout, stderr io.Writer) error {
	// The agents' process collects its garbage less often than Go's
	// default, so that it takes less of the cores it shares with the server
	// it measures (the server child keeps the default).
	debug.SetGCPercent(400)
	maxN := slices.Max(cfg.sizes)
	self, err := os.Executable()
	if err != nil {
		return err
	}
	args := []string{"-fleet-server", "-db", cfg.dir + "/fleet.db", "-offers", strconv.Itoa(cfg.offers), "-agents", strconv.Itoa(maxN)}
	if cfg.writeEvery {
		args = append(args, "-write-every-heartbeat")
	}
	child := exec.Command(self, args...)
	child.Stderr = stderr
	out, err := child.StdoutPipe()
	if err != nil {
		return err
	}
	if err := child.Start(); err != nil {
		return err
	}
	defer func() {
		_ = child.Process.Signal(os.Interrupt)
		_ = child.Wait()
	}()
	control := ""
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		fmt.Fprintln(stdout, line)
		if u, ok := strings.CutPrefix(line, "control "); ok {
			control = u
			break
		}
	}
	if control == "" {
		return errNoControl
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	cc := &http.Client{Timeout: time.Minute}
	var info struct {
		URL      string      `json:"url"`
		APIToken string      `json:"api_token"`
		Nodes    []fleetNode `json:"nodes"`
	}
	if err := getJSON(ctx, cc, control+"/nodes", &info); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "fleet: interval %s, %s measured per size, a payment every %s, narrow quotes from %d clients\n",
		cfg.interval, cfg.dur, cfg.payEvery, cfg.narrowClients)

	narrow := []kind{{"narrow", 1}}
	idle, elapsed, err := measure(ctx, []string{info.URL}, info.APIToken, cfg.narrowClients, 2*time.Second, cfg.dur, narrow)
	if err != nil {
		return err
	}
	idleRate := float64(len(idle["narrow"].lat)) / elapsed.Seconds()
	slices.Sort(idle["narrow"].lat)
	idleP99 := quantile(idle["narrow"].lat, 0.99)
	fmt.Fprintf(stdout, "narrow quotes idle: %.0f/s, p99 %s\n", idleRate, fmtDur(idleP99))

	transport := &http.Transport{MaxIdleConns: maxN + 64, MaxIdleConnsPerHost: maxN + 64, IdleConnTimeout: 2 * time.Minute, DisableCompression: true}
	client := &http.Client{Transport: transport, Timeout: 30 * time.Second}
	used := map[int]bool{}
	actx, stopAgents := context.WithCancel(ctx)
	pool := &fleetPool{ctx: actx, rec: newFleetRecorder()}
	defer func() { stopAgents(); pool.wg.Wait() }()
	var rows []fleetRow
	for _, n := range cfg.sizes {
		row, err := fleetSize(ctx, cfg, n, info.URL, info.APIToken, control, cc, client, info.Nodes, used, pool)
		if err != nil {
			return err
		}
		row.idleNarrow = idleP99
		row.narrowQ = row.narrowPerSec / idleRate
		rows = append(rows, row)
		printFleetRow(stdout, row)
	}
	return nil
}

// fleetPool is the agents running, kept from one fleet size to the next:
// an agent restarted would write its first heartbeat in full again.
type fleetPool struct {
	ctx     context.Context
	wg      sync.WaitGroup
	started int
	rec     *fleetRecorder
}

// fleetSize brings the agents up to n, their starts spread over two
// intervals or at cfg.rampPerSec new agents a second if longer (a fleet
// does not start in one instant, and each new node's first heartbeat is
// written in full), and measures.
func fleetSize(ctx context.Context, cfg fleetConfig, n int, base, apiToken, control string, cc, client *http.Client, nodes []fleetNode,
	used map[int]bool, pool *fleetPool) (fleetRow, error) {
	rec := pool.rec
	isOld := func(i int) bool { return cfg.oldEvery > 0 && i%cfg.oldEvery == cfg.oldEvery-1 }
	from := pool.started
	ramp := 2 * cfg.interval
	if cfg.rampPerSec > 0 {
		ramp = max(ramp, time.Duration(float64(n-from)/cfg.rampPerSec*float64(time.Second)))
	}
	for i := from; i < n; i++ {
		a := newSimAgent(nodes[i], base, client, !isOld(i), cfg.interval, rec)
		delay := time.Duration(i-from) * ramp / time.Duration(n-from)
		pool.wg.Add(1)
		go func() {
			defer pool.wg.Done()
			a.run(pool.ctx, delay)
		}()
	}
	pool.started = max(pool.started, n)
	// The ramp, then an interval for the last ones' first heartbeats to be
	// behind them.
	if !sleepCtx(ctx, ramp+cfg.interval) {
		return fleetRow{}, ctx.Err()
	}
	var before fleetCounts
	if err := getJSON(ctx, cc, control+"/counts", &before); err != nil {
		return fleetRow{}, err
	}
	rec.window(true)
	start := time.Now()
	agentsBefore := processCPU()
	stopProfiles, err := fleetProfiles(ctx, cfg, n, control, cc)
	if err != nil {
		return fleetRow{}, err
	}

	// Payments beside, on nodes never paid before, push and old in turn.
	var push, old []time.Duration
	missed := 0
	var pmu sync.Mutex
	var pwg sync.WaitGroup
	pctx, pstop := context.WithCancel(ctx)
	pwg.Add(1)
	go func() {
		defer pwg.Done()
		wantOld := false
		for pctx.Err() == nil {
			if !sleepCtx(pctx, cfg.payEvery) {
				return
			}
			i := -1
			for j := range n {
				if !used[j] && isOld(j) == wantOld {
					i = j
					break
				}
			}
			if i < 0 {
				return
			}
			used[i] = true
			node := i
			oldNode := wantOld
			if cfg.oldEvery > 0 {
				wantOld = !wantOld
			}
			pwg.Add(1)
			go func() {
				defer pwg.Done()
				var paid fleetPaid
				if err := postJSON(ctx, cc, control+"/pay?node="+strconv.Itoa(node), &paid); err != nil {
					rec.reportFailed(err)
					return
				}
				at, ok := rec.waitInstalled(ctx, paid.PieceID, 3*cfg.interval)
				pmu.Lock()
				defer pmu.Unlock()
				if !ok {
					missed++
					return
				}
				d := time.Duration(at - paid.PaidAt)
				if oldNode {
					old = append(old, d)
				} else {
					push = append(push, d)
				}
			}()
		}
	}()
	merged, nelapsed, err := measure(ctx, []string{base}, apiToken, cfg.narrowClients, 0, cfg.dur, []kind{{"narrow", 1}})
	if err != nil {
		pstop()
		return fleetRow{}, err
	}
	elapsed := time.Since(start)
	rec.window(false)
	agentsCPU := processCPU() - agentsBefore
	var after fleetCounts
	if err := getJSON(ctx, cc, control+"/counts", &after); err != nil {
		pstop()
		return fleetRow{}, err
	}
	pstop()
	pwg.Wait()
	if err := stopProfiles(); err != nil {
		return fleetRow{}, err
	}

	rec.mu.Lock()
	hb := slices.Clone(rec.hb)
	row := fleetRow{agents: n, heartbeatsPerSec: float64(len(hb)) / elapsed.Seconds(), hbErrors: rec.hbErrors,
		otherErrors: rec.pollErrs + rec.repErrs, refused: rec.refused, firstErr: rec.firstErr, counts: after.Sub(before.AgentCounts), missed: missed,
		serverCores: (after.CPU - before.CPU).Seconds() / elapsed.Seconds(), agentCores: agentsCPU.Seconds() / elapsed.Seconds()}
	rec.mu.Unlock()
	slices.Sort(hb)
	row.hbP50, row.hbP99 = quantile(hb, 0.5), quantile(hb, 0.99)
	slices.Sort(push)
	slices.Sort(old)
	row.push, row.old = push, old
	nl := merged["narrow"].lat
	slices.Sort(nl)
	row.narrowPerSec = float64(len(nl)) / nelapsed.Seconds()
	row.narrowP99 = quantile(nl, 0.99)
	return row, nil
}

func printFleetRow(w io.Writer, r fleetRow) {
	fmt.Fprintf(w, "\n== %d agents\n", r.agents)
	fmt.Fprintf(w, "heartbeats: %.0f/s, p50 %s, p99 %s, %d failed, %d refused (429, sent again); other agent requests failed: %d", r.heartbeatsPerSec,
		fmtDur(r.hbP50), fmtDur(r.hbP99), r.hbErrors, r.refused, r.otherErrors)
	if r.firstErr != "" {
		fmt.Fprintf(w, " (first: %s)", r.firstErr)
	}
	fmt.Fprintln(w)
	c := r.counts
	fmt.Fprintf(w, "database: %d heartbeats, %d written in full, %d absorbed in %d batch writes, %d refused: %.3f write transactions per heartbeat; %d reports\n",
		c.Heartbeats, c.Written, c.Absorbed, c.Flushes, c.Refused, c.WritesPerHeartbeat(), c.Reports)
	line := func(name string, ds []time.Duration) string {
		if len(ds) == 0 {
			return name + ": none"
		}
		return fmt.Sprintf("%s: %d, p50 %s, p99 %s, max %s", name, len(ds), fmtDur(quantile(ds, 0.5)), fmtDur(quantile(ds, 0.99)), fmtDur(ds[len(ds)-1]))
	}
	fmt.Fprintf(w, "pay → keys installed: %s; %s; %d not installed in 3 intervals\n", line("long-poll agents", r.push), line("heartbeat-only agents", r.old), r.missed)
	if len(r.push) > 0 && len(r.old) > 0 {
		fmt.Fprintf(w, "-- pay → keys p99, long-poll / heartbeat-only: %.4f\n", float64(quantile(r.push, 0.99))/float64(quantile(r.old, 0.99)))
	}
	fmt.Fprintf(w, "narrow quotes beside: %.0f/s (%.2f of idle, target at least 0.50), p99 %s (idle %s)\n", r.narrowPerSec, r.narrowQ,
		fmtDur(r.narrowP99), fmtDur(r.idleNarrow))
	fmt.Fprintf(w, "CPU over the measurement: server %.2f cores, agents and quote clients %.2f cores (of %d)\n", r.serverCores, r.agentCores,
		runtime.NumCPU())
}

// fleetProfiles starts CPU profiles of the server (through its control
// surface) and of this process for a size's measurement when
// cfg.profileDir is set; the returned function ends and writes them.
func fleetProfiles(ctx context.Context, cfg fleetConfig, n int, control string, cc *http.Client) (func() error, error) {
	if cfg.profileDir == "" {
		return func() error { return nil }, nil
	}
	f, err := os.Create(filepath.Join(cfg.profileDir, fmt.Sprintf("agents-%d.prof", n)))
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	server := make(chan error, 1)
	go func() {
		u := fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", control, max(1, int(cfg.dur/time.Second)-1))
		server <- fetchTo(ctx, cc, u, filepath.Join(cfg.profileDir, fmt.Sprintf("server-%d.prof", n)))
	}()
	return func() error {
		pprof.StopCPUProfile()
		return errors.Join(f.Close(), <-server)
	}, nil
}

// fetchTo writes the body of a GET of u to the file path.
func fetchTo(ctx context.Context, c *http.Client, u, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %d", u, resp.StatusCode)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

func getJSON(ctx context.Context, c *http.Client, u string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	return doJSON(c, req, out)
}

func postJSON(ctx context.Context, c *http.Client, u string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, nil)
	if err != nil {
		return err
	}
	return doJSON(c, req, out)
}

func doJSON(c *http.Client, req *http.Request, out any) error {
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: %d %s", req.Method, req.URL.Path, resp.StatusCode, strings.TrimSpace(string(b)))
	}
	return json.Unmarshal(b, out)
}
