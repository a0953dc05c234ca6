// Command gpumarket-agent runs on each host of a provider's offer (one node
// of it) and connects the host to the marketplace, as docs/agent.md
// describes: it sends a heartbeat with the host's devices every -interval,
// holds the long-poll of its assignments open in between (when the server
// offers it), installs and removes the buyers' SSH keys through the
// provider's hooks as soon as the server asks, and runs the acceptance test. It makes outbound
// requests only, needs no database, and runs no command the server names:
// the server sends data, the agent runs only its provider's hooks.
//
//	gpumarket-agent -server https://gpumarket.example -token-file /etc/gpumarket-agent/token \
//	    -host 203.0.113.7 -ssh-user gpu
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gpumarket/gpumarket/agentapi"
	"github.com/gpumarket/gpumarket/market"
)

// exitUnauthorized is the exit status when the server refuses the token, so
// that a service manager can tell it from a crash and not restart in vain.
const exitUnauthorized = 3

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "gpumarket-agent:", err)
		if errors.Is(err, errUnauthorized) {
			os.Exit(exitUnauthorized)
		}
		os.Exit(1)
	}
}

// run is the whole program; main only wires the process to it, so tests can
// call it with their own arguments, environment and streams. It returns
// when ctx ends (after the step under way) or the server refuses the token.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	cfg, err := parseConfig(args, getenv, stdout, stderr, log)
	if errors.Is(err, flag.ErrHelp) || errors.Is(err, errVersionShown) {
		return nil
	}
	if err != nil {
		return err
	}
	a, err := newAgent(cfg, log, time.Now)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "gpumarket-agent %s: reporting to %s every %s (probe %s, state %s)\n",
		agentVersion, cfg.server, cfg.interval, a.probe.Name(), cfg.statePath)
	if err := a.run(ctx); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "gpumarket-agent stopped")
	return nil
}

// config is what the flags say.
type config struct {
	server    *url.URL
	token     string
	statePath string
	interval  time.Duration
	probe     string // nvidia-smi, rocm-smi or simulate
	simAcc    market.Accelerator
	simCount  int
	faults    faults
	// The provider's commands, split at spaces (no shell); nil: built in.
	installHook, removeHook, acceptanceCmd []string
	authorizedKeys                         authorizedKeys
	// rentalUsers is the per-rental Unix users mode (-rental-users), or nil.
	rentalUsers *rentalUsers
	conn        connection
	// Container mode (container.go): nil engine argv means off.
	engine       engine
	runOpts      runOptions
	containerDir string
	maxImageGB   int
}

// errVersionShown ends run after -version.
var errVersionShown = errors.New("version shown")

var (
	tokenRe   = regexp.MustCompile(`^gph_[A-Za-z0-9_-]{43}$`)
	sshUserRe = regexp.MustCompile(`^[a-z_][a-z0-9_.-]{0,31}$`)
	hostRe    = regexp.MustCompile(`^[A-Za-z0-9.:-]{1,253}$`)
)

