package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpumarket/gpumarket/agentapi"
	"github.com/gpumarket/gpumarket/market"
)

// Container mode (docs/agent.md): with -containers podman|docker the agent
// runs each piece whose buyer chose a runtime in a container of its own,
// with only the piece's devices (CDI), the buyer's keys, the published
// ports and the provider's limits, and stops and removes it at the end.
// Pieces without a runtime still get their keys in authorized_keys.

// Timeouts of the engine's commands: a pull may take long; the rest not.
const (
	pullTimeout   = 30 * time.Minute
	engineTimeout = 2 * time.Minute
)

// engine is a container engine's command line: podman and docker take the
// same run flags for what the agent uses (CDI devices need docker 25 or
// later with the cdi feature on); they differ in how a missing container
// or image is asked about and in removal, which engine spells out.
type engine struct {
	kind string   // "podman" or "docker"
	argv []string // the program and its global flags (-engine-args)
}

// runOptions are the provider's settings for every container.
type runOptions struct {
	publishAddr   string   // host address the ports are published on
	cdiKind       string   // CDI device kind, e.g. nvidia.com/gpu
	cpusPerDevice float64  // 0: no limit
	memGBPerDev   int      // 0: no limit
	pidsLimit     int      // 0: no limit
	extraRunArgs  []string // -container-args
}

// containerName is the one container of a piece.
func containerName(piece int64) string { return "gpumarket-piece-" + strconv.FormatInt(piece, 10) }

func (e engine) cmd(args ...string) []string { return append(slices.Clone(e.argv), args...) }

// imageExists asks whether the image is present (exit status 0).
func (e engine) imageExists(image string) []string {
	if e.kind == "docker" {
		return e.cmd("image", "inspect", "--format", "{{.Id}}", image)
	}
	return e.cmd("image", "exists", image)
}

// pull pulls an image, printing its progress (pullProgress reads it).
func (e engine) pull(image string) []string { return e.cmd("pull", image) }

// imageSize prints the image's size in bytes.
func (e engine) imageSize(image string) []string {
	return e.cmd("image", "inspect", "--format", "{{.Size}}", image)
}

// exists asks whether the container is there (exit status 0).
func (e engine) exists(name string) []string {
	if e.kind == "docker" {
		return e.cmd("container", "inspect", "--format", "{{.Id}}", name)
	}
	return e.cmd("container", "exists", name)
}

// remove stops and removes the container and its anonymous volumes;
// podman ignores a missing one (--ignore), docker says "No such container".
func (e engine) remove(name string) []string {
	if e.kind == "docker" {
		return e.cmd("rm", "--force", "--volumes", name)
	}
	return e.cmd("rm", "--force", "--volumes", "--ignore", "--time", "10", name)
}

func (e engine) port(name string) []string { return e.cmd("port", name) }

// run is the command that creates and starts the piece's container. The
// environment's values are not on the command line (where ps shows them):
// "-e NAME" takes each from the engine's own environment (runEnv).
func (e engine) run(o runOptions, as assignment, dir string) []string {
	rt := as.Runtime
	args := []string{"run", "--detach", "--name", containerName(as.PieceID),
		"--label", "gpumarket.piece=" + strconv.FormatInt(as.PieceID, 10),
		"--label", "gpumarket.reservation=" + strconv.FormatInt(as.ReservationID, 10),
		"--hostname", containerName(as.PieceID)}
	for _, d := range as.DeviceIndices {
		args = append(args, "--device", o.cdiKind+"="+strconv.Itoa(d))
	}
	if rt.MinShmMB > 0 {
		args = append(args, "--shm-size", strconv.Itoa(rt.MinShmMB)+"m")
	}
	if n := len(as.DeviceIndices); n > 0 {
		if o.cpusPerDevice > 0 {
			args = append(args, "--cpus", strconv.FormatFloat(o.cpusPerDevice*float64(n), 'f', -1, 64))
		}
		if o.memGBPerDev > 0 {
			args = append(args, "--memory", strconv.Itoa(o.memGBPerDev*n)+"g")
		}
	}
	if o.pidsLimit > 0 {
		args = append(args, "--pids-limit", strconv.Itoa(o.pidsLimit))
	}
	for _, p := range publishedPorts(rt) {
		args = append(args, "--publish", o.publishAddr+"::"+strconv.Itoa(p))
	}
	for _, v := range rt.Env {
		args = append(args, "--env", v.Name)
	}
	args = append(args, "--volume", dir+":/etc/gpumarket:ro")
	args = append(args, o.extraRunArgs...)
	switch market.LaunchMode(rt.Launch) {
	case market.LaunchEntrypoint:
		args = append(args, rt.Image)
	default:
		args = append(args, "--entrypoint", "/bin/sh", rt.Image, "/etc/gpumarket/start.sh")
	}
	return e.cmd(args...)
}

