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
	"github.com/gpumarket/gpumarket/store/pgtest"
)

// BenchmarkBooking measures booking transactions per second with 1, 8 and
// 64 concurrent bookers, on each engine (benchEngines) in the same run.
// Booking k takes 1 device for 1 hour on offer k mod 64 (8 devices each)
// in hour slot k div 64 of the offers' 90-day window, for buyer k div 3
// (the unpaid-hold limit), so bookings rarely meet and never conflict.
// Afterwards it checks that no slot of any offer is overbooked and that no
// booking failed, busy or otherwise.
func BenchmarkBooking(b *testing.B) {
	for _, engine := range benchEngines {
		for _, bookers := range []int{1, 8, 64} {
			b.Run(fmt.Sprintf("engine=%s/bookers=%d", engine, bookers), func(b *testing.B) {
				benchBooking(b, engine, bookers, bookChecked)
			})
		}
	}
}

// BenchmarkBookingReplicas measures bookings of different offers by
// different buyers — booker w books offer w (of 64) for buyers of its own,
// each booking in an hour of its own, so no two bookings share an offer or
// a buyer and none conflicts — by 64 bookers on PostgreSQL through one
// replica's store handle, and spread over three handles (booker w on
// handle w mod 3, each with its own pools, as three `gpumarket serve`
// have), on one durable server; each with the write lock as bookings take
// it (the global lock shared, a lock per offer and per buyer exclusive:
// bookChecked, CreateReservation) and, as the yardstick, with the global
// lock exclusive as every other write takes it and as bookings took it
// before (bookWholeLock). If the global lock is what limits bookings,
// three replicas book no faster than one under it and faster with the
// narrowed lock. The four alternate in phases of 8 bookings per booker on
// one database, so a machine whose speed drifts during the run weighs on
// all alike; it reports each one's bookings/s and, per lock, the ratio of
// three replicas to one in percent.
//
//	go test ./store/ -run '^$' -bench BookingReplicas -benchtime 6144x
func BenchmarkBookingReplicas(b *testing.B) {
	bb := newBookingBench(b, "postgres")
	defer bb.db.Close()
	three := []*DB{bb.db}
	for range 2 {
		h, err := Open(context.Background(), bb.dsn)
		if err != nil {
			b.Fatal(err)
		}
		defer h.Close()
		three = append(three, h)
	}
	const phase = benchOffers * 8
	runs := []struct {
		name    string
		handles []*DB
		save    bookFunc
		took    time.Duration
		booked  int
	}{
		{"global-1", []*DB{bb.db}, bookWholeLock, 0, 0},
		{"global-3", three, bookWholeLock, 0, 0},
		{"narrow-1", []*DB{bb.db}, bookChecked, 0, 0},
		{"narrow-3", three, bookChecked, 0, 0},
	}
	b.ResetTimer()
	for done, i := 0, 0; done < b.N; i++ {
		next := min(done+phase, b.N)
		run := &runs[i%len(runs)]
		bb.handles = run.handles
		start := time.Now()
		bb.bookOwn(b, next-done, run.save)
		run.took += time.Since(start)
		run.booked += next - done
		done = next
	}
	b.StopTimer()
	rate := make([]float64, len(runs))
	for i, r := range runs {
		rate[i] = float64(r.booked) / r.took.Seconds()
		b.ReportMetric(rate[i], "bookings/s-"+r.name)
	}
	b.ReportMetric(100*rate[1]/rate[0], "3-to-1-%-global")
	b.ReportMetric(100*rate[3]/rate[2], "3-to-1-%-narrow")
	bb.check(b, b.N)
}

// bookWholeLock books as CreateReservation does — the same statements
// (holdReservation, notifyHeld) through the same group commit — but its
// batch takes the whole lock (bookingLocks{}): the write lock exclusive,
// as every other write takes it and every booking took it before bookings
// had locks of their own. The yardstick of BenchmarkBookingReplicas.
func bookWholeLock(ctx context.Context, db *DB, buyerID int64, _ market.Offer, p market.ReservationPiece) error {
	r, offerIDs, byOffer := newHold(buyerID, []market.ReservationPiece{p}, t0, hold)
	r.RequestJSON = "{}"
	return db.book(ctx, bookingLocks{}, func(ctx context.Context, tx preparedTx) error {
		if err := holdReservation(ctx, tx, &r, offerIDs, byOffer, t0); err != nil {
			return err
		}
		return notifyHeld(ctx, tx, r, t0)
	})
}

