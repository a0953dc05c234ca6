package store

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// BenchmarkHeartbeatWrites measures heartbeats written in full
// (RecordHeartbeatRun: a node's first, or one that changed) on SQLite for
// 64 nodes of 32 two-node offers: one node after the other (each its own
// transaction, as every heartbeat was before the group commit), and the
// 64 at once (sharing transactions). Each iteration runs both phases, so a
// machine whose speed drifts weighs on both alike; it reports each one's
// heartbeats/s and the ratio of together to one by one.
//
//	go test ./store/ -run '^$' -bench HeartbeatWrites -benchtime 20x
func BenchmarkHeartbeatWrites(b *testing.B) {
	ctx := context.Background()
	db, err := Open(ctx, filepath.Join(b.TempDir(), "bench.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	prov, err := db.CreateUser(ctx, market.User{Email: "prov@example.com", DisplayName: "Prov", IsProvider: true}, []byte("hash"), t0)
	if err != nil {
		b.Fatal(err)
	}
	const nodes = 64
	var toks []HostToken
	for range nodes / 2 {
		in := validOffer(prov.ID)
		in.Nodes, in.NetworkID = 2, "ethernet-100"
		o, err := db.CreateOffer(ctx, in, t0)
		if err != nil {
			b.Fatal(err)
		}
		if err := db.ReviewOffer(ctx, o.ID, market.ReviewApproved, "", t0); err != nil {
			b.Fatal(err)
		}
		for node := range 2 {
			tok, _, err := db.CreateHostToken(ctx, prov.ID, o.ID, node, t0)
			if err != nil {
				b.Fatal(err)
			}
			toks = append(toks, tok)
		}
	}
	seq := int64(0)
	devices := [2][]market.HostDevice{h100s(8), h100s(8)}
	devices[1][3].Healthy = false // alternate health, so each heartbeat starts a history run
	write := func(tok HostToken, i int, at time.Time) {
		hb := market.Heartbeat{Seq: seq, AgentVersion: "1.0.0", Probe: "simulate", Devices: devices[i%2]}
		if rec, err := db.RecordHeartbeatRun(ctx, tok.ID, hb, at); err != nil || !rec.Accepted {
			b.Errorf("heartbeat seq %d: %+v, %v", seq, rec, err)
		}
	}
	var took [2]time.Duration
	b.ResetTimer()
	for i := range b.N {
		at := t0.Add(time.Duration(i) * time.Minute)
		seq++
		start := time.Now()
		for _, tok := range toks {
			write(tok, i, at)
		}
		took[0] += time.Since(start)
		seq++
		start = time.Now()
		var wg sync.WaitGroup
		for _, tok := range toks {
			wg.Add(1)
			go func() { defer wg.Done(); write(tok, i+1, at.Add(30*time.Second)) }()
		}
		wg.Wait()
		took[1] += time.Since(start)
	}
	b.StopTimer()
	one := float64(b.N*nodes) / took[0].Seconds()
	together := float64(b.N*nodes) / took[1].Seconds()
	b.ReportMetric(one, "heartbeats/s-one-by-one")
	b.ReportMetric(together, "heartbeats/s-64-at-once")
	b.ReportMetric(together/one, "ratio")
}
