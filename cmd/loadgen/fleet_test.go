package main

import (
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// fleetHarness is a fleet server in this process with simulated agents on
// its first nodes: the first push ones hold the long-poll, the rest
// heartbeat only (agents from before the long-poll).
type fleetHarness struct {
	fs   *fleetServer
	rec  *fleetRecorder
	stop func()
}

func startFleetHarness(tb testing.TB, push, old int, interval time.Duration) *fleetHarness {
	tb.Helper()
	ctx := context.Background()
	fs, err := startFleetServer(ctx, filepath.Join(tb.TempDir(), "fleet.db"), 200, push+old, "127.0.0.1:0", false, io.Discard)
	if err != nil {
		tb.Fatal(err)
	}
	rec := newFleetRecorder()
	actx, cancel := context.WithCancel(ctx)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: push + old + 8}, Timeout: 30 * time.Second}
	var wg sync.WaitGroup
	for i, n := range fs.Nodes {
		a := newSimAgent(n, fs.URL, client, i < push, interval, rec)
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.run(actx, time.Duration(i)*interval/time.Duration(len(fs.Nodes)))
		}()
	}
	h := &fleetHarness{fs: fs, rec: rec, stop: func() { cancel(); wg.Wait(); fs.close() }}
	tb.Cleanup(h.stop)
	return h
}

// payAndWait pays a rental on node and returns the time from the payment
// to the agent's installed report, and the reservation.
func (h *fleetHarness) payAndWait(tb testing.TB, node int, limit time.Duration) (time.Duration, int64) {
	tb.Helper()
	paid, err := h.fs.pay(context.Background(), node)
	if err != nil {
		tb.Fatal(err)
	}
	at, ok := h.rec.waitInstalled(context.Background(), paid.PieceID, limit)
	if !ok {
		tb.Fatalf("node %d: keys not installed within %s of the payment", node, limit)
	}
	return time.Duration(at - paid.PaidAt), paid.ReservationID
}

// TestFleetPushAndOldAgents runs the real server with two agents holding
// the long-poll and two old ones: a paid rental reaches a long-poll agent
// well within a second and an old one at its next heartbeat; and
// heartbeats that repeat themselves are absorbed, not written one by one.
func TestFleetPushAndOldAgents(t *testing.T) {
	const interval = 3 * time.Second
	h := startFleetHarness(t, 2, 2, interval)
	time.Sleep(interval + 500*time.Millisecond) // every agent's first heartbeat
	for node := range 4 {
		took, resID := h.payAndWait(t, node, 3*interval)
		switch {
		case node < 2 && took > time.Second:
			t.Errorf("long-poll agent: keys installed %s after the payment, want under 1 s", took)
		case node >= 2 && took > interval+time.Second:
			t.Errorf("old agent: keys installed %s after the payment, want by its next heartbeat (%s)", took, interval)
		}
		_ = resID
	}
	time.Sleep(interval)
	c := h.fs.wf.AgentCounts()
	if c.Absorbed == 0 || c.Written >= c.Heartbeats {
		t.Errorf("heartbeats %+v: repeats should be absorbed", c)
	}
}

func nodeRange(from, to int) []int {
	var out []int
	for i := from; i < to; i++ {
		out = append(out, i)
	}
	return out
}

// BenchmarkPayToKeys measures the time from a recorded payment to the
// agent's report that the buyer's keys are installed, at the default
// 10 s heartbeat interval, through the heartbeat alone (an agent from
// before the long-poll) and through the long-poll, in the same run; the
// long-poll's figures carry its p99 as a ratio to the heartbeat path's.
// Each iteration pays an hour's rental on a node of its kind not rented
// yet (32 of each: at most 31 iterations after the first). Run it with a
// fixed count, e.g.
//
//	go test -run '^$' -bench PayToKeys -benchtime 20x ./cmd/loadgen
func BenchmarkPayToKeys(b *testing.B) {
	const interval = market.HeartbeatInterval
	const perKind = 32
	h := startFleetHarness(b, perKind, perKind, interval)
	time.Sleep(interval + time.Second)
	var heartbeatP99 time.Duration
	rng := rand.New(rand.NewPCG(1, 2))
	for _, mode := range []*struct {
		name string
		free []int
	}{{"heartbeat", nodeRange(perKind, 2*perKind)}, {"longpoll", nodeRange(0, perKind)}} {
		b.Run(mode.name, func(b *testing.B) {
			var lat []time.Duration
			for range b.N {
				if len(mode.free) == 0 {
					b.Fatalf("every %s node is rented: run at most %d iterations", mode.name, perKind-1)
				}
				// A node at random, so the payment falls anywhere in its
				// heartbeat interval (the agents start spread over it).
				i := rng.IntN(len(mode.free))
				node := mode.free[i]
				mode.free = slices.Delete(mode.free, i, i+1)
				took, _ := h.payAndWait(b, node, 3*interval)
				lat = append(lat, took)
			}
			slices.Sort(lat)
			p99 := quantile(lat, 0.99)
			b.ReportMetric(float64(quantile(lat, 0.5))/1e6, "p50-ms")
			b.ReportMetric(float64(p99)/1e6, "p99-ms")
			b.ReportMetric(float64(lat[len(lat)-1])/1e6, "max-ms")
			if mode.name == "heartbeat" {
				heartbeatP99 = p99
			} else if heartbeatP99 > 0 {
				b.ReportMetric(float64(p99)/float64(heartbeatP99), "p99-ratio-to-heartbeat")
			}
		})
	}
}
