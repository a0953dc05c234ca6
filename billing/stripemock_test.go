package billing

import (
	"os"
	"sync"
	"testing"

	"github.com/gpumarket/gpumarket/billing/stripemock"
)

// The tests share one stripe-mock process, started on first use on ports
// the system chooses and stopped by TestMain.
var mock struct {
	once sync.Once
	url  string
	stop func()
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if mock.stop != nil {
		mock.stop()
	}
	os.Exit(code)
}

// stripeMockURL returns the base URL of a running stripe-mock, starting it
// if needed. A missing binary fails the test: the Stripe paths must be
// tested, so run `make test-deps`.
func stripeMockURL(t *testing.T) string {
	t.Helper()
	mock.once.Do(func() { mock.url, mock.stop, mock.err = stripemock.Start() })
	if mock.err != nil {
		t.Fatalf("stripe-mock: %v", mock.err)
	}
	return mock.url
}