// benchEngines are the engines the booking benchmarks run on: SQLite, the
// embedded default and the yardstick for the other's figures, and
// PostgreSQL on a throwaway server that keeps PostgreSQL's durability
// (pgtest.DurableDatabase: fsync and synchronous_commit on, as SQLite's
// synchronous(FULL) here), so both acknowledge a booking only once it is
// on disk.
var benchEngines = []string{"sqlite", "postgres"}

// BenchmarkBookingYardstick is the yardstick for BenchmarkBooking: the same
// bookers, buyers, offers and pieces, and the same write transaction —
// through the same group commit (one immediate transaction per batch, a
// savepoint per booking, the same prepared statements) inserting the same
// reservation and piece rows with insertReservation — but without the
// checks: no hold-limit count, no offer lookup, no commitments read, no
// FitsCapacity. The schedule never conflicts and never reaches the hold
// limit, so both store exactly the same rows, and the gap between the two
// is the price of the capacity check alone. (The single-row insert
// transaction of BenchmarkBookingDurability writes fewer pages and commits
// once per row, so its ratio to booking says nothing about the check; it
// says what durable acknowledgement costs.)
func BenchmarkBookingYardstick(b *testing.B) {
	for _, engine := range benchEngines {
		for _, bookers := range []int{1, 8, 64} {
			b.Run(fmt.Sprintf("engine=%s/bookers=%d", engine, bookers), func(b *testing.B) {
				benchBooking(b, engine, bookers, insertUnchecked)
			})
		}
	}
}

// BenchmarkBookingDurability compares bookings with the durability
// yardstick: single-row insert transactions, one at a time — BEGIN
// IMMEDIATE, one row into a bare table of two integers, COMMIT — each a
// trip through the WAL and, with synchronous(FULL), one sync to disk. Both
// run on one database opened by Open, so with the same writer connection
// and the same pragmas, in alternating phases (16 bookings per booker,
// then a quarter as many single-row transactions, at least 16), so a disk
// whose sync time drifts during the run weighs on both alike. It reports bookings/s
// (BenchmarkBooking's work, through the same group commit), rows/s and
// their ratio in percent. A booking writes far more than a row, but the
// bookings that arrive together share one commit and one sync, so with
// enough bookers the ratio can pass 100.
func BenchmarkBookingDurability(b *testing.B) {
	for _, bookers := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("bookers=%d", bookers), func(b *testing.B) {
			ctx := context.Background()
			bb := newBookingBench(b, "sqlite")
			defer bb.db.Close()
			if _, err := bb.db.writer.ExecContext(ctx, `CREATE TABLE single_rows (id INTEGER PRIMARY KEY, v INTEGER NOT NULL)`); err != nil {
				b.Fatal(err)
			}
			stmt, err := bb.db.writer.PrepareContext(ctx, `INSERT INTO single_rows (v) VALUES (?)`)
			if err != nil {
				b.Fatal(err)
			}
			defer stmt.Close()
			bookingsPerPhase := 16 * bookers
			rowsPerPhase := max(16, bookingsPerPhase/4)
			rows := 0
			var rowTime, bookTime time.Duration
			b.ResetTimer()
			for done := 0; done < b.N; {
				start := time.Now()
				for range rowsPerPhase {
					tx, err := bb.db.begin(ctx)
					if err != nil {
						b.Fatal(err)
					}
					if _, err := tx.StmtContext(ctx, stmt).ExecContext(ctx, rows); err != nil {
						b.Fatal(err)
					}
					if err := tx.Commit(); err != nil {
						b.Fatal(err)
					}
					rows++
				}
				rowTime += time.Since(start)
				next := min(done+bookingsPerPhase, b.N)
				start = time.Now()
				bb.book(b, done, next, bookers, bookChecked)
				bookTime += time.Since(start)
				done = next
			}
			b.StopTimer()
			bookingRate, rowRate := float64(b.N)/bookTime.Seconds(), float64(rows)/rowTime.Seconds()
			b.ReportMetric(bookingRate, "bookings/s")
			b.ReportMetric(rowRate, "rows/s")
			b.ReportMetric(100*bookingRate/rowRate, "%-of-rows/s")
			bb.check(b, b.N)
			var stored int
			if err := bb.db.reader.QueryRowContext(ctx, `SELECT COUNT(*) FROM single_rows`).Scan(&stored); err != nil || stored != rows {
				b.Fatalf("%d rows stored for %d transactions (%v)", stored, rows, err)
			}
		})
	}
}