func parseConfig(args []string, getenv func(string) string, stdout, stderr io.Writer, log *slog.Logger) (config, error) {
	fs := flag.NewFlagSet("gpumarket-agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	server := fs.String("server", "", "the marketplace's URL, e.g. https://gpumarket.example (required)")
	tokenFile := fs.String("token-file", "", "file holding the host token from the hosts page (default: env "+tokenEnv+")")
	statePath := fs.String("state", "/var/lib/gpumarket-agent/state.json", "state file: heartbeat sequence number and installed pieces")
	interval := fs.Duration("interval", 10*time.Second, "time between heartbeats")
	probe := fs.String("probe", "", "how devices are found: nvidia-smi, rocm-smi or simulate (default nvidia-smi; simulate with -simulate)")
	simulate := fs.String("simulate", "", `simulated devices: a catalogue model and a count, e.g. "H100 80GB SXM x8"`)
	faultSpec := fs.String("fault", "", "simulation only: drop-device=N@T, stop-heartbeats@T, slow=F, comma-separated")
	installHook := fs.String("install-hook", "", "command that installs a piece's keys (default: the built-in authorized_keys writer)")
	removeHook := fs.String("remove-hook", "", "command that removes a piece's keys (with -install-hook)")
	acceptanceCmd := fs.String("acceptance-cmd", "", "benchmark run when a rental starts (default: none; the simulated figure with -simulate)")
	keysPath := fs.String("authorized-keys", "", "authorized_keys file of the built-in hook (default: ~SSH-USER/.ssh/authorized_keys)")
	host := fs.String("host", "", "address buyers connect to, reported with the keys (required)")
	port := fs.Int("port", 22, "SSH port buyers connect to")
	sshUser := fs.String("ssh-user", "", "user buyers log in as (required)")
	engineKind := fs.String("containers", "", "container mode: run pieces that come with a runtime in podman or docker containers (docs/agent.md)")
	engineArgs := fs.String("engine-args", "", `global flags of the engine, e.g. "--runtime runc --storage-driver vfs"`)
	containerArgs := fs.String("container-args", "", `extra flags for every container's run, e.g. "--ulimit nofile=1024:1024"`)
	containerDir := fs.String("container-dir", "/var/lib/gpumarket-agent/containers", "where each piece's keys and scripts are kept (mounted read-only at /etc/gpumarket)")
	publishAddr := fs.String("publish-address", "0.0.0.0", "host address containers' ports are published on")
	cdiKind := fs.String("cdi-kind", "nvidia.com/gpu", "CDI device kind each piece's devices are given as (<kind>=<index>)")
	cpusPerDevice := fs.Float64("cpus-per-device", 0, "CPU limit of a container per device it holds (0: none)")
	memPerDevice := fs.Int("memory-gb-per-device", 0, "memory limit of a container per device it holds, GB (0: none)")
	pidsLimit := fs.Int("pids-limit", 4096, "most processes in a container (0: none)")
	maxImageGB := fs.Int("max-image-gb", 0, "largest image pulled, GB (0: no limit); say the same on the offer")
	perRental := fs.Bool("rental-users", false, "give each rental its own Unix user, keys in a root-owned file, removed with all its processes at the end (needs root; docs/agent.md)")
	keysDir := fs.String("keys-dir", "/etc/gpumarket/keys", "with -rental-users: sshd's AuthorizedKeysFile directory (AuthorizedKeysFile /etc/gpumarket/keys/%u)")
	homeBase := fs.String("home-base", "/home", "with -rental-users: where the rental users' homes are made")
	userPrefix := fs.String("user-prefix", "rent", "with -rental-users: a rental user is this and the piece id, e.g. rent31")
	rentalGroup := fs.String("rental-group", "gpurent", "with -rental-users: the group of every rental user (sshd_config's Match Group)")
	version := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if *version {
		fmt.Fprintln(stdout, agentVersion)
		return config{}, errVersionShown
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected argument %q: every setting is a flag (-h lists them)", fs.Arg(0))
	}

	var cfg config
	u, err := checkServerURL(*server)
	if err != nil {
		return config{}, err
	}
	cfg.server = u
	if cfg.token, err = readToken(*tokenFile, getenv, log); err != nil {
		return config{}, err
	}
	cfg.statePath = *statePath
	if *interval <= 0 {
		return config{}, errors.New("-interval must be positive")
	}
	cfg.interval = *interval

	cfg.probe = *probe
	if cfg.probe == "" {
		cfg.probe = "nvidia-smi"
		if *simulate != "" {
			cfg.probe = "simulate"
		}
	}
	switch cfg.probe {
	case "simulate":
		if *simulate == "" {
			return config{}, errors.New(`-probe simulate needs -simulate, e.g. -simulate "H100 80GB SXM x8"`)
		}
		if cfg.simAcc, cfg.simCount, err = parseSimulate(*simulate); err != nil {
			return config{}, err
		}
		if cfg.faults, err = parseFaults(*faultSpec); err != nil {
			return config{}, err
		}
	case "nvidia-smi", "rocm-smi":
		if *simulate != "" || *faultSpec != "" {
			return config{}, fmt.Errorf("-simulate and -fault are for -probe simulate, not %s", cfg.probe)
		}
		cfg.faults = faults{slow: 1}
	default:
		return config{}, fmt.Errorf("-probe %q: want nvidia-smi, rocm-smi or simulate", cfg.probe)
	}

	cfg.conn = connection{Host: strings.TrimSpace(*host), Port: *port, User: strings.TrimSpace(*sshUser)}
	switch {
	case cfg.conn.Host == "":
		return config{}, errors.New("-host is required: the address buyers connect to (a DNS name or an IP address)")
	case !hostRe.MatchString(cfg.conn.Host):
		return config{}, fmt.Errorf("-host %q is not a DNS name or an IP address", cfg.conn.Host)
	case cfg.conn.Port < 1 || cfg.conn.Port > 65535:
		return config{}, errors.New("-port must be from 1 to 65535")
	case cfg.conn.User == "" && !*perRental:
		return config{}, errors.New("-ssh-user is required: the user buyers log in as (or -rental-users: a user per rental)")
	case cfg.conn.User != "" && *perRental:
		return config{}, errors.New("-ssh-user and -rental-users do not go together: with -rental-users each rental is its own user")
	case cfg.conn.User != "" && !sshUserRe.MatchString(cfg.conn.User):
		return config{}, fmt.Errorf("-ssh-user %q is not a user name", cfg.conn.User)
	}

	if (*installHook == "") != (*removeHook == "") {
		return config{}, errors.New("-install-hook and -remove-hook go together: what one installs, the other must remove")
	}
	if cfg.installHook, err = command("-install-hook", *installHook); err != nil {
		return config{}, err
	}
	if cfg.removeHook, err = command("-remove-hook", *removeHook); err != nil {
		return config{}, err
	}
	if cfg.acceptanceCmd, err = command("-acceptance-cmd", *acceptanceCmd); err != nil {
		return config{}, err
	}
	switch {
	case *perRental:
		if cfg.installHook != nil || *keysPath != "" {
			return config{}, errors.New("-rental-users writes its own keys files: it takes neither -install-hook nor -authorized-keys")
		}
		cfg.rentalUsers = &rentalUsers{keysDir: filepath.Clean(*keysDir), homeBase: filepath.Clean(*homeBase), prefix: *userPrefix,
			group: *rentalGroup, shell: "/bin/bash", tempDirs: []string{"/tmp", "/var/tmp", "/dev/shm"}, run: runProgram}
		if err := cfg.rentalUsers.check(); err != nil {
			return config{}, err
		}
		if err := privateToRoot(*tokenFile); err != nil {
			return config{}, err
		}
	case cfg.installHook == nil:
		if cfg.authorizedKeys, err = keysFile(*keysPath, cfg.conn.User); err != nil {
			return config{}, err
		}
	}
	switch *engineKind {
	case "":
	case "podman", "docker":
		argv := append([]string{*engineKind}, strings.Fields(*engineArgs)...)
		if _, err := exec.LookPath(argv[0]); err != nil {
			return config{}, fmt.Errorf("-containers %s: %w", *engineKind, err)
		}
		cfg.engine = engine{kind: *engineKind, argv: argv}
		cfg.runOpts = runOptions{publishAddr: *publishAddr, cdiKind: *cdiKind, cpusPerDevice: *cpusPerDevice,
			memGBPerDev: *memPerDevice, pidsLimit: *pidsLimit, extraRunArgs: strings.Fields(*containerArgs)}
		cfg.containerDir, cfg.maxImageGB = *containerDir, *maxImageGB
	default:
		return config{}, fmt.Errorf("-containers %q: want podman or docker", *engineKind)
	}
	return cfg, nil
}

// readToken reads the host token from file, or else from the environment.
func readToken(file string, getenv func(string) string, log *slog.Logger) (string, error) {
	token := getenv(tokenEnv)
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("-token-file: %w", err)
		}
		if fi, err := os.Stat(file); err == nil && fi.Mode().Perm()&0o077 != 0 {
			log.Warn("the token file can be read by other users; chmod 600 it", "file", file)
		}
		token = string(b)
	}
	token = strings.TrimSpace(token)
	switch {
	case token == "":
		return "", fmt.Errorf("no host token: pass -token-file PATH or set %s (create a token for this node on the hosts page, /provider/hosts)", tokenEnv)
	case !tokenRe.MatchString(token):
		return "", errors.New("the host token is not one the hosts page gives (gph_ and 43 letters, digits, '-' or '_'); copy it again")
	}
	return token, nil
}