// runEnv is the engine's environment for run: the agent's (less the host
// token) and the runtime's variables, for "-e NAME".
func runEnv(rt *agentapi.Runtime) []string {
	env := hookEnviron()
	for _, v := range rt.Env {
		env = append(env, v.Name+"="+v.Value)
	}
	return env
}

// publishedPorts are the container ports the agent publishes (the launch
// mode's own first).
func publishedPorts(rt *agentapi.Runtime) []int {
	return market.Runtime{Launch: market.LaunchMode(rt.Launch), Ports: rt.Ports}.PublishedPorts()
}

// parsePorts reads `podman port` / `docker port` output, one mapping a line:
// "22/tcp -> 127.0.0.1:40022", "22/tcp -> [::]:40022"; the first host
// port of each container port is kept.
func parsePorts(out []byte) ([]market.PortMapping, error) {
	var ms []market.PortMapping
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		left, right, ok := strings.Cut(line, " -> ")
		if !ok {
			return nil, fmt.Errorf("port output %q: no \" -> \"", line)
		}
		cport, proto, _ := strings.Cut(left, "/")
		if proto != "" && proto != "tcp" {
			continue
		}
		i := strings.LastIndexByte(right, ':')
		c, err1 := strconv.Atoi(cport)
		h, err2 := strconv.Atoi(right[i+1:])
		if i < 0 || err1 != nil || err2 != nil {
			return nil, fmt.Errorf("port output %q: not container/proto -> address:port", line)
		}
		if !slices.ContainsFunc(ms, func(m market.PortMapping) bool { return m.Container == c }) {
			ms = append(ms, market.PortMapping{Container: c, Host: h})
		}
	}
	return ms, nil
}

// startScript is what the container runs in the ssh and jupyter modes:
// the buyer's on-start script, then the mode's server in the foreground.
func startScript(mode market.LaunchMode) string {
	var b strings.Builder
	b.WriteString("#!/bin/sh\n# Written by gpumarket-agent for this rental.\nset -e\n")
	b.WriteString("if [ -s /etc/gpumarket/on-start.sh ]; then /bin/sh /etc/gpumarket/on-start.sh; fi\n")
	switch mode {
	case market.LaunchJupyter:
		b.WriteString(`exec jupyter lab --ip=0.0.0.0 --port=8888 --no-browser --allow-root --ServerApp.token="$(cat /etc/gpumarket/jupyter-token)"` + "\n")
	default:
		b.WriteString("mkdir -p /run/sshd\n")
		b.WriteString("[ -e /etc/ssh/ssh_host_ed25519_key ] || ssh-keygen -A\n")
		b.WriteString(`sshd=$(command -v sshd || echo /usr/sbin/sshd)` + "\n")
		b.WriteString(`exec "$sshd" -D -e -o AuthorizedKeysFile=/etc/gpumarket/authorized_keys -o PasswordAuthentication=no ` +
			`-o KbdInteractiveAuthentication=no -o PermitRootLogin=prohibit-password` + "\n")
	}
	return b.String()
}

// containerState is what the agent did for a piece's container.
type containerState struct {
	Name    string               `json:"name"`
	Image   string               `json:"image"`
	Pulled  bool                 `json:"pulled,omitempty"`
	Created bool                 `json:"created,omitempty"`
	Failed  string               `json:"failed,omitempty"` // why it could not be made ready; not retried
	Ports   []market.PortMapping `json:"ports,omitempty"`
	Token   string               `json:"token,omitempty"` // jupyter
	// Reported is the last phase the server accepted: a phase is posted
	// once, not on every heartbeat (the server limits each token's rate).
	Reported market.ContainerPhase `json:"reported,omitempty"`
}

// containers runs the pieces' containers.
type containers struct {
	engine  engine
	opts    runOptions
	dir     string // where each piece's mounted directory is made
	maxGB   int    // images larger are refused (0: no limit)
	runProg func(ctx context.Context, env []string, argv []string) ([]byte, []byte, error)
	// pullProg runs a pull giving each line of its output as it comes
	// (runEnginePull); nil: runProg, the lines given at the end.
	pullProg func(ctx context.Context, argv []string, line func(string)) error
}