// bookFunc stores one booking of piece p on offer o for buyerID.
type bookFunc func(ctx context.Context, db *DB, buyerID int64, o market.Offer, p market.ReservationPiece) error

// bookChecked books through the real path, CreateReservation.
func bookChecked(ctx context.Context, db *DB, buyerID int64, _ market.Offer, p market.ReservationPiece) error {
	_, err := db.CreateReservation(ctx, buyerID, []market.ReservationPiece{p}, "{}", t0, hold)
	return err
}

// insertUnchecked writes what CreateReservation would write for the same
// piece (the provider and cancellation policy it would read from the offer
// are taken from o in memory), in the same group-committed transaction,
// without reading anything to check it.
func insertUnchecked(ctx context.Context, db *DB, buyerID int64, o market.Offer, p market.ReservationPiece) error {
	p.ProviderID, p.FreeCancelHours, p.CancelFeeBP = o.ProviderID, o.FreeCancelHours, o.CancelFeeBP
	p.Start, p.End = truncate(p.Start), truncate(p.End)
	r := market.Reservation{
		BuyerID: buyerID, State: market.ReservationHeld, Pieces: []market.ReservationPiece{p},
		AmountCents: p.AmountCents, HoldExpiresAt: truncate(t0.Add(hold)), RequestJSON: "{}",
		CreatedAt: truncate(t0), UpdatedAt: truncate(t0),
	}
	return db.book(ctx, bookingLocks{offers: []int64{o.ID}, buyers: []int64{buyerID}}, func(ctx context.Context, tx preparedTx) error {
		_, err := insertReservation(ctx, tx, r)
		return err
	})
}

func benchBooking(b *testing.B, engine string, bookers int, save bookFunc) {
	bb := newBookingBench(b, engine)
	defer bb.db.Close()
	b.ResetTimer()
	start := time.Now()
	bb.book(b, 0, b.N, bookers, save)
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "bookings/s")
	b.ReportMetric(float64(bb.conflicts.Load()), "conflicts")
	bb.check(b, b.N)
}

// bookingBench is the database and schedule of the booking benchmarks:
// 64 offers of 8 devices and enough buyers for b.N bookings.
type bookingBench struct {
	db                      *DB
	dsn                     string
	handles                 []*DB // when set, booker w books through handles[w mod len]
	offers                  []market.Offer
	slots                   int
	buyers                  []int64
	busy, conflicts, failed atomic.Int64
	firstErr                sync.Once
	own                     [benchOffers]int // bookings made so far by each booker of bookOwn
}

const benchOffers, benchDevices = 64, 8

// newBookingBench opens a new database on engine ("sqlite" or "postgres",
// benchEngines) with the offers and buyers.
func newBookingBench(b *testing.B, engine string) *bookingBench {
	ctx := context.Background()
	dsn := filepath.Join(b.TempDir(), "bench.db")
	if engine == "postgres" {
		dsn = pgtest.DurableDatabase(b)
	}
	db, err := Open(ctx, dsn)
	if err != nil {
		b.Fatal(err)
	}
	prov, err := db.CreateUser(ctx, market.User{Email: "prov@example.com", DisplayName: "P", IsProvider: true}, []byte("h"), t0)
	if err != nil {
		b.Fatal(err)
	}
	bb := &bookingBench{db: db, dsn: dsn, offers: make([]market.Offer, benchOffers)}
	for i := range bb.offers {
		bb.offers[i] = listedOffer(b, db, prov.ID, benchDevices)
	}
	bb.slots = int(bb.offers[0].AvailableUntil.Sub(bb.offers[0].AvailableFrom) / time.Hour)
	// Enough for either schedule: book's (booking k for buyer k div 3) and
	// bookOwn's (booker w's j-th for buyer (j div 3)·64 + w).
	bb.buyers = bulkBuyers(b, db, b.N/market.MaxUnpaidHolds+benchOffers+1)
	return bb
}

