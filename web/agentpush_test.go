package web

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/agentapi"
)

// agentGet sends a GET to the agent API with a host token.
func (a *testApp) agentGet(token, path string) response {
	a.t.Helper()
	req, err := http.NewRequest(http.MethodGet, a.srv.URL+path, nil)
	if err != nil {
		a.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	return read(a.t, resp)
}

func (a *testApp) longPoll(token, known string, wait int) (agentapi.Assignments, time.Duration) {
	a.t.Helper()
	began := time.Now()
	r := a.agentGet(token, fmt.Sprintf("/agent/v1/assignments?wait=%d&known=%s", wait, known))
	if r.status != http.StatusOK {
		a.t.Fatalf("long-poll: %d %s", r.status, r.body)
	}
	var out agentapi.Assignments
	if err := json.Unmarshal([]byte(r.body), &out); err != nil {
		a.t.Fatalf("long-poll reply %q: %v", r.body, err)
	}
	return out, time.Since(began)
}

// TestAgentLongPollAndReported: the heartbeat's answer offers the
// long-poll with the assignments' version; the long-poll answers at once
// when the agent's version is not the current one, holds for its wait
// when it is, and refuses a wait that is not a number; once the agent has
// reported the keys installed, the assignment says so (a new version).
func TestAgentLongPollAndReported(t *testing.T) {
	app := newBillingApp(t)
	prov := app.client()
	prov.signUp("push@example.com", true)
	o := app.ownOffer(prov.userID())
	buyer := app.client()
	buyer.signUp("push-buyer@example.com", false)
	r := app.bookAndPayQuery(buyer, trainingQuery())
	p := r.Pieces[0]
	if p.OfferID != o.ID {
		t.Fatalf("booked offer %d, want %d", p.OfferID, o.ID)
	}
	token := createHostToken(t, prov, o.ID, 0)

	var hb agentapi.HeartbeatResponse
	if res := app.agentPost(token, "/agent/v1/heartbeat", heartbeatBody(1, 8)); res.status != http.StatusOK {
		t.Fatalf("heartbeat %d %s", res.status, res.body)
	} else if err := json.Unmarshal([]byte(res.body), &hb); err != nil {
		t.Fatal(err)
	}
	if !hb.Push || hb.Version == "" || len(hb.Assignments) != 0 {
		t.Fatalf("before the start: %+v", hb)
	}
	got, took := app.longPoll(token, hb.Version, 1)
	if got.Changed || got.Version != hb.Version || len(got.Assignments) != 0 || took < 900*time.Millisecond {
		t.Errorf("unchanged long-poll: %+v after %s, want changed false after its 1 s wait", got, took)
	}
	if res := app.agentGet(token, "/agent/v1/assignments?wait=soon"); res.status != http.StatusBadRequest {
		t.Errorf("wait=soon: %d %s", res.status, res.body)
	}
	if res := app.agentGet("gph_notatoken", "/agent/v1/assignments?wait=1"); res.status != http.StatusUnauthorized {
		t.Errorf("bad token: %d %s", res.status, res.body)
	}

	app.tick(p.Start)
	got, took = app.longPoll(token, hb.Version, 10)
	if !got.Changed || got.Version == hb.Version || len(got.Assignments) != 1 || took > 2*time.Second {
		t.Fatalf("after the start: %+v after %s, want the install at once", got, took)
	}
	a := got.Assignments[0]
	if a.PieceID != p.ID || a.State != agentapi.StateInstall || a.Reported || len(a.SSHKeys) != 0 && a.SSHKeys[0] == "" {
		t.Fatalf("assignment %+v", a)
	}
	if res := app.agentPost(token, "/"+agentapi.AssignmentPath(p.ID, agentapi.ReportInstalled),
		map[string]any{"host": "203.0.113.7", "port": 22, "user": "gpu"}); res.status != http.StatusOK {
		t.Fatalf("installed: %d %s", res.status, res.body)
	}
	after, _ := app.longPoll(token, got.Version, 10)
	if !after.Changed || len(after.Assignments) != 1 || !after.Assignments[0].Reported {
		t.Fatalf("after the installed report: %+v", after)
	}
}

// TestRepeatedHeartbeatsAbsorbed: a heartbeat reporting what the last one
// did is not written until the batch is flushed, and then as if each had
// been: the node's last sequence number.
func TestRepeatedHeartbeatsAbsorbed(t *testing.T) {
	app := newBillingApp(t)
	prov := app.client()
	prov.signUp("absorb@example.com", true)
	o := app.ownOffer(prov.userID())
	token := createHostToken(t, prov, o.ID, 0)
	ctx := context.Background()
	status := func() int64 {
		t.Helper()
		offers, err := app.db.ListProviderHosts(ctx, prov.userID(), app.clock.now())
		if err != nil || len(offers) != 1 || len(offers[0].Nodes) != 1 {
			t.Fatalf("hosts %+v %v", offers, err)
		}
		return offers[0].Nodes[0].Status.LastSeq
	}
	for seq := int64(1); seq <= 3; seq++ {
		app.clock.set(testNow.Add(time.Duration(seq) * 10 * time.Second))
		if rep := app.beat(token, heartbeatBody(seq, 8)); !rep.Accepted {
			t.Fatalf("heartbeat %d not accepted", seq)
		}
	}
	if seq := status(); seq != 1 {
		t.Errorf("before the flush: last seq %d; want 1 (2 and 3 absorbed)", seq)
	}
	if rep := app.beat(token, heartbeatBody(2, 8)); rep.Accepted {
		t.Error("a replay of an absorbed heartbeat was accepted")
	}
	before := app.handler.wf.AgentCounts()
	app.handler.wf.FlushHeartbeats(ctx)
	if seq := status(); seq != 3 {
		t.Errorf("after the flush: last seq %d; want 3", seq)
	}
	if c := app.handler.wf.AgentCounts().Sub(before); c.Flushes != 1 || c.Flushed != 1 || c.Heartbeats != 0 {
		t.Errorf("flush counts %+v", c)
	}
	// A gap (heartbeat 4 lost) costs a read, not a write: the store holds
	// nothing later than 3, so 5 is absorbed.
	app.clock.set(testNow.Add(50 * time.Second))
	if rep := app.beat(token, heartbeatBody(5, 8)); !rep.Accepted {
		t.Fatal("heartbeat 5 not accepted")
	}
	if seq := status(); seq != 3 {
		t.Errorf("after the gap: last seq %d, want 3 (5 absorbed)", seq)
	}
	// A changed report is written at once, after what was absorbed.
	app.clock.set(testNow.Add(60 * time.Second))
	body := heartbeatBody(6, 8)
	body["devices"].([]map[string]any)[3]["healthy"] = false
	app.beat(token, body)
	if seq := status(); seq != 6 {
		t.Errorf("a changed heartbeat: last seq %d, want 6", seq)
	}
	if c := app.handler.wf.AgentCounts(); c.Heartbeats != 6 || c.Written != 2 || c.Absorbed != 3 {
		t.Errorf("counts %+v: want 6 heartbeats (one a replay), 1 and 6 written, 2, 3 and 5 absorbed", c)
	}
}
