package store

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// heartbeatBatch queues jobs on the heartbeats' group commit behind a
// first one that holds the transaction, so that they all run in the next
// batch, in the order given; it returns each job's error.
func heartbeatBatch(t *testing.T, db *DB, jobs []func() error) []error {
	t.Helper()
	ctx := context.Background()
	started, release := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		first <- db.groupCommit(ctx, &db.heartbeats, heartbeatGroup, func(ctx context.Context, tx preparedTx) error {
			close(started)
			<-release
			return nil
		})
	}()
	<-started
	pending := func() int {
		db.heartbeats.mu.Lock()
		defer db.heartbeats.mu.Unlock()
		return len(db.heartbeats.pending)
	}
	errs := make([]chan error, len(jobs))
	for i, job := range jobs {
		errs[i] = make(chan error, 1)
		go func() {
			defer func() {
				if r := recover(); r != nil {
					errs[i] <- fmt.Errorf("panic reached the caller: %v", r)
				}
			}()
			errs[i] <- job()
		}()
		deadline := time.Now().Add(10 * time.Second)
		for pending() < i+1 {
			if time.Now().After(deadline) {
				t.Fatalf("%d heartbeats queued, want %d", pending(), i+1)
			}
			time.Sleep(time.Millisecond)
		}
	}
	close(release)
	out := make([]error, len(jobs))
	for i, c := range append(errs, first) {
		select {
		case err := <-c:
			if i < len(jobs) {
				out[i] = err
			} else if err != nil {
				t.Errorf("the first job: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("job %d still waiting after 10 s", i)
		}
	}
	return out
}

// TestHeartbeatGroupCommitKeepsEachHeartbeatAlone: heartbeats written in
// full in one shared transaction (RecordHeartbeatRun) are each judged on
// what the earlier ones of the batch left — a node's seq 6 then its seq 5
// in the same batch: 6 is stored, 5 is a replay — a heartbeat refused
// (seq jumping too far) or whose caller left before its turn stores
// nothing and spoils no other, and a heartbeat whose caller gives up while
// the batch runs is still committed with it.
func TestHeartbeatGroupCommitKeepsEachHeartbeatAlone(t *testing.T) {
	db := newDB(t)
	prov := createUser(t, db, "prov@example.com", true)
	toks := make([]HostToken, 6)
	offers := make([]market.Offer, 3)
	for i := range offers {
		offers[i] = twoNodeOffer(t, db, prov.ID)
		toks[2*i], _ = hostToken(t, db, prov.ID, offers[i].ID, 0)
		toks[2*i+1], _ = hostToken(t, db, prov.ID, offers[i].ID, 1)
	}
	at := t0.Add(time.Minute)
	type result struct {
		rec HeartbeatRecord
		err error
	}
	results := make([]result, 7)
	send := func(i int, tok HostToken, seq int64, ctx context.Context) func() error {
		return func() error {
			hb := market.Heartbeat{Seq: seq, AgentVersion: "1.0.0", Probe: "simulate", Devices: h100s(8)}
			if err := market.ValidateHeartbeat(&hb); err != nil {
				return err
			}
			rec, err := db.RecordHeartbeatRun(ctx, tok.ID, hb, at)
			results[i] = result{rec, err}
			return err
		}
	}
	gone, leave := context.WithCancel(context.Background())
	bg := context.Background()
	heartbeatBatch(t, db, []func() error{
		send(0, toks[0], 6, bg),
		send(1, toks[0], 5, bg),                                      // after 6 in the same batch: a replay
		send(2, toks[1], math.MaxInt64, bg),                          // jumps too far: refused
		func() error { leave(); return send(3, toks[2], 5, gone)() }, // left before its turn
		// gives up while it is written: committed all the same
		func() error {
			ctx, cancel := context.WithCancel(bg)
			return db.groupCommit(ctx, &db.heartbeats, heartbeatGroup, func(ctx context.Context, tx preparedTx) error {
				hb := market.Heartbeat{Seq: 5, AgentVersion: "1.0.0", Probe: "simulate", Devices: h100s(8)}
				var err error
				results[4].rec, err = recordHeartbeat(ctx, tx, toks[3].ID, hb, at)
				cancel()
				return err
			})
		},
		send(5, toks[4], 5, bg),
		send(6, toks[5], 5, bg),
	})

	if r := results[0]; r.err != nil || !r.rec.Accepted || r.rec.OfferID != offers[0].ID || r.rec.Node != 0 {
		t.Errorf("node 0's seq 6: %+v", r)
	}
	if r := results[1]; r.err != nil || r.rec.Accepted {
		t.Errorf("node 0's seq 5 after its 6 in the batch: %+v; want not accepted", r)
	}
	if r := results[2]; market.ErrorCode(r.err) != market.CodeInvalid || !strings.Contains(r.err.Error(), "seq jumps too far") {
		t.Errorf("a seq jumping too far: %v; want it refused", r.err)
	}
	if r := results[3]; !errors.Is(r.err, context.Canceled) {
		t.Errorf("a heartbeat whose caller left before its turn: %v; want context.Canceled", r.err)
	}
	if !results[4].rec.Accepted {
		t.Errorf("the heartbeat whose caller gave up while it ran: %+v", results[4])
	}
	for _, i := range []int{5, 6} {
		if r := results[i]; r.err != nil || !r.rec.Accepted {
			t.Errorf("heartbeat %d: %+v", i, r)
		}
	}

	ctx := context.Background()
	for i, want := range []int64{6, 0, 0, 5, 5, 5} {
		o, node := offers[i/2].ID, i%2
		seq, err := db.HostLastSeq(ctx, o, node)
		if err != nil || seq != want {
			t.Errorf("offer %d node %d: last seq %d, %v; want %d", o, node, seq, err, want)
		}
		runs, err := db.ListHeartbeatRuns(ctx, o, node, t0, at.Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		if wantRuns := min(want, 1); int64(len(runs)) != wantRuns || (len(runs) == 1 && (runs[0].Heartbeats != 1 || runs[0].LastSeq != want)) {
			t.Errorf("offer %d node %d: runs %+v; want %d run of one heartbeat", o, node, runs, wantRuns)
		}
	}
	// The refused node's token is where it was: its next heartbeat is its first.
	if !heartbeat(t, db, toks[1].ID, 1, h100s(8), at.Add(10*time.Second)) {
		t.Error("the refused node's next heartbeat was not accepted")
	}
}

// TestHeartbeatGroupCommitPanicStoresNothingOfItsBatch: a write that
// panics in the heartbeats' shared transaction (a crash of the batch)
// fails every heartbeat of its batch with an internal error and stores
// none of them — no token's seq moves, no node's status or history is
// written — and the queue goes on: the same heartbeats sent again are
// written, in order.
func TestHeartbeatGroupCommitPanicStoresNothingOfItsBatch(t *testing.T) {
	db := newDB(t)
	prov := createUser(t, db, "prov@example.com", true)
	o := twoNodeOffer(t, db, prov.ID)
	a, _ := hostToken(t, db, prov.ID, o.ID, 0)
	b, _ := hostToken(t, db, prov.ID, o.ID, 1)
	at := t0.Add(time.Minute)
	send := func(tok HostToken, seq int64) func() error {
		return func() error {
			hb := market.Heartbeat{Seq: seq, AgentVersion: "1.0.0", Probe: "simulate", Devices: h100s(8)}
			if err := market.ValidateHeartbeat(&hb); err != nil {
				return err
			}
			_, err := db.RecordHeartbeatRun(context.Background(), tok.ID, hb, at)
			return err
		}
	}
	errs := heartbeatBatch(t, db, []func() error{
		send(a, 5),
		func() error {
			return db.groupCommit(context.Background(), &db.heartbeats, heartbeatGroup, func(ctx context.Context, tx preparedTx) error {
				panic("a bug in a heartbeat")
			})
		},
		send(b, 5),
	})
	for i, err := range errs {
		if err == nil || strings.Contains(err.Error(), "reached the caller") || market.ErrorCode(err) != market.CodeInternal {
			t.Errorf("heartbeat %d of the panicking batch: %v; want an internal error, the panic recovered in the store", i, err)
		}
	}
	ctx := context.Background()
	for node := range 2 {
		if seq, err := db.HostLastSeq(ctx, o.ID, node); err != nil || seq != 0 {
			t.Errorf("node %d after the panicking batch: last seq %d, %v; want nothing stored", node, seq, err)
		}
		if runs, err := db.ListHeartbeatRuns(ctx, o.ID, node, t0, at.Add(time.Hour)); err != nil || len(runs) != 0 {
			t.Errorf("node %d after the panicking batch: runs %+v, %v; want none", node, runs, err)
		}
	}
	errs = heartbeatBatch(t, db, []func() error{send(a, 5), send(b, 5), send(a, 6)})
	for i, err := range errs {
		if err != nil {
			t.Errorf("heartbeat %d sent again: %v", i, err)
		}
	}
	for node, want := range []int64{6, 5} {
		if seq, err := db.HostLastSeq(ctx, o.ID, node); err != nil || seq != want {
			t.Errorf("node %d sent again: last seq %d, %v; want %d", node, seq, err, want)
		}
	}
	if runs, err := db.ListHeartbeatRuns(ctx, o.ID, 0, t0, at.Add(time.Hour)); err != nil || len(runs) != 1 || runs[0].Heartbeats != 2 ||
		runs[0].FirstSeq != 5 || runs[0].LastSeq != 6 {
		t.Errorf("node 0's history: %+v, %v; want one run of seq 5 and 6", runs, err)
	}
}