// bookOwn makes n bookings with one booker per offer: booker w makes its
// share of the n (n/64, one more for the first n mod 64) on offer w, its
// j-th booking (counted across calls) in hour j of the offer's window for
// buyer (j div 3)·64 + w, so bookers share no offer and no buyer, and no
// buyer has more than market.MaxUnpaidHolds holds.
func (bb *bookingBench) bookOwn(b *testing.B, n int, save bookFunc) {
	ctx := context.Background()
	var wg sync.WaitGroup
	for w := range benchOffers {
		db := bb.db
		if len(bb.handles) > 0 {
			db = bb.handles[w%len(bb.handles)]
		}
		count := n / benchOffers
		if w < n%benchOffers {
			count++
		}
		first := bb.own[w]
		bb.own[w] += count
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := bb.offers[w]
			for j := first; j < first+count; j++ {
				p := piece(o, 1, o.AvailableFrom.Add(time.Duration(j%bb.slots)*time.Hour), 1)
				bb.count(b, save(ctx, db, bb.buyers[(j/market.MaxUnpaidHolds)*benchOffers+w], o, p))
			}
		}()
	}
	wg.Wait()
}

// count counts a booking's outcome: a conflict, a busy database or another
// failure (the first of those fails the benchmark).
func (bb *bookingBench) count(b *testing.B, err error) {
	switch {
	case err == nil:
	case market.ErrorCode(err) == market.CodeConflict:
		bb.conflicts.Add(1)
	case strings.Contains(err.Error(), "SQLITE_BUSY") || strings.Contains(err.Error(), "database is locked"):
		bb.busy.Add(1)
		bb.firstErr.Do(func() { b.Error(err) })
	default:
		bb.failed.Add(1)
		bb.firstErr.Do(func() { b.Error(err) })
	}
}

// book makes bookings from to to (exclusive) with bookers concurrent
// bookers, counting conflicts and failures.
func (bb *bookingBench) book(b *testing.B, from, to, bookers int, save bookFunc) {
	ctx := context.Background()
	var next atomic.Int64
	next.Store(int64(from))
	var wg sync.WaitGroup
	for w := range bookers {
		db := bb.db
		if len(bb.handles) > 0 {
			db = bb.handles[w%len(bb.handles)]
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				k := int(next.Add(1) - 1)
				if k >= to {
					return
				}
				o := bb.offers[k%benchOffers]
				p := piece(o, 1, o.AvailableFrom.Add(time.Duration((k/benchOffers)%bb.slots)*time.Hour), 1)
				bb.count(b, save(ctx, db, bb.buyers[k/market.MaxUnpaidHolds], o, p))
			}
		}()
	}
	wg.Wait()
}

// check fails the benchmark on a busy or failed booking, an overbooked
// slot, or a number of stored pieces other than n bookings less conflicts.
func (bb *bookingBench) check(b *testing.B, n int) {
	ctx := context.Background()
	if bb.busy.Load() != 0 || bb.failed.Load() != 0 {
		b.Fatalf("%d busy errors, %d other failures", bb.busy.Load(), bb.failed.Load())
	}
	var overbooked, stored int
	if err := bb.db.reader.QueryRowContext(ctx, `SELECT COUNT(*) FROM (SELECT offer_id, start_at FROM reservation_pieces
		GROUP BY offer_id, start_at HAVING SUM(devices) > ?) AS x`, benchDevices).Scan(&overbooked); err != nil {
		b.Fatal(err)
	}
	if err := bb.db.reader.QueryRowContext(ctx, `SELECT COUNT(*) FROM reservation_pieces`).Scan(&stored); err != nil {
		b.Fatal(err)
	}
	if overbooked != 0 || int64(stored) != int64(n)-bb.conflicts.Load() {
		b.Fatalf("%d overbooked slots; %d pieces stored for %d bookings and %d conflicts", overbooked, stored, n, bb.conflicts.Load())
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
