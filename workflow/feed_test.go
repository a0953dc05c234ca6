package workflow

import (
	"slices"
	"testing"
	"time"
)

// TestFeedLagIsTheOldestUnappliedChange: the feed is down until it joins;
// then its lag is the age of the oldest change heard and not applied —
// kept through a batch being applied and a failed read put back — and 0
// once everything is applied; a loss makes it down again.
func TestFeedLagIsTheOldestUnappliedChange(t *testing.T) {
	q := newFeedQueue()
	if _, joined := q.lag(); joined {
		t.Fatal("a feed that never joined counts as joined")
	}
	q.joinedAfterReload()
	if lag, joined := q.lag(); !joined || lag != 0 {
		t.Fatalf("joined, nothing pending: lag %v joined %v", lag, joined)
	}
	first := time.Now()
	q.add(1)
	time.Sleep(20 * time.Millisecond)
	q.add(2)
	q.add(1)
	q.addCommitments(2) // already to be read in full
	q.addCommitments(4)
	q.addCommitments(4)
	listings, commitments := q.take()
	slices.Sort(listings)
	if !slices.Equal(listings, []int64{1, 2}) || !slices.Equal(commitments, []int64{4}) {
		t.Fatalf("took %v in full and %v for commitments, want 1 and 2, and 4, once each", listings, commitments)
	}
	ids := append(listings, commitments...)
	q.add(3) // arrives while the batch is applied
	if lag, _ := q.lag(); lag < 20*time.Millisecond || lag > time.Since(first) {
		t.Fatalf("lag while applying %v, want the age of offer 1's change (≥ 20ms, ≤ %v)", lag, time.Since(first))
	}
	q.done(ids) // the read failed: put back, still as old as offer 1's change
	if lag, _ := q.lag(); lag < 20*time.Millisecond {
		t.Fatalf("lag after a failed batch %v, want ≥ 20ms", lag)
	}
	if listings, commitments := q.take(); len(listings) != 4 || len(commitments) != 0 {
		t.Fatalf("retried %v in full and %v for commitments, want offers 1 to 4 in full", listings, commitments)
	}
	q.done(nil)
	if lag, joined := q.lag(); !joined || lag != 0 {
		t.Fatalf("all applied: lag %v joined %v", lag, joined)
	}
	q.lost()
	time.Sleep(5 * time.Millisecond)
	if lag, joined := q.lag(); joined || lag < 5*time.Millisecond {
		t.Fatalf("lost: lag %v joined %v, want down for ≥ 5ms", lag, joined)
	}
}
