package store

import (
	"context"
	"testing"
)

// TestSchemaVersionAndOpeningWithoutMigrating: a migrated database is at
// the last migration this release embeds; opened again WithoutMigrating
// after its last record is removed, it stays one version behind (Open
// would apply the migration again). On both engines.
func TestSchemaVersionAndOpeningWithoutMigrating(t *testing.T) {
	ctx := context.Background()
	db, dsn := openTestDB(t)
	ms, err := migrations()
	if err != nil {
		t.Fatal(err)
	}
	last, before := ms[len(ms)-1].version, ms[len(ms)-2].version
	if have, known, err := db.SchemaVersion(ctx); err != nil || have != last || known != last {
		t.Fatalf("SchemaVersion of a migrated database = %d, %d, %v; want %d, %d", have, known, err, last, last)
	}
	if _, err := db.writer.ExecContext(ctx, `DELETE FROM schema_migrations WHERE version = ?`, last); err != nil {
		t.Fatal(err)
	}
	again, err := Open(ctx, dsn, WithoutMigrating())
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if have, known, err := again.SchemaVersion(ctx); err != nil || have != before || known != last {
		t.Errorf("SchemaVersion opened without migrating = %d, %d, %v; want %d, %d", have, known, err, before, last)
	}
}