// privateToRoot refuses, with -rental-users, a token file that a renter
// could read: renters are other Unix users on the same host.
func privateToRoot(file string) error {
	if file == "" {
		return nil // from the environment: /proc/PID/environ is the agent's own
	}
	fi, err := os.Stat(file)
	if err != nil {
		return fmt.Errorf("-token-file: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("-token-file %s can be read by other users, renters included: chmod 600 it", file)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("-token-file %s belongs to uid %d, not the agent's: chown it", file, st.Uid)
	}
	return nil
}

// command splits one of the provider's command lines at spaces (no shell:
// use a script for anything more) and checks that the program exists.
func command(flagName, line string) ([]string, error) {
	argv := strings.Fields(line)
	if len(argv) == 0 {
		return nil, nil
	}
	if _, err := exec.LookPath(argv[0]); err != nil {
		return nil, fmt.Errorf("%s: %w", flagName, err)
	}
	return argv, nil
}

// keysFile is the built-in hook's authorized_keys file: the given path or
// the user's ~/.ssh/authorized_keys. When the agent runs as root, files
// it creates are given to the user.
func keysFile(path, sshUser string) (authorizedKeys, error) {
	k := authorizedKeys{path: path, uid: -1, gid: -1}
	u, lookupErr := user.Lookup(sshUser)
	if path == "" {
		if lookupErr != nil {
			return k, fmt.Errorf("-ssh-user %s: %v; create the user or pass -authorized-keys", sshUser, lookupErr)
		}
		k.path = filepath.Join(u.HomeDir, ".ssh", "authorized_keys")
	}
	if lookupErr == nil && os.Getuid() == 0 {
		uid, err1 := strconv.Atoi(u.Uid)
		gid, err2 := strconv.Atoi(u.Gid)
		if err1 == nil && err2 == nil {
			k.uid, k.gid = uid, gid
		}
	}
	return k, nil
}

// agent is the running agent: one loop of heartbeats and what they ask,
// and the acceptance tests under way.
type agent struct {
	cfg    config
	log    *slog.Logger
	client *client
	probe  prober
	hooks  hooks
	tester acceptanceTester
	state  *stateFile

	// now is the clock and sleep waits (false when ctx ended first);
	// tests replace both.
	now   func() time.Time
	sleep func(ctx context.Context, d time.Duration) bool
	// jitter is a random wait in [0, d), added to a Retry-After; nil:
	// math/rand's (tests replace it).
	jitter func(d time.Duration) time.Duration
	start  time.Time
	retry  backoff
	// offset is the server's clock less ours, from the last server_time:
	// the times the agent reports and the rental's end are on the server's
	// clock.
	offset time.Duration

	containers *containers // container mode, or nil

	mu             sync.Mutex
	running        map[int64]bool // acceptance tests under way, by piece
	pulling        map[int64]bool // image pulls under way, by piece
	tests          sync.WaitGroup
	warnedInterval bool
	// pushOffUntil is when to try the long-poll again after the server
	// refused it (pushRetry).
	pushOffUntil time.Time
}

func newAgent(cfg config, log *slog.Logger, now func() time.Time) (*agent, error) {
	st, err := loadState(cfg.statePath, now())
	if err != nil {
		return nil, fmt.Errorf("%w (choose another file with -state)", err)
	}
	keys := cfg.authorizedKeys
	a := &agent{
		cfg:     cfg,
		log:     log,
		client:  newClient(cfg.server, cfg.token),
		hooks:   hooks{install: cfg.installHook, remove: cfg.removeHook, keys: &keys, users: cfg.rentalUsers, conn: cfg.conn},
		state:   st,
		now:     now,
		sleep:   sleepContext,
		start:   now(),
		retry:   backoff{min: time.Second, max: time.Minute},
		running: map[int64]bool{},
		pulling: map[int64]bool{},
	}
	if cfg.engine.argv != nil {
		a.containers = &containers{engine: cfg.engine, opts: cfg.runOpts, dir: cfg.containerDir, maxGB: cfg.maxImageGB, runProg: runEngine, pullProg: runEnginePull}
	}
	a.tester = acceptanceTester{command: cfg.acceptanceCmd, now: a.clock, log: log}
	switch cfg.probe {
	case "simulate":
		sim := &simulated{acc: cfg.simAcc, count: cfg.simCount, faults: cfg.faults, start: a.start, now: a.clock}
		a.probe = sim
		a.tester.sim = sim
	case "rocm-smi":
		a.probe = rocmSMI{}
		log.Warn("rocm-smi is not supported yet: heartbeats will say so and report no devices")
	default:
		a.probe = nvidiaSMI{run: runProgram}
	}
	return a, nil
}

// clock is the agent's clock (a.now may be replaced after newAgent).
func (a *agent) clock() time.Time { return a.now() }

// serverNow is the time on the server's clock, as last seen.
func (a *agent) serverNow() time.Time { return a.now().Add(a.offset).UTC() }

// run sends heartbeats until ctx ends or the server refuses the token. A
// heartbeat that fails is retried with backoff (1 s doubling to 60 s);
// after one that succeeds, the agent acts on the assignments and waits for
// the next interval. When ctx ends, the call or hook under way finishes and
// nothing new starts; acceptance tests under way are stopped, unreported.
func (a *agent) run(ctx context.Context) error {
	defer a.tests.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopped, failures := false, 0
	for ctx.Err() == nil {
		began := a.now()
		a.expire(ctx)
		if a.cfg.faults.heartbeatsStopped(began.Sub(a.start)) {
			if !stopped {
				a.log.Warn("simulated fault: heartbeats stopped", "after", a.cfg.faults.stopHeartbeats)
				stopped = true
			}
			a.pause(ctx, a.cfg.interval)
			continue
		}
		resp, err := a.beat(ctx)
		switch {
		case errors.Is(err, errUnauthorized):
			return err
		case errors.Is(err, errStopping):
			continue
		case err != nil:
			failures++
			wait, asked := retryAfter(err, a.jitterOf)
			if !asked {
				wait = a.retry.wait()
			}
			a.log.Warn("heartbeat failed; retrying", "err", err, "failures", failures, "retry_in", wait)
			a.pause(ctx, wait)
			continue
		}
		if failures > 0 {
			a.log.Info("heartbeats resume", "after_failures", failures)
		}
		failures = 0
		a.retry.reset()
		if err := a.act(ctx, resp.Assignments); err != nil {
			return err
		}
		if err := a.await(ctx, began.Add(a.cfg.interval), resp); err != nil {
			return err
		}
	}
	a.log.Info("stopping", "seq", a.state.seq())
	return nil
}

// jitterOf is a random wait in [0, d) (agent.jitter).
func (a *agent) jitterOf(d time.Duration) time.Duration {
	if a.jitter != nil {
		return a.jitter(d)
	}
	return rand.N(d)
}

// pause waits d, or until the next rental with keys installed ends if that
// is sooner, so that the keys go at the end even while the server cannot
// be reached and the agent waits a minute between attempts.
func (a *agent) pause(ctx context.Context, d time.Duration) {
	now := a.serverNow()
	for _, p := range a.state.pieces() {
		if p.installed() && p.End.After(now) {
			d = min(d, p.End.Sub(now))
		}
	}
	a.sleep(ctx, d)
}

// pushRetry is how long an agent whose long-poll was refused (an older
// server, or a proxy in front of it) relies on its heartbeats alone before
// trying the long-poll again.
const pushRetry = 10 * time.Minute

// await waits until the next heartbeat is due at next. When the server
// offers it (the heartbeat's answer says push), the wait is spent holding
// the long-poll of the assignments open (docs/agent.md): each time they
// change — a rental paid, started, ended, cancelled — the agent acts on them
// at once instead of at its next heartbeat. Without it, or when the
// long-poll fails, it sleeps as pause does and the heartbeat brings the
// assignments. Only a refused token is an error.
func (a *agent) await(ctx context.Context, next time.Time, hb heartbeatResponse) error {
	if !hb.Push || a.now().Before(a.pushOffUntil) {
		a.pause(ctx, next.Sub(a.now()))
		return nil
	}
	known := hb.Version
	for ctx.Err() == nil {
		wait := next.Sub(a.now())
		if wait < time.Second {
			// The long-poll's wait is whole seconds: the heartbeat goes now,
			// a little early, rather than nothing heard for the rest.
			return nil
		}
		resp, err := a.client.assignments(ctx, known, min(int(wait/time.Second), agentapi.MaxWaitSeconds))
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, errUnauthorized):
			return err
		case errors.Is(err, errNoPush):
			a.log.Info("the server does not hold the long-poll of assignments; relying on heartbeats", "retry_in", pushRetry)
			a.pushOffUntil = a.now().Add(pushRetry)
			a.pause(ctx, next.Sub(a.now()))
			return nil
		case err != nil:
			a.log.Warn("long-poll of assignments failed; waiting for the next heartbeat", "err", err)
			a.pause(ctx, next.Sub(a.now()))
			return nil
		}
		if !resp.ServerTime.IsZero() {
			a.offset = resp.ServerTime.Sub(a.now())
		}
		known = resp.Version
		a.expire(ctx)
		if resp.Changed {
			if err := a.act(ctx, resp.Assignments); err != nil {
				return err
			}
		}
	}
	return nil
}

