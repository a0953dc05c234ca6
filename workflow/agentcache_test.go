package workflow

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
)

func quietHeartbeat8(seq int64) market.Heartbeat {
	devs := make([]market.HostDevice, 8)
	for i := range devs {
		devs[i] = market.HostDevice{Index: i, UUID: "GPU-" + string(rune('a'+i)), Name: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559, Healthy: true}
	}
	return market.Heartbeat{Seq: seq, AgentVersion: "1.0.0", Probe: "simulate", Devices: devs}
}

// TestHostTokenCacheFollowsRevocation: a host token authenticated once is
// served from memory, and a revocation — by the provider, or by a new token
// for the node — refuses it on the next request, with no call after the
// revocation but the store's own change feed.
func TestHostTokenCacheFollowsRevocation(t *testing.T) {
	f := newFixture(t, nil)
	tok, raw, err := f.wf.CreateHostToken(f.ctx, f.prov.ID, f.offer.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		got, err := f.wf.AuthenticateHost(f.ctx, raw)
		if err != nil || got.ID != tok.ID {
			t.Fatalf("authenticate: %+v, %v", got, err)
		}
	}
	// Revoked behind the workflow's back, through the store alone: the
	// feed still carries it.
	if err := f.db.RevokeHostToken(f.ctx, f.prov.ID, tok.ID, f.now); err != nil {
		t.Fatal(err)
	}
	if _, err := f.wf.AuthenticateHost(f.ctx, raw); market.ErrorCode(err) != market.CodeUnauthorized {
		t.Fatalf("revoked token: %v, want unauthorized", err)
	}

	// A new token for the node revokes the old one, which was cached.
	_, raw2, err := f.wf.CreateHostToken(f.ctx, f.prov.ID, f.offer.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.wf.AuthenticateHost(f.ctx, raw2); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.db.CreateHostToken(f.ctx, f.prov.ID, f.offer.ID, 0, f.now); err != nil {
		t.Fatal(err)
	}
	if _, err := f.wf.AuthenticateHost(f.ctx, raw2); market.ErrorCode(err) != market.CodeUnauthorized {
		t.Fatalf("replaced token: %v, want unauthorized", err)
	}
}

// TestAssignmentsCacheFollowsPayment: a node's assignments are served from
// memory until a payment on its offer, heard on the feed, makes them read
// again: the paid rental is there at once.
func TestAssignmentsCacheFollowsPayment(t *testing.T) {
	f := newFixture(t, nil)
	tok, raw, err := f.wf.CreateHostToken(f.ctx, f.prov.ID, f.offer.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if tok, err = f.wf.AuthenticateHost(f.ctx, raw); err != nil {
		t.Fatal(err)
	}
	f.now = t0.Add(time.Hour)
	before, err := f.wf.Assignments(f.ctx, tok)
	if err != nil || len(before.Assignments) != 0 {
		t.Fatalf("before: %+v, %v", before, err)
	}
	r := f.book(f.now)
	f.pay(r)
	after, err := f.wf.Assignments(f.ctx, tok)
	if err != nil {
		t.Fatal(err)
	}
	if len(after.Assignments) != 1 || after.Assignments[0].ReservationID != r.ID || after.Assignments[0].State != market.AccessInstall {
		t.Fatalf("after the payment: %+v", after.Assignments)
	}
	if after.Version == before.Version {
		t.Error("the version did not change with the assignments")
	}
	// At the rental's end (the clock alone) the assignment asks for removal
	// only once installed; without it there is nothing to do.
	f.now = r.Pieces[0].End
	ended, err := f.wf.Assignments(f.ctx, tok)
	if err != nil || len(ended.Assignments) != 0 {
		t.Fatalf("after the end: %+v, %v", ended.Assignments, err)
	}
}

// TestHeartbeatRefusedWhileWriterBehind: while maxHeartbeatWrites
// heartbeats wait for the writer, one that needs a write is refused with
// ErrHeartbeatsBehind and nothing of it is kept (the same seq is accepted
// later); one that is absorbed is not refused.
func TestHeartbeatRefusedWhileWriterBehind(t *testing.T) {
	f := newFixture(t, nil)
	tok, raw, err := f.wf.CreateHostToken(f.ctx, f.prov.ID, f.offer.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if tok, err = f.wf.AuthenticateHost(f.ctx, raw); err != nil {
		t.Fatal(err)
	}
	beat := func(seq int64) (bool, error) {
		hb := quietHeartbeat8(seq)
		if err := market.ValidateHeartbeat(&hb); err != nil {
			t.Fatal(err)
		}
		return f.wf.RecordHeartbeat(f.ctx, tok, hb)
	}
	f.wf.agent.writing.Store(maxHeartbeatWrites)
	if _, err := beat(1); !errors.Is(err, ErrHeartbeatsBehind) || market.ErrorCode(err) != market.CodeRateLimited {
		t.Fatalf("first heartbeat while behind: %v", err)
	}
	if st, err := f.db.ListProviderHosts(f.ctx, f.prov.ID, f.now); err != nil || len(st) != 1 || nodeReported(st[0].Nodes) {
		t.Fatalf("the refused heartbeat was recorded: %+v, %v", st, err)
	}
	f.wf.agent.writing.Store(0)
	if ok, err := beat(1); !ok || err != nil {
		t.Fatalf("the same heartbeat later: %v, %v", ok, err)
	}
	f.wf.agent.writing.Store(maxHeartbeatWrites)
	f.now = f.now.Add(10 * time.Second)
	if ok, err := beat(2); !ok || err != nil {
		t.Fatalf("a heartbeat absorbed while behind: %v, %v", ok, err)
	}
	c := f.wf.AgentCounts()
	if c.Refused != 1 || c.Written != 1 || c.Absorbed != 1 {
		t.Errorf("counts %+v, want 1 refused, 1 written, 1 absorbed", c)
	}
}

func nodeReported(nodes []store.HostNode) bool {
	for _, n := range nodes {
		if n.Reported {
			return true
		}
	}
	return false
}

// TestRestartAbsorbsAFirstHeartbeatThatChangesNothing: a replica that has
// not heard a node since it started compares the node's first heartbeat
// with the store's last one (store.NodeHeartbeatState): one sequence
// number later, the same report, soon after, it is absorbed — no write —
// and the batch write stores it; a replay is refused; a
// changed report, or one after a long silence, is written in full.
func TestRestartAbsorbsAFirstHeartbeatThatChangesNothing(t *testing.T) {
	f := newFixture(t, nil)
	_, raw, err := f.wf.CreateHostToken(f.ctx, f.prov.ID, f.offer.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	restart := func() (*Service, store.HostToken) {
		t.Helper()
		wf, err := New(f.ctx, Config{Billing: f.proc, PlatformFeeBP: feeBP, Now: func() time.Time { return f.now }}, f.db, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			t.Fatal(err)
		}
		tok, err := wf.AuthenticateHost(f.ctx, raw)
		if err != nil {
			t.Fatal(err)
		}
		return wf, tok
	}
	beat := func(wf *Service, tok store.HostToken, hb market.Heartbeat) bool {
		t.Helper()
		if err := market.ValidateHeartbeat(&hb); err != nil {
			t.Fatal(err)
		}
		ok, err := wf.RecordHeartbeat(f.ctx, tok, hb)
		if err != nil {
			t.Fatalf("heartbeat seq %d: %v", hb.Seq, err)
		}
		wf.FlushHeartbeats(f.ctx)
		return ok
	}
	wantStored := func(seq int64) {
		t.Helper()
		if last, err := f.db.HostLastSeq(f.ctx, f.offer.ID, 0); err != nil || last != seq {
			t.Errorf("stored seq %d, %v; want %d", last, err, seq)
		}
		hosts, err := f.db.ListProviderHosts(f.ctx, f.prov.ID, f.now)
		if err != nil || len(hosts) != 1 || len(hosts[0].Nodes) != 1 || !hosts[0].Nodes[0].Status.LastHeartbeatAt.Equal(f.now.Truncate(time.Second)) {
			t.Errorf("hosts %+v, %v; want the node's last heartbeat at %s", hosts, err, f.now)
		}
	}

	wf, tok := restart()
	beat(wf, tok, quietHeartbeat8(1))
	f.now = f.now.Add(10 * time.Second)
	beat(wf, tok, quietHeartbeat8(2))
	if c := wf.AgentCounts(); c.Written != 1 || c.Absorbed != 1 {
		t.Fatalf("before the restart: %+v, want 1 written, 1 absorbed", c)
	}

	wf, tok = restart()
	f.now = f.now.Add(10 * time.Second)
	if !beat(wf, tok, quietHeartbeat8(3)) {
		t.Fatal("the first heartbeat after the restart was not accepted")
	}
	if c := wf.AgentCounts(); c.Written != 0 || c.Absorbed != 1 {
		t.Errorf("the same report after a restart: %+v, want it absorbed, nothing written", c)
	}
	wantStored(3)

	wf, tok = restart()
	if beat(wf, tok, quietHeartbeat8(3)) {
		t.Error("a replay after a restart was accepted")
	}
	if c := wf.AgentCounts(); c.Written != 0 || c.Absorbed != 0 {
		t.Errorf("a replay after a restart: %+v, want nothing written or absorbed", c)
	}

	wf, tok = restart()
	f.now = f.now.Add(10 * time.Second)
	sick := quietHeartbeat8(4)
	sick.Devices[2].Healthy = false
	beat(wf, tok, sick)
	if c := wf.AgentCounts(); c.Written != 1 || c.Absorbed != 0 {
		t.Errorf("a changed report after a restart: %+v, want it written", c)
	}
	wantStored(4)

	wf, tok = restart()
	f.now = f.now.Add(10 * time.Second)
	beat(wf, tok, quietHeartbeat8(5)) // healthy again: a change, written
	wf, tok = restart()
	f.now = f.now.Add(10 * time.Minute)
	beat(wf, tok, quietHeartbeat8(6))
	if c := wf.AgentCounts(); c.Written != 1 || c.Absorbed != 0 {
		t.Errorf("the same report after a long silence and a restart: %+v, want it written", c)
	}
	wantStored(6)
}

// TestStaleAssignmentsServedWhileReadsAreBusy: a node's assignments aged
// past agentCacheMaxAge (nothing on the feed dropped them) are read again
// when a read slot is free; while both are busy they are served from
// memory up to twice that age rather than queued, and past it the request
// waits for a slot as before. A buyer's key added in the store directly
// (a change no feed carries here) shows which answer was read.
func TestStaleAssignmentsServedWhileReadsAreBusy(t *testing.T) {
	f := newFixture(t, nil)
	if f.db.Postgres() {
		// Memory serves only while the change feed is joined, as in serve.
		fctx, stop := context.WithCancel(f.ctx)
		followed := make(chan struct{})
		go func() { defer close(followed); f.wf.Follow(fctx) }()
		t.Cleanup(func() { stop(); <-followed })
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if _, joined := f.wf.FeedLag(); joined {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the change feed did not join")
			}
		}
	}
	tok, raw, err := f.wf.CreateHostToken(f.ctx, f.prov.ID, f.offer.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if tok, err = f.wf.AuthenticateHost(f.ctx, raw); err != nil {
		t.Fatal(err)
	}
	f.now = t0.Add(time.Hour)
	r := f.book(f.now)
	f.pay(r)
	keys := func(ctx context.Context) (int, error) {
		na, err := f.wf.Assignments(ctx, tok)
		if err != nil {
			return 0, err
		}
		if len(na.Assignments) != 1 {
			t.Fatalf("assignments %+v", na.Assignments)
		}
		return len(na.Assignments[0].SSHKeys), nil
	}
	read := f.now
	before, err := keys(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.db.AddSSHKey(f.ctx, f.buyer.ID, market.SSHKey{Type: "ssh-ed25519", Bits: 256, Fingerprint: "SHA256:stale-test", Comment: "late@example",
		Line: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIG01hsMAM7RpPI0A/8qBgEd+reLeY9Y/YXcvCKwu2ocf late@example"}, f.now); err != nil {
		t.Fatal(err)
	}
	for range cap(f.wf.agent.reads) {
		f.wf.agent.reads <- struct{}{}
	}
	short := func() (context.Context, context.CancelFunc) { return context.WithTimeout(f.ctx, 200*time.Millisecond) }
	f.now = read.Add(agentCacheMaxAge + agentCacheMaxAge/2) // past every entry's minute, within twice it
	ctx, cancel := short()
	if n, err := keys(ctx); err != nil || n != before {
		t.Errorf("stale, both slots busy: %d keys, %v; want the %d kept, served at once", n, err, before)
	}
	cancel()
	f.now = read.Add(3 * agentCacheMaxAge) // past twice the minute: waits for a slot
	ctx, cancel = short()
	if _, err := keys(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("past twice the minute, both slots busy: %v; want it to wait for a slot", err)
	}
	cancel()
	for range cap(f.wf.agent.reads) {
		<-f.wf.agent.reads
	}
	f.now = read.Add(agentCacheMaxAge + agentCacheMaxAge/2)
	if n, err := keys(f.ctx); err != nil || n != before+1 {
		t.Errorf("stale, a slot free: %d keys, %v; want %d, read again", n, err, before+1)
	}
}
