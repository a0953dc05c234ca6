package main

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/store"
)

// TestDemoHistoryNeverOverbooks seeds a fresh demo database and checks,
// straight from its tables, that no offer ever has more devices committed
// at once than it has: for every piece that held its devices (booked and
// not cancelled or expired), at the instant each piece of the same offer
// starts, the pieces running then add up to at most the offer's devices.
// The peak of a set of half-open intervals is reached at one of their
// starts, so checking every start checks every instant.
func TestDemoHistoryNeverOverbooks(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "demo.db")
	db, err := store.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	now := time.Date(2026, 3, 18, 9, 41, 0, 0, time.UTC)
	if _, err := seedDemo(ctx, db, now); err != nil {
		t.Fatal(err)
	}

	raw, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	rows, err := raw.QueryContext(ctx, `
		SELECT p.offer_id, o.devices_per_node * o.nodes, p.devices, p.start_at, p.end_at
		FROM reservation_pieces p
		JOIN offers o ON o.id = p.offer_id
		JOIN reservations r ON r.id = p.reservation_id
		WHERE r.state IN ('confirmed', 'active', 'completed', 'settled')
		   OR (r.state = 'held' AND r.hold_expires_at > ?)`, now.Unix())
	if err != nil {
		t.Fatal(err)
	}
	type piece struct{ devices, start, end int64 }
	pieces := map[int64][]piece{}
	capacity := map[int64]int64{}
	n := 0
	for rows.Next() {
		var offer, devices int64
		var p piece
		if err := rows.Scan(&offer, &devices, &p.devices, &p.start, &p.end); err != nil {
			t.Fatal(err)
		}
		pieces[offer] = append(pieces[offer], p)
		capacity[offer] = devices
		n++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	// The history is months of trading on every demo offer; an empty or
	// thin one would pass the check below without showing anything.
	if n < 500 || len(pieces) < 15 {
		t.Fatalf("the demo history has %d pieces on %d offers; want a real history", n, len(pieces))
	}

	overbooked := 0
	for offer, ps := range pieces {
		for _, at := range ps {
			var used int64
			for _, p := range ps {
				if p.start <= at.start && at.start < p.end {
					used += p.devices
				}
			}
			if used > capacity[offer] {
				overbooked++
				if overbooked <= 5 {
					t.Errorf("offer %d: %d of its %d devices committed at %s", offer, used, capacity[offer],
						time.Unix(at.start, 0).UTC().Format(time.RFC3339))
				}
			}
		}
	}
	if overbooked > 0 {
		t.Errorf("%d overbooked moments in the demo history", overbooked)
	}
}
