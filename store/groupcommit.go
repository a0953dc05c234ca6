package store

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
)

// Group commit for bookings.
//
// This is the package's one deliberate exception to "one exported method is
// one transaction": concurrent CreateReservation calls on the same handle
// share one immediate write transaction, each booking inside its own
// SAVEPOINT, and the batch commits once. With SQLite the cost of a booking
// is dominated by writing its pages to the WAL at commit; bookings arriving
// together dirty the same table and index pages, so one commit for the batch
// writes each page once instead of once per booking.
//
// Every booking keeps its own all-or-nothing semantics and its own
// capacity re-check: a booking that fails (conflict, hold limit, anything)
// is rolled back to its savepoint and only it is refused; later bookings in
// the batch see the earlier ones' rows, exactly as if they had committed
// first; and when the batch's commit fails, every booking in it fails and
// nothing of any is stored. A caller returns only after the commit that
// holds its booking, so durability is unchanged.
//
// A panic inside a batch (a bug in a booking's statements or in a market
// rule it calls) rolls the whole batch back and fails each of its bookings
// with an internal error, the one that panicked carrying the stack; the
// queue then moves on as after any batch, so later bookings are served.
//
// Batching needs no timer: while one batch runs, new bookings queue; when
// it ends the first queued caller becomes the leader and runs the next
// batch with whatever has queued by then. A lone booker runs a batch of one,
// without savepoints.
//
// The heartbeats written in full (RecordHeartbeatRun: a node's first, or
// one that changed) have a queue of their own, run the same way with one
// difference (groupKind.commitLate): a heartbeat whose caller gave up
// while its batch ran still commits with the batch, rather than the batch
// being rolled back and run again without it. A heartbeat is a fact the
// agent sent, stored or not; a fleet reconnecting at once whose requests
// time out together would otherwise keep the writer redoing the same
// batch. A caller whose context has ended before its turn is still
// skipped.
//
// On PostgreSQL a batch locks, before its first booking, what all its
// bookings' checks read (each job's bookingLocks, their union): the write
// lock shared and, exclusive, a key per offer booked, per buyer booked for
// and per template whose use is counted, all in one sorted order
// (bookingLocks.keys), so batches on other replicas that book other offers
// for other buyers run at the same time, one that shares an offer or a
// buyer waits for this one to commit, and no two wait for each other in a
// circle. Any other write transaction takes the write lock exclusive
// (begin) and so runs between batches, never beside one. A job that cannot
// name its offers and buyers before it runs asks for the whole lock, and
// its batch takes the write lock exclusive; so does every heartbeat batch
// (groupCommit).

// bookingLocks is what a booking's transaction must hold on PostgreSQL
// before the booking's reads: a lock per offer whose capacity it checks
// and books, per buyer whose holds it counts (market.MaxUnpaidHolds) or
// whose reservations it reads to extend, and per runtime template whose
// use it counts — a row two bookings may both update, which, locked by the
// first in the middle of its batch, would otherwise have the second wait
// there, where batches can wait for each other in a circle. With no offers
// (the zero value) it is the whole lock: the write lock exclusive, as
// every other write takes it.
type bookingLocks struct {
	offers, buyers, templates []int64
}

// whole reports whether l is the whole lock.
func (l bookingLocks) whole() bool { return len(l.offers) == 0 }

// batchLocks is what a batch must hold: the union of its jobs' locks, or
// the whole lock when one of them needs it.
func batchLocks(batch []*bookingJob) bookingLocks {
	var l bookingLocks
	for _, j := range batch {
		if j.locks.whole() {
			return bookingLocks{}
		}
		l.offers = append(l.offers, j.locks.offers...)
		l.buyers = append(l.buyers, j.locks.buyers...)
		l.templates = append(l.templates, j.locks.templates...)
	}
	return l
}