// errStopping is the agent stopping before a heartbeat went out.
var errStopping = errors.New("stopping")

// beat probes the devices and sends one heartbeat.
func (a *agent) beat(ctx context.Context) (heartbeatResponse, error) {
	report := a.probe.Probe(ctx)
	if ctx.Err() != nil {
		return heartbeatResponse{}, errStopping
	}
	seq, err := a.state.nextSeq()
	if err != nil {
		// The heartbeat still goes out: a host reported with a sequence
		// number that may be reused after a restart beats a host not reported.
		a.log.Error("could not save the sequence number", "err", err)
	}
	hb := heartbeatRequest{
		Seq:          seq,
		SentAt:       a.serverNow(),
		AgentVersion: agentVersion,
		Probe:        a.probe.Name(),
		Devices:      report.Devices,
		Error:        report.Error,
		Isolation:    a.hooks.isolation(),
	}
	// The call under way finishes even if the agent is asked to stop.
	resp, err := a.client.heartbeat(context.WithoutCancel(ctx), hb)
	if err != nil {
		return resp, err
	}
	if !resp.ServerTime.IsZero() {
		a.offset = resp.ServerTime.Sub(a.now())
	}
	if !resp.Accepted {
		a.log.Warn("the server ignored a heartbeat: it has seen a higher sequence number for this token "+
			"(is another agent running with the same token?)", "seq", seq)
	}
	if iv := time.Duration(resp.IntervalSeconds) * time.Second; iv > 0 && iv < a.cfg.interval && !a.warnedInterval {
		a.log.Warn("the marketplace expects heartbeats more often than -interval; it may count this host as down",
			"expected", iv, "interval", a.cfg.interval)
		a.warnedInterval = true
	}
	if report.Error != "" {
		a.log.Warn("probe", "problem", report.Error)
	}
	return resp, nil
}

