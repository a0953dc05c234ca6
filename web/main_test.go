package web

import (
	"os"
	"testing"

	"github.com/gpumarket/gpumarket/store/pgtest"
)

// TestMain runs the tests on SQLite, or with GPUMARKET_TEST_DB=postgres on
// a throwaway PostgreSQL server (store/pgtest).
func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }
