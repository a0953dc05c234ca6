package billing

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// The tests share one stripe-mock process, started on first use on ports
// the system chooses and stopped by TestMain.
var mock struct {
	once sync.Once
	cmd  *exec.Cmd
	url  string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if mock.cmd != nil && mock.cmd.Process != nil {
		mock.cmd.Process.Kill()
		mock.cmd.Wait()
	}
	os.Exit(code)
}

// stripeMockURL returns the base URL of a running stripe-mock, starting it
// if needed. A missing binary fails the test: the Stripe paths must be
// tested, so run `make test-deps`.
func stripeMockURL(t *testing.T) string {
	t.Helper()
	mock.once.Do(func() { mock.url, mock.err = startStripeMock() })
	if mock.err != nil {
		t.Fatalf("stripe-mock: %v", mock.err)
	}
	return mock.url
}

func startStripeMock() (string, error) {
	bin := os.Getenv("STRIPE_MOCK_BIN")
	if bin == "" {
		bin = filepath.Join("..", "tools", "bin", "stripe-mock")
	}
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("binary %s not found (%v): run `make test-deps` (or set STRIPE_MOCK_BIN)", bin, err)
	}
	// Port zero on both listeners: no clash with other test processes.
	cmd := exec.Command(bin, "-http-addr", "127.0.0.1:0", "-https-addr", "127.0.0.1:0")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("start %s: %w", bin, err)
	}
	mock.cmd = cmd
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
		return "http://" + addr, nil
	case <-time.After(30 * time.Second):
		return "", fmt.Errorf("%s did not report its HTTP address within 30 s", bin)
	}
}
