// Package stripemock starts Stripe's official API mock, stripe-mock, for a
// test: the binary named by STRIPE_MOCK_BIN, else tools/bin/stripe-mock at
// the module's root (`make test-deps` installs it), on ports the system
// chooses, stopped when the test ends. A missing binary fails the test:
// the Stripe paths must be tested.
//
// stripe-mock is stateless: it validates each request against Stripe's
// API and answers with a fixture (a new id, the request's amount), but it
// remembers nothing, replays no idempotency key and moves no money (a
// confirmed PaymentIntent comes back requires_payment_method).
package stripemock

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// URL starts a stripe-mock for t, stopped when t ends, and returns its
// HTTP base URL.
func URL(t testing.TB) string {
	t.Helper()
	url, stop, err := Start()
	if err != nil {
		t.Fatalf("stripe-mock: %v", err)
	}
	t.Cleanup(stop)
	return url
}

// Start starts a stripe-mock and returns its HTTP base URL and the call
// that stops it, for tests that share one process (from TestMain).
func Start() (url string, stop func(), err error) {
	bin, err := binary()
	if err != nil {
		return "", nil, err
	}
	cmd := exec.Command(bin, "-http-addr", "127.0.0.1:0", "-https-addr", "127.0.0.1:0")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("start %s: %w", bin, err)
	}
	stop = func() {
		cmd.Process.Kill()
		cmd.Wait()
	}
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if addr, ok := strings.CutPrefix(sc.Text(), "Listening for HTTP at address: "); ok {
				found <- addr
				break
			}
		}
		io.Copy(io.Discard, out) // keep the pipe drained
	}()
	select {
	case addr := <-found:
		return "http://" + addr, stop, nil
	case <-time.After(30 * time.Second):
		stop()
		return "", nil, fmt.Errorf("%s did not report its HTTP address within 30 s", bin)
	}
}

// binary is STRIPE_MOCK_BIN, or tools/bin/stripe-mock in the first folder
// up from the working directory that holds go.mod.
func binary() (string, error) {
	if bin := os.Getenv("STRIPE_MOCK_BIN"); bin != "" {
		return bin, nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			bin := filepath.Join(dir, "tools", "bin", "stripe-mock")
			if _, err := os.Stat(bin); err != nil {
				return "", fmt.Errorf("binary %s not found (%v): run `make test-deps` (or set STRIPE_MOCK_BIN)", bin, err)
			}
			return bin, nil
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", fmt.Errorf("no go.mod above the working directory: set STRIPE_MOCK_BIN")
		}
		dir = up
	}
}
