package store

import (
	"context"
	"path/filepath"
	"sync"
	"testing"

	"github.com/gpumarket/gpumarket/store/pgtest"
)

// Replicas started together on an empty database all open it: the
// migrations are applied once and every Open succeeds (on PostgreSQL a
// concurrent CREATE TABLE IF NOT EXISTS of the migrations table failed
// with a duplicate key in pg_type).
func TestOpenConcurrentlyOnAnEmptyDatabase(t *testing.T) {
	for round := range 3 {
		dsn := pgtest.DSN(t, filepath.Join(t.TempDir(), "m.db"))
		var wg sync.WaitGroup
		for i := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				db, err := Open(context.Background(), dsn)
				if err != nil {
					t.Errorf("round %d, opener %d: %v", round, i, err)
					return
				}
				defer db.Close()
				var applied, distinct int
				if err := db.reader.QueryRowContext(context.Background(),
					`SELECT COUNT(*), COUNT(DISTINCT version) FROM schema_migrations`).Scan(&applied, &distinct); err != nil {
					t.Error(err)
					return
				}
				if ms, _ := migrations(); applied != len(ms) || distinct != applied {
					t.Errorf("round %d, opener %d: %d migrations recorded (%d distinct), want %d once each", round, i, applied, distinct, len(ms))
				}
			}()
		}
		wg.Wait()
	}
}