// act does what the assignments ask, in order. Only a refused token stops
// it; any other failure is logged and tried again when the server asks
// again.
func (a *agent) act(ctx context.Context, assignments []assignment) error {
	asked := map[int64]bool{}
	for _, as := range assignments {
		if ctx.Err() != nil {
			return nil
		}
		asked[as.PieceID] = true
		var err error
		switch {
		case as.PieceID <= 0:
			err = errors.New("an assignment without a piece id")
		case as.State == statePrepare:
			err = a.prepare(ctx, as)
		case as.State == stateInstall && as.Runtime != nil:
			err = a.installContainer(ctx, as)
		case as.State == stateInstall:
			err = a.install(ctx, as)
		case as.State == stateRemove:
			err = a.remove(ctx, as)
		default:
			err = fmt.Errorf("piece %d: unknown assignment state %q", as.PieceID, as.State)
		}
		if errors.Is(err, errUnauthorized) {
			return err
		}
		if err != nil {
			a.log.Error("assignment", "piece", as.PieceID, "state", as.State, "err", err)
		}
	}
	// Pieces whose keys are gone and that the server no longer asks about
	// are done.
	var done []int64
	for id, p := range a.state.pieces() {
		if !p.RemovedAt.IsZero() && !asked[id] {
			done = append(done, id)
		}
	}
	if len(done) > 0 {
		if err := a.state.forget(done...); err != nil {
			a.log.Error("state", "err", err)
		}
	}
	return nil
}

