package store

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// BenchmarkBooking measures booking transactions per second with 1, 8 and
// 64 concurrent bookers. Booking k takes 1 device for 1 hour on offer
// k mod 64 (8 devices each) in hour slot k div 64 of the offers' 90-day
// window, for buyer k div 3 (the unpaid-hold limit), so bookings rarely
// meet and never conflict. Afterwards it checks that no slot of any offer
// is overbooked and that no booking failed, busy or otherwise.
func BenchmarkBooking(b *testing.B) {
	for _, bookers := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("bookers=%d", bookers), func(b *testing.B) {
			benchBooking(b, bookers)
		})
	}
}

func benchBooking(b *testing.B, bookers int) {
	const offers, devices = 64, 8
	ctx := context.Background()
	db, err := Open(ctx, filepath.Join(b.TempDir(), "bench.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	prov, err := db.CreateUser(ctx, market.User{Email: "prov@example.com", DisplayName: "P", IsProvider: true}, []byte("h"), t0)
	if err != nil {
		b.Fatal(err)
	}
	os := make([]market.Offer, offers)
	for i := range os {
		os[i] = listedOffer(b, db, prov.ID, devices)
	}
	slots := int(os[0].AvailableUntil.Sub(os[0].AvailableFrom) / time.Hour)
	buyers := bulkBuyers(b, db, b.N/market.MaxUnpaidHolds+1)

	var next atomic.Int64
	var busy, conflicts, failed atomic.Int64
	var firstErr sync.Once
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for range bookers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				k := int(next.Add(1) - 1)
				if k >= b.N {
					return
				}
				o := os[k%offers]
				p := piece(o, 1, o.AvailableFrom.Add(time.Duration((k/offers)%slots)*time.Hour), 1)
				_, err := db.CreateReservation(ctx, buyers[k/market.MaxUnpaidHolds], []market.ReservationPiece{p}, "{}", t0, hold)
				switch {
				case err == nil:
				case market.ErrorCode(err) == market.CodeConflict:
					conflicts.Add(1)
				case strings.Contains(err.Error(), "SQLITE_BUSY") || strings.Contains(err.Error(), "database is locked"):
					busy.Add(1)
					firstErr.Do(func() { b.Error(err) })
				default:
					failed.Add(1)
					firstErr.Do(func() { b.Error(err) })
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "bookings/s")
	b.ReportMetric(float64(conflicts.Load()), "conflicts")

	if busy.Load() != 0 || failed.Load() != 0 {
		b.Fatalf("%d busy errors, %d other failures", busy.Load(), failed.Load())
	}
	var overbooked, stored int
	if err := db.reader.QueryRowContext(ctx, `SELECT COUNT(*) FROM (SELECT offer_id, start_at FROM reservation_pieces
		GROUP BY offer_id, start_at HAVING SUM(devices) > ?) AS x`, devices).Scan(&overbooked); err != nil {
		b.Fatal(err)
	}
	if err := db.reader.QueryRowContext(ctx, `SELECT COUNT(*) FROM reservation_pieces`).Scan(&stored); err != nil {
		b.Fatal(err)
	}
	if overbooked != 0 || int64(stored) != int64(b.N)-conflicts.Load() {
		b.Fatalf("%d overbooked slots; %d pieces stored for %d bookings and %d conflicts", overbooked, stored, b.N, conflicts.Load())
	}
}

// bulkBuyers inserts n buyer accounts in one transaction and returns their ids.
func bulkBuyers(b *testing.B, db *DB, n int) []int64 {
	b.Helper()
	ctx := context.Background()
	tx, err := db.begin(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer tx.Rollback()
	ids := make([]int64, n)
	for i := range ids {
		if ids[i], err = insertUser(ctx, tx, market.User{Email: fmt.Sprintf("b%d@example.com", i), DisplayName: "B", IsBuyer: true, CreatedAt: t0}, []byte("h")); err != nil {
			b.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		b.Fatal(err)
	}
	return ids
}

// BenchmarkRawInsert is the yardstick for BenchmarkBooking: one single-row
// INSERT per immediate transaction, through the same writer connection
// and pragmas; "prepared" runs it through the statement cache the booking
// path uses, "plain" parses it every time.
func BenchmarkRawInsert(b *testing.B) {
	for _, prepared := range []bool{true, false} {
		name := "plain"
		if prepared {
			name = "prepared"
		}
		b.Run(name, func(b *testing.B) { benchRawInsert(b, prepared) })
	}
}

func benchRawInsert(b *testing.B, prepared bool) {
	const insert = `INSERT INTO raw_inserts (v, at) VALUES (?, ?)`
	ctx := context.Background()
	db, err := Open(ctx, filepath.Join(b.TempDir(), "raw.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	if _, err := db.writer.ExecContext(ctx, `CREATE TABLE raw_inserts (id INTEGER PRIMARY KEY, v INTEGER NOT NULL, at INTEGER NOT NULL)`); err != nil {
		b.Fatal(err)
	}
	var queries []string
	if prepared {
		queries = []string{insert}
	}
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		tx, err := db.beginPrepared(ctx, queries)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := tx.ExecContext(ctx, insert, i, unix(t0)); err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "inserts/s")
}