// exec runs one engine command with a timeout; the error carries the first
// line of its standard error.
func (c *containers) exec(ctx context.Context, timeout time.Duration, env []string, argv []string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out, errOut, err := c.runProg(ctx, env, argv)
	if err != nil {
		msg := firstLine(errOut)
		if msg == "" {
			msg = err.Error()
		}
		return out, fmt.Errorf("%s %s: %s", c.engine.kind, argv[len(c.engine.argv)], msg)
	}
	return out, nil
}

// ensureImage pulls the image unless it is present, and refuses one over
// the size limit. progress, if not nil, is told how far a pull is each
// time that changes.
func (c *containers) ensureImage(ctx context.Context, image string, progress func(percent int, msg string)) error {
	if _, err := c.exec(ctx, engineTimeout, nil, c.engine.imageExists(image)); err != nil {
		var p pullProgress
		line := func(l string) {
			if p.feed(l) && progress != nil {
				progress(p.percent(), p.message())
			}
		}
		if err := c.pull(ctx, image, line); err != nil {
			return fmt.Errorf("the image %s could not be pulled: %w", image, err)
		}
	}
	if c.maxGB > 0 {
		out, err := c.exec(ctx, engineTimeout, nil, c.engine.imageSize(image))
		if err != nil {
			return err
		}
		if n, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64); err == nil && n > int64(c.maxGB)<<30 {
			return fmt.Errorf("the image %s is %d MB, over this host's limit of %d GB", image, n>>20, c.maxGB)
		}
	}
	return nil
}

// pull runs the engine's pull, giving each line of its output to line.
func (c *containers) pull(ctx context.Context, image string, line func(string)) error {
	ctx, cancel := context.WithTimeout(ctx, pullTimeout)
	defer cancel()
	argv := c.engine.pull(image)
	if c.pullProg != nil {
		if err := c.pullProg(ctx, argv, line); err != nil {
			return fmt.Errorf("%s pull: %w", c.engine.kind, err)
		}
		return nil
	}
	out, errOut, err := c.runProg(ctx, nil, argv)
	for _, l := range strings.Split(string(errOut)+"\n"+string(out), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			line(l)
		}
	}
	if err != nil {
		msg := firstLine(errOut)
		if msg == "" {
			msg = err.Error()
		}
		return fmt.Errorf("%s pull: %s", c.engine.kind, msg)
	}
	return nil
}

// pieceDir is the piece's directory, mounted read-only at /etc/gpumarket.
func (c *containers) pieceDir(piece int64) string {
	return filepath.Join(c.dir, "piece-"+strconv.FormatInt(piece, 10))
}