// install installs a piece's keys unless they already are (the state file
// says so), reports "installed" every time the server asks, and starts the
// acceptance test if asked.
func (a *agent) install(ctx context.Context, as assignment) error {
	keys, err := normaliseKeys(as.SSHKeys)
	if err != nil {
		return fmt.Errorf("not installing: %w", err)
	}
	as.SSHKeys = keys
	digest := keysDigest(keys)
	p, _ := a.state.piece(as.PieceID)
	if !p.installed() || p.KeysSHA256 != digest {
		now := a.serverNow()
		if !as.End.IsZero() && !now.Before(as.End) {
			a.log.Info("not installing keys: the rental is over", "piece", as.PieceID, "end", as.End)
			return nil
		}
		// The hook under way finishes even if the agent is asked to stop.
		conn, out, err := a.hooks.Install(context.WithoutCancel(ctx), as)
		a.logOutput("install hook", as.PieceID, out)
		if err != nil {
			return err
		}
		err = a.state.update(as.PieceID, func(p *pieceState) {
			*p = pieceState{ReservationID: as.ReservationID, Devices: as.Devices, Start: as.Start, End: as.End,
				KeysSHA256: digest, InstalledAt: now, Connection: conn, Acceptance: p.Acceptance}
		})
		if err != nil {
			a.log.Error("state", "err", err)
		}
		a.log.Info("keys installed", "piece", as.PieceID, "reservation", as.ReservationID, "keys", len(keys),
			"until", as.End, "user", conn.User, "host", conn.Host, "port", conn.Port)
		p, _ = a.state.piece(as.PieceID)
	} else {
		if !p.End.Equal(as.End) || !p.Start.Equal(as.Start) {
			if err := a.state.update(as.PieceID, func(p *pieceState) { p.Start, p.End = as.Start, as.End }); err != nil {
				a.log.Error("state", "err", err)
			}
		}
		if as.Reported {
			// Installed before, and the server has the report: only the
			// acceptance test may be left.
			if as.Acceptance && ctx.Err() == nil {
				return a.accept(ctx, as)
			}
			return nil
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	err = a.client.installed(context.WithoutCancel(ctx), as.PieceID, installedReport{Connection: p.Connection, InstalledAt: p.InstalledAt})
	if err != nil {
		return fmt.Errorf("report installed: %w", err)
	}
	if as.Acceptance {
		return a.accept(ctx, as)
	}
	return nil
}

// remove removes a piece's keys unless already done, and reports "removed"
// every time the server asks.
func (a *agent) remove(ctx context.Context, as assignment) error {
	p, _ := a.state.piece(as.PieceID)
	if p.RemovedAt.IsZero() {
		if !a.removeContainer(ctx, as.PieceID) {
			return errors.New("the container could not be removed")
		}
		out, err := a.hooks.Remove(context.WithoutCancel(ctx), as)
		a.logOutput("remove hook", as.PieceID, out)
		if err != nil {
			a.reportRemoveFailed(ctx, as.PieceID, err)
			return err
		}
		now := a.serverNow()
		err = a.state.update(as.PieceID, func(p *pieceState) {
			if p.ReservationID == 0 {
				p.ReservationID, p.Devices, p.Start, p.End = as.ReservationID, as.Devices, as.Start, as.End
			}
			p.RemovedAt = now
		})
		if err != nil {
			a.log.Error("state", "err", err)
		}
		a.log.Info("keys removed", "piece", as.PieceID, "reservation", as.ReservationID)
		p, _ = a.state.piece(as.PieceID)
	}
	if ctx.Err() != nil {
		return nil
	}
	if err := a.client.removed(context.WithoutCancel(ctx), as.PieceID, removedReport{RemovedAt: p.RemovedAt}); err != nil {
		return fmt.Errorf("report removed: %w", err)
	}
	return nil
}

// expire removes the keys of pieces whose rental is over by the server's
// clock as last seen, whether or not the server can be reached: access
// ends with the rental. "removed" is reported when the server asks.
func (a *agent) expire(ctx context.Context) {
	now := a.serverNow()
	for id, p := range a.state.pieces() {
		if ctx.Err() != nil {
			return
		}
		if !p.installed() || p.End.IsZero() || now.Before(p.End) {
			continue
		}
		as := assignment{ReservationID: p.ReservationID, PieceID: id, Devices: p.Devices, Start: p.Start, End: p.End,
			SSHKeys: []string{}, State: stateRemove}
		if !a.removeContainer(ctx, id) {
			continue
		}
		out, err := a.hooks.Remove(context.WithoutCancel(ctx), as)
		a.logOutput("remove hook", id, out)
		if err != nil {
			a.log.Error("rental over; removing the keys failed", "piece", id, "err", err)
			a.reportRemoveFailed(ctx, id, err)
			continue
		}
		if err := a.state.update(id, func(p *pieceState) { p.RemovedAt = now }); err != nil {
			a.log.Error("state", "err", err)
		}
		a.log.Info("rental over: keys removed", "piece", id, "end", p.End)
	}
}

// reportRemoveFailed tells the server, once per distinct failure, that the
// piece's access could not be ended (an incident for the provider and the
// admins); the removal is tried again at each heartbeat.
func (a *agent) reportRemoveFailed(ctx context.Context, piece int64, cause error) {
	msg := clip(cause.Error(), 500)
	if p, _ := a.state.piece(piece); p.RemoveFailed == msg || p.InstalledAt.IsZero() {
		return
	}
	if err := a.client.removeFailed(context.WithoutCancel(ctx), piece, msg); err != nil {
		a.log.Error("report remove failed", "piece", piece, "err", err)
		return
	}
	if err := a.state.update(piece, func(p *pieceState) { p.RemoveFailed = msg }); err != nil {
		a.log.Error("state", "err", err)
	}
}

// accept reports the piece's acceptance result, running the test first
// (in the background, so heartbeats go on) if it has not run yet.
func (a *agent) accept(ctx context.Context, as assignment) error {
	p, _ := a.state.piece(as.PieceID)
	if p.Acceptance != nil {
		if err := a.client.acceptance(context.WithoutCancel(ctx), as.PieceID, *p.Acceptance); err != nil {
			return fmt.Errorf("report acceptance: %w", err)
		}
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.running[as.PieceID] {
		return nil
	}
	a.running[as.PieceID] = true
	a.tests.Add(1)
	go func() {
		defer a.tests.Done()
		defer func() {
			a.mu.Lock()
			delete(a.running, as.PieceID)
			a.mu.Unlock()
		}()
		a.log.Info("acceptance test started", "piece", as.PieceID, "devices", as.Devices)
		r := a.tester.run(ctx, as)
		if ctx.Err() != nil {
			a.log.Info("acceptance test stopped with the agent; it runs again if the server asks", "piece", as.PieceID)
			return
		}
		if err := a.state.update(as.PieceID, func(p *pieceState) { p.Acceptance = &r }); err != nil {
			a.log.Error("state", "err", err)
		}
		a.log.Info("acceptance test done", "piece", as.PieceID, "metric", r.Metric, "per_device", r.PerDevice, "error", r.Error)
		if err := a.client.acceptance(context.WithoutCancel(ctx), as.PieceID, r); err != nil {
			a.log.Error("report acceptance; reported again when the server asks", "piece", as.PieceID, "err", err)
		}
	}()
	return nil
}

// logOutput logs what a hook printed.
func (a *agent) logOutput(what string, piece int64, out string) {
	if out = strings.TrimSpace(out); out != "" {
		a.log.Info(what+" output", "piece", piece, "output", clip(out, 2000))
	}
}

// sleepContext waits d, or less if ctx ends first (then it returns false).
func sleepContext(ctx context.Context, d time.Duration) bool {
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

// runProgram runs a program and returns its standard output and error.
func runProgram(ctx context.Context, name string, args ...string) ([]byte, []byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	var stdout, stderr limitedBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 2 * time.Second
	err := cmd.Run()
	return stdout.Bytes(), stderr.Bytes(), err
}