// keys are the advisory lock keys of l's offers, buyers and templates
// (offerLockSpace, buyerLockSpace, templateLockSpace), sorted, each once.
func (l bookingLocks) keys() []int64 {
	keys := make([]int64, 0, len(l.offers)+len(l.buyers)+len(l.templates))
	for _, space := range []struct {
		space int64
		ids   []int64
	}{{offerLockSpace, l.offers}, {buyerLockSpace, l.buyers}, {templateLockSpace, l.templates}} {
		for _, id := range space.ids {
			keys = append(keys, space.space<<32|int64(uint32(id)))
		}
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}

// maxBookingBatch bounds a batch, so one commit (and the latency of the
// batch's first caller) stays small.
const maxBookingBatch = 64

// bookingJob is one CreateReservation call in the queue.
type bookingJob struct {
	ctx   context.Context
	locks bookingLocks                                   // the locks its statements need (PostgreSQL)
	run   func(ctx context.Context, tx preparedTx) error // the booking's statements
	done  chan bookingResult                             // buffered: a lead signal, then the result
	// answered is set when the leader has sent the result (the leader's
	// goroutine only), so a panic answers only the rest of the batch.
	answered bool
}

// answer sends the job its result. Each job is answered once.
func (j *bookingJob) answer(err error) {
	j.answered = true
	j.done <- bookingResult{err: err}
}

type bookingResult struct {
	lead bool // this caller now leads the next batch
	err  error
}

// bookingQueue is a group-commit queue of one DB handle (its bookings, its
// heartbeats). Invariant: if pending is not empty, leading is true.
type bookingQueue struct {
	mu      sync.Mutex
	pending []*bookingJob
	leading bool
}

// book runs run inside a write transaction shared with concurrent
// bookings, holding at least locks on PostgreSQL, and returns its error, or
// the batch's commit error, after the batch has committed or rolled back.
// run must read and write nothing that locks does not cover beyond what
// other bookings leave alone (see bookingLocks).
func (db *DB) book(ctx context.Context, locks bookingLocks, run func(ctx context.Context, tx preparedTx) error) error {
	return db.groupCommitLocked(ctx, &db.bookings, bookingGroup, locks, run)
}

// groupKind is what differs between the group-commit queues.
type groupKind struct {
	op      string   // names the writes in errors
	queries []string // prepared on the writer for the batch's transaction
	// commitLate: a job whose caller's context ended while its batch ran
	// commits with the batch (heartbeats), instead of being undone and the
	// batch run again without it (bookings).
	commitLate bool
}

var (
	bookingGroup   = groupKind{op: "create reservation", queries: bookingQueries}
	heartbeatGroup = groupKind{op: "record heartbeat", queries: heartbeatQueries, commitLate: true}
)

// groupCommit runs run in a write transaction shared with the other jobs
// of queue q, as book does, under the whole lock (bookingLocks{}: on
// PostgreSQL the write lock exclusive, as every write but a booking).
func (db *DB) groupCommit(ctx context.Context, q *bookingQueue, kind groupKind, run func(ctx context.Context, tx preparedTx) error) error {
	return db.groupCommitLocked(ctx, q, kind, bookingLocks{}, run)
}

// groupCommitLocked is groupCommit with the locks the job needs.
func (db *DB) groupCommitLocked(ctx context.Context, q *bookingQueue, kind groupKind, locks bookingLocks, run func(ctx context.Context, tx preparedTx) error) error {
	job := &bookingJob{ctx: ctx, locks: locks, run: run, done: make(chan bookingResult, 1)}
	q.mu.Lock()
	q.pending = append(q.pending, job)
	if q.leading {
		q.mu.Unlock()
		if res := <-job.done; !res.lead {
			return deadlineFirst(ctx, res.err)
		}
	} else {
		q.leading = true
		q.mu.Unlock()
	}

	// This caller leads: its job is first in the queue.
	q.mu.Lock()
	n := min(len(q.pending), maxBookingBatch)
	batch := make([]*bookingJob, n)
	copy(batch, q.pending)
	q.pending = append(q.pending[:0], q.pending[n:]...)
	q.mu.Unlock()

	db.runBatch(kind, batch)

	q.mu.Lock()
	if len(q.pending) > 0 {
		q.pending[0].done <- bookingResult{lead: true}
	} else {
		q.leading = false
	}
	q.mu.Unlock()
	return deadlineFirst(ctx, (<-job.done).err)
}

// deadlineFirst puts the caller's own context error in front of err when
// the booking failed after the caller's context ended (the batch's
// transaction was given up), so the caller sees why.
func deadlineFirst(ctx context.Context, err error) error {
	if err != nil && ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
		return fmt.Errorf("%w: %w", ctx.Err(), err)
	}
	return err
}