// writeFiles writes the piece's directory: the buyer's keys, the start
// script, the on-start script and the notebook token.
func (c *containers) writeFiles(as assignment, token string) error {
	dir := c.pieceDir(as.PieceID)
	// The pieces' files (keys, notebook tokens) are for their containers
	// only: no Unix user of the host may pass the directory above them.
	if err := os.MkdirAll(c.dir, 0o700); err != nil {
		return err
	}
	if err := os.Chmod(c.dir, 0o700); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	files := map[string]string{
		"authorized_keys": strings.Join(as.SSHKeys, "\n") + "\n",
		"start.sh":        startScript(market.LaunchMode(as.Runtime.Launch)),
		"on-start.sh":     as.Runtime.OnStart,
		"jupyter-token":   token,
	}
	for name, data := range files {
		if err := writeFileAtomic(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// start creates the piece's container and returns its published ports.
// A container left from an earlier start of the agent is replaced.
func (c *containers) start(ctx context.Context, as assignment, token string) ([]market.PortMapping, error) {
	if err := c.ensureImage(ctx, as.Runtime.Image, nil); err != nil {
		return nil, err
	}
	if err := c.writeFiles(as, token); err != nil {
		return nil, fmt.Errorf("the container's files: %w", err)
	}
	name := containerName(as.PieceID)
	if _, err := c.exec(ctx, engineTimeout, nil, c.engine.exists(name)); err == nil {
		if _, err := c.exec(ctx, engineTimeout, nil, c.engine.remove(name)); err != nil {
			return nil, err
		}
	}
	if _, err := c.exec(ctx, engineTimeout, runEnv(as.Runtime), c.engine.run(c.opts, as, c.pieceDir(as.PieceID))); err != nil {
		return nil, fmt.Errorf("the container would not start: %w", err)
	}
	out, err := c.exec(ctx, engineTimeout, nil, c.engine.port(name))
	if err != nil {
		return nil, err
	}
	return parsePorts(out)
}

// stop stops and removes the piece's container and its directory, and
// checks that it is gone.
func (c *containers) stop(ctx context.Context, piece int64) error {
	name := containerName(piece)
	if _, err := c.exec(ctx, engineTimeout, nil, c.engine.remove(name)); err != nil &&
		!(c.engine.kind == "docker" && strings.Contains(err.Error(), "No such container")) {
		return err
	}
	if _, err := c.exec(ctx, engineTimeout, nil, c.engine.exists(name)); err == nil {
		return fmt.Errorf("%s is still there after removal", name)
	}
	return os.RemoveAll(c.pieceDir(piece))
}

// newToken is a notebook token.
func newToken() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// runEngine runs an engine command with env (nil: the agent's, less the
// host token).
func runEngine(ctx context.Context, env []string, argv []string) ([]byte, []byte, error) {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	if env == nil {
		env = hookEnviron()
	}
	cmd.Env = env
	var stdout, stderr limitedBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	return stdout.Bytes(), stderr.Bytes(), err
}

// The agent's side of container mode.

// report posts a container report and says whether the server took it; a
// failure is logged (the report is made again when the server next asks).
func (a *agent) report(ctx context.Context, piece int64, phase market.ContainerPhase, msg string, progress int, ports []market.PortMapping) bool {
	err := a.client.container(context.WithoutCancel(ctx), piece, agentapi.ContainerReport{Phase: string(phase), Message: clip(msg, market.MaxContainerMessage),
		Progress: progress, Ports: ports})
	if err != nil {
		a.log.Error("report container", "piece", piece, "phase", phase, "err", err)
	}
	return err == nil
}

// pullReportEvery is the least time between two progress reports of a pull.
const pullReportEvery = 3 * time.Second

// prepare pulls a piece's image before its start, once, in the background
// so heartbeats go on.
func (a *agent) prepare(ctx context.Context, as assignment) error {
	if as.Runtime == nil {
		return nil
	}
	if a.containers == nil {
		a.report(ctx, as.PieceID, market.PhaseFailed, "this node's agent does not run containers (start it with -containers podman or docker)", 0, nil)
		return nil
	}
	p, _ := a.state.piece(as.PieceID)
	if p.Container != nil && (p.Container.Pulled || p.Container.Failed != "") {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.pulling[as.PieceID] {
		return nil
	}
	a.pulling[as.PieceID] = true
	a.tests.Add(1)
	go func() {
		defer a.tests.Done()
		defer func() {
			a.mu.Lock()
			delete(a.pulling, as.PieceID)
			a.mu.Unlock()
		}()
		a.report(ctx, as.PieceID, market.PhasePulling, "pulling "+as.Runtime.Image, 0, nil)
		// Progress goes to the server as it changes, at most every
		// pullReportEvery (the server limits each token's rate).
		var last time.Time
		err := a.containers.ensureImage(ctx, as.Runtime.Image, func(percent int, msg string) {
			if now := a.now(); now.Sub(last) >= pullReportEvery && percent < 100 {
				last = now
				a.report(ctx, as.PieceID, market.PhasePulling, msg, percent, nil)
			}
		})
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			// Tried again at the start, where a failure counts.
			a.log.Warn("image pull before the start failed; trying again at the start", "piece", as.PieceID, "err", err)
			a.report(ctx, as.PieceID, market.PhasePulling, "pull failed, trying again at the start: "+err.Error(), 0, nil)
			return
		}
		if err := a.state.update(as.PieceID, func(p *pieceState) {
			p.ReservationID, p.Devices, p.Start, p.End = as.ReservationID, as.Devices, as.Start, as.End
			p.Container = &containerState{Name: containerName(as.PieceID), Image: as.Runtime.Image, Pulled: true}
		}); err != nil {
			a.log.Error("state", "err", err)
		}
		a.log.Info("image pulled", "piece", as.PieceID, "image", as.Runtime.Image)
		a.report(ctx, as.PieceID, market.PhasePulled, "", 100, nil)
	}()
	return nil
}

// installContainer starts a piece's container once (and again when the
// buyer's keys change), reports it ready with its ports and "installed"
// with the connection: the host port of 22 (ssh) or 8888 (jupyter). A
// pull or start that fails is reported failed (an incident on the
// server) and not tried again.
func (a *agent) installContainer(ctx context.Context, as assignment) error {
	if a.containers == nil {
		a.report(ctx, as.PieceID, market.PhaseFailed, "this node's agent does not run containers (start it with -containers podman or docker)", 0, nil)
		return errors.New("a piece with a runtime, and the agent is not in container mode (-containers)")
	}
	keys, err := normaliseKeys(as.SSHKeys)
	if err != nil {
		return fmt.Errorf("not starting: %w", err)
	}
	as.SSHKeys = keys
	digest := keysDigest(keys)
	p, _ := a.state.piece(as.PieceID)
	cs := p.Container
	if cs != nil && cs.Failed != "" {
		a.report(ctx, as.PieceID, market.PhaseFailed, cs.Failed, 0, nil)
		return nil
	}
	now := a.serverNow()
	if !as.End.IsZero() && !now.Before(as.End) {
		return nil
	}
	if cs == nil || !cs.Created {
		token := newToken()
		a.report(ctx, as.PieceID, market.PhasePulling, "starting "+as.Runtime.Image, 0, nil)
		ports, err := a.containers.start(context.WithoutCancel(ctx), as, token)
		if err != nil {
			a.log.Error("container failed", "piece", as.PieceID, "err", err)
			if err := a.state.update(as.PieceID, func(p *pieceState) {
				p.ReservationID, p.Devices, p.Start, p.End = as.ReservationID, as.Devices, as.Start, as.End
				p.Container = &containerState{Name: containerName(as.PieceID), Image: as.Runtime.Image, Failed: err.Error()}
			}); err != nil {
				a.log.Error("state", "err", err)
			}
			a.report(ctx, as.PieceID, market.PhaseFailed, err.Error(), 0, nil)
			return nil
		}
		conn := a.cfg.conn
		conn.User = "root"
		want := market.SSHContainerPort
		if market.LaunchMode(as.Runtime.Launch) == market.LaunchJupyter {
			want, conn.User = market.JupyterPort, "jupyter"
		}
		for _, m := range ports {
			if m.Container == want {
				conn.Port = m.Host
			}
		}
		err = a.state.update(as.PieceID, func(p *pieceState) {
			*p = pieceState{ReservationID: as.ReservationID, Devices: as.Devices, Start: as.Start, End: as.End,
				KeysSHA256: digest, InstalledAt: now, Connection: conn, Acceptance: p.Acceptance,
				Container: &containerState{Name: containerName(as.PieceID), Image: as.Runtime.Image, Pulled: true, Created: true, Ports: ports, Token: token}}
		})
		if err != nil {
			a.log.Error("state", "err", err)
		}
		a.log.Info("container started", "piece", as.PieceID, "image", as.Runtime.Image, "devices", as.DeviceIndices, "ports", ports)
		p, _ = a.state.piece(as.PieceID)
	} else if p.KeysSHA256 != digest {
		if err := a.containers.writeFiles(as, cs.Token); err != nil {
			return err
		}
		if err := a.state.update(as.PieceID, func(p *pieceState) { p.KeysSHA256 = digest }); err != nil {
			a.log.Error("state", "err", err)
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	msg := ""
	if p.Container.Token != "" && market.LaunchMode(as.Runtime.Launch) == market.LaunchJupyter {
		msg = fmt.Sprintf("http://%s:%d/lab?token=%s", p.Connection.Host, p.Connection.Port, p.Container.Token)
	}
	if p.Container.Reported != market.PhaseReady && a.report(ctx, as.PieceID, market.PhaseReady, msg, 100, p.Container.Ports) {
		if err := a.state.update(as.PieceID, func(p *pieceState) {
			if p.Container != nil {
				p.Container.Reported = market.PhaseReady
			}
		}); err != nil {
			a.log.Error("state", "err", err)
		}
	}
	if err := a.client.installed(context.WithoutCancel(ctx), as.PieceID, installedReport{Connection: p.Connection, InstalledAt: p.InstalledAt}); err != nil {
		return fmt.Errorf("report installed: %w", err)
	}
	if as.Acceptance {
		return a.accept(ctx, as)
	}
	return nil
}

// removeContainer stops and removes a piece's container if it has one and
// reports it removed, or remove_failed (an incident for the provider and
// the admins). It reports whether the removal is done.
func (a *agent) removeContainer(ctx context.Context, piece int64) bool {
	p, _ := a.state.piece(piece)
	if a.containers == nil || p.Container == nil {
		return true
	}
	if err := a.containers.stop(context.WithoutCancel(ctx), piece); err != nil {
		a.log.Error("container removal failed", "piece", piece, "err", err)
		a.report(ctx, piece, market.PhaseRemoveFailed, err.Error(), 0, nil)
		return false
	}
	if err := a.state.update(piece, func(p *pieceState) { p.Container = nil }); err != nil {
		a.log.Error("state", "err", err)
	}
	a.log.Info("container removed", "piece", piece)
	a.report(ctx, piece, market.PhaseRemoved, "", 0, nil)
	return true
}
