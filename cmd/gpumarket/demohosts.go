package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/gpumarket/gpumarket/store"
)

// The demo's simulated hosts: with -demo, serve runs the real provider
// agent (gpumarket-agent, with its simulated probe) as child processes for
// a few demo offers' nodes, so the demo provider's hosts page shows live
// hosts and a demo booking of those offers gets its connection details.
// They speak the agent protocol over HTTP to this server, with host tokens
// created for the demo provider at each start. Demo only: nothing here
// runs without -demo.

// demoHostOffers are the demo offers (by title, of the Nordic Compute demo
// provider) whose every node runs a simulated agent.
var demoHostOffers = []string{
	"A100 80GB SXM node, Stockholm",
	"H200 SXM pair of nodes, Iceland geothermal",
}

// demoHostsProvider is the demo provider whose offers run simulated agents.
const demoHostsProvider = "nordic@demo.gpumarket.test"

// demoAgentFlag registers -demo-agent: the agent binary the demo runs.
func demoAgentFlag(fs *flag.FlagSet, getenv func(string) string) *string {
	return fs.String("demo-agent", getenv("GPUMARKET_DEMO_AGENT"),
		`with -demo: the gpumarket-agent binary run as the demo's simulated hosts (env GPUMARKET_DEMO_AGENT; default: gpumarket-agent beside this program; "off": none)`)
}

// demoHosts is the running simulated agents.
type demoHosts struct {
	stop context.CancelFunc
	wg   sync.WaitGroup
	log  *slog.Logger
}

// Stop stops the agents (SIGTERM: each finishes its call under way) and
// waits for them; the process owner calls it before the database closes.
func (d *demoHosts) Stop() {
	if d == nil {
		return
	}
	d.stop()
	d.wg.Wait()
	d.log.Info("demo hosts stopped")
}

// startDemoHosts creates a host token for each node of the demo host
// offers (revoking the previous start's) and runs an agent for each,
// reporting to the server listening at addr, with its state, its
// authorized_keys file and its log in dataDir/demo-hosts. Without an agent
// binary it logs why and runs none (nil, nil): the demo works without them.
func startDemoHosts(ctx context.Context, db *store.DB, agentFlag string, addr net.Addr, dataDir string, now time.Time, log *slog.Logger) (*demoHosts, error) {
	agentPath, err := demoAgentPath(agentFlag)
	if err != nil {
		log.Warn("demo hosts not started", "reason", err.Error())
		return nil, nil
	}
	provider, _, err := db.FindUserByEmail(ctx, demoHostsProvider)
	if err != nil {
		return nil, fmt.Errorf("demo hosts: %w", err)
	}
	offers, err := db.ListProviderOffers(ctx, provider.ID)
	if err != nil {
		return nil, fmt.Errorf("demo hosts: %w", err)
	}
	dir := filepath.Join(dataDir, "demo-hosts")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("demo hosts: %w", err)
	}
	port := strconv.Itoa(addr.(*net.TCPAddr).Port)
	server := "http://" + net.JoinHostPort("127.0.0.1", port)

	agentCtx, stop := context.WithCancel(context.Background())
	d := &demoHosts{stop: stop, log: log}
	started := 0
	for _, title := range demoHostOffers {
		for _, o := range offers {
			if o.Title != title {
				continue
			}
			for node := range o.Nodes {
				_, token, err := db.CreateHostToken(ctx, provider.ID, o.ID, node, now)
				if err != nil {
					d.Stop()
					return nil, fmt.Errorf("demo hosts: token for offer %d node %d: %w", o.ID, node, err)
				}
				name := fmt.Sprintf("offer-%d-node-%d", o.ID, node)
				args := []string{"-server", server, "-state", filepath.Join(dir, name+".json"),
					"-simulate", fmt.Sprintf("%s x%d", o.AcceleratorID, o.DevicesPerNode),
					"-authorized-keys", filepath.Join(dir, name+".authorized_keys"),
					"-host", fmt.Sprintf("node%d.offer%d.demo.gpumarket.test", node, o.ID), "-port", "22", "-ssh-user", "gpu"}
				if err := d.run(agentCtx, agentPath, args, token, filepath.Join(dir, name+".log")); err != nil {
					d.Stop()
					return nil, fmt.Errorf("demo hosts: %w", err)
				}
				started++
			}
		}
	}
	log.Info("demo hosts started: simulated agents report to this server", "agents", started, "agent", agentPath,
		"provider", demoHostsProvider, "logs", dir)
	return d, nil
}

// run starts one agent with its token in the environment (never on the
// command line) and its output in logPath.
func (d *demoHosts) run(ctx context.Context, agentPath string, args []string, token, logPath string) error {
	out, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, agentPath, args...)
	cmd.Env = append(os.Environ(), "GPUMARKET_AGENT_TOKEN="+token)
	cmd.Stdout, cmd.Stderr = out, out
	// Stopping asks the agent to finish its call under way and exit.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Start(); err != nil {
		out.Close()
		return fmt.Errorf("start %s: %w", agentPath, err)
	}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		defer out.Close()
		if err := cmd.Wait(); err != nil && ctx.Err() == nil {
			d.log.Warn("a demo host's agent exited", "err", err, "log", logPath)
		}
	}()
	return nil
}

// demoAgentPath is the agent binary: the flag's, or gpumarket-agent beside
// this program (as make build and the Docker image put it).
func demoAgentPath(flagValue string) (string, error) {
	switch flagValue {
	case "off":
		return "", errors.New("-demo-agent off")
	case "":
		self, err := os.Executable()
		if err != nil {
			return "", err
		}
		flagValue = filepath.Join(filepath.Dir(self), "gpumarket-agent")
	}
	if fi, err := os.Stat(flagValue); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
		return "", fmt.Errorf("no agent binary at %s (make build builds it; or pass -demo-agent PATH)", flagValue)
	}
	return flagValue, nil
}