// runBatch runs the jobs in one immediate transaction and sends each
// its result. The transaction does not follow any one caller's
// cancellation (it serves them all); a caller whose context has ended
// before its turn is skipped. A panic is answered, never passed on: the
// leader must go on to hand the queue to the next batch.
func (db *DB) runBatch(kind groupKind, batch []*bookingJob) {
	var running *bookingJob // the job whose statements are running
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		// Deferred before the rollback below, so this runs after it.
		others := fmt.Errorf("store: %s: batch of %d rolled back after a panic: %v", kind.op, len(batch), r)
		for _, j := range batch {
			switch {
			case j.answered:
			case j == running:
				j.answer(fmt.Errorf("store: %s: panic, batch of %d rolled back: %v\n%s", kind.op, len(batch), r, debug.Stack()))
			default:
				j.answer(others)
			}
		}
	}()
	ctx, done := batchContext(batch)
	defer done()
	tx, err := db.beginPrepared(ctx, kind.queries, batchLocks(batch))
	if err != nil {
		for _, j := range batch {
			j.answer(err)
		}
		return
	}
	defer tx.Rollback()

	single := len(batch) == 1
	var booked []*bookingJob
	failAll := func(err error, rest []*bookingJob) {
		for _, j := range append(booked, rest...) {
			j.answer(err)
		}
	}
	for i, j := range batch {
		if err := j.ctx.Err(); err != nil {
			j.answer(err)
			continue
		}
		if !single {
			if _, err := tx.ExecContext(ctx, savepointQuery); err != nil {
				failAll(err, batch[i:])
				return
			}
		}
		running = j
		err := db.checkFence(j.ctx, tx)
		if err == nil {
			err = j.run(ctx, tx)
		}
		if err == nil && !kind.commitLate {
			// A booking whose caller's deadline passed while it ran is
			// undone: its caller is answered that it failed, so it must
			// not commit.
			err = j.ctx.Err()
		}
		running = nil
		if err != nil {
			if !single {
				// Undo this booking only; if that fails the transaction is
				// unusable and nothing of the batch may commit.
				if _, rbErr := tx.ExecContext(ctx, rollbackToSavepointQuery); rbErr != nil {
					failAll(rbErr, batch[i:])
					return
				}
				if _, relErr := tx.ExecContext(ctx, releaseSavepointQuery); relErr != nil {
					failAll(relErr, batch[i:])
					return
				}
			}
			j.answer(err)
			continue
		}
		if !single {
			if _, err := tx.ExecContext(ctx, releaseSavepointQuery); err != nil {
				failAll(err, batch[i:])
				return
			}
		}
		booked = append(booked, j)
	}
	if len(booked) == 0 {
		return
	}
	// The batch commits only if every booking in it can still be answered
	// (see above); one whose deadline passed since makes the batch run
	// again without it.
	if late := expired(booked); len(late) > 0 && !kind.commitLate {
		tx.Rollback()
		for _, j := range late {
			j.answer(j.ctx.Err())
		}
		if rest := pending(booked); len(rest) > 0 {
			db.runBatch(kind, rest)
		}
		return
	}
	if err := tx.Commit(); err != nil {
		failAll(err, nil)
		return
	}
	for _, j := range booked {
		j.answer(nil)
	}
}

// batchContext is the context of a batch's transaction: it ends once every
// job's context has ended — waiting for the write lock and the transaction
// itself are given up when no caller is left to answer — and carries no
// fence (each job's own is checked in the transaction).
func batchContext(batch []*bookingJob) (context.Context, func()) {
	ctx, cancel := context.WithCancel(withoutFence(context.WithoutCancel(batch[0].ctx)))
	var left atomic.Int64
	left.Store(int64(len(batch)))
	stops := make([]func() bool, len(batch))
	for i, j := range batch {
		stops[i] = context.AfterFunc(j.ctx, func() {
			if left.Add(-1) == 0 {
				cancel()
			}
		})
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel()
	}
}

// expired returns the jobs whose caller's context has ended.
func expired(jobs []*bookingJob) []*bookingJob {
	var out []*bookingJob
	for _, j := range jobs {
		if j.ctx.Err() != nil {
			out = append(out, j)
		}
	}
	return out
}

// pending returns the jobs not answered yet.
func pending(jobs []*bookingJob) []*bookingJob {
	var out []*bookingJob
	for _, j := range jobs {
		if !j.answered {
			out = append(out, j)
		}
	}
	return out
}

// The savepoint around each booking of a batch.
const (
	savepointQuery           = `SAVEPOINT booking`
	rollbackToSavepointQuery = `ROLLBACK TO booking`
	releaseSavepointQuery    = `RELEASE booking`
)
