package web

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
)

// TestMeasuredOutagesSettle: missed heartbeats and fewer healthy devices,
// measured from the agent's heartbeats, become incidents reported by the
// agent that the settled statement credits, reconciled.
func TestMeasuredOutagesSettle(t *testing.T) {
	app := newBillingApp(t)
	prov := app.client()
	prov.signUp("measured@example.com", true)
	o := app.ownOffer(prov.userID())
	buyer := app.client()
	buyer.signUp("measured-buyer@example.com", false)
	q := trainingQuery()
	q.Set("workload.hours", "2")
	r := app.bookAndPayQuery(buyer, q)
	p := r.Pieces[0]
	if p.OfferID != o.ID || !p.End.Equal(p.Start.Add(2*time.Hour)) || p.Devices != 8 {
		t.Fatalf("piece %+v", p)
	}
	app.connectPayouts(prov)
	token := createHostToken(t, prov, o.ID, 0)
	s := p.Start
	at := func(d time.Duration, seq int64, healthy int) {
		t.Helper()
		app.clock.set(s.Add(d))
		body := heartbeatBody(seq, 8)
		for i := healthy; i < 8; i++ {
			body["devices"].([]map[string]any)[i]["healthy"] = false
		}
		app.beat(token, body)
	}

	app.tick(s)
	at(0, 1, 8)
	app.tick(s.Add(10 * time.Minute)) // silent: a host failure from the last heartbeat
	mustContain(t, hostBlock(t, prov.get("/provider/hosts").body, o.ID, 0), `data-testid="host-status">offline<`)
	at(20*time.Minute, 2, 8)                // recovery
	at(20*time.Minute+30*time.Second, 3, 6) // two devices unhealthy…
	at(21*time.Minute+20*time.Second, 4, 8) // …for 50 seconds
	app.tick(s.Add(22 * time.Minute))
	// Silent from then to the end; the settlement follows at once.
	app.tick(p.End.Add(time.Minute))

	ctx := context.Background()
	incs, err := app.db.ListIncidents(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	type want struct {
		kind       market.IncidentKind
		start, end time.Time
		devices    int
	}
	wants := []want{
		{market.IncidentHostFailure, s, s.Add(20 * time.Minute), 8},
		{market.IncidentFewerDevices, s.Add(20*time.Minute + 30*time.Second), s.Add(21*time.Minute + 20*time.Second), 2},
		{market.IncidentHostFailure, s.Add(21*time.Minute + 20*time.Second), p.End, 8},
	}
	if len(incs) != len(wants) {
		t.Fatalf("incidents %+v", incs)
	}
	var lost int64
	for i, w := range wants {
		g := incs[i]
		if g.Kind != w.kind || !g.Start.Equal(w.start) || !g.End.Equal(w.end) || g.DevicesAffected != w.devices ||
			g.ReportedBy != store.ReportedByAgent || !g.Acknowledged {
			t.Errorf("incident %d = %+v, want %+v", i, g, w)
		}
		lost += int64(w.devices) * int64(w.end.Sub(w.start)/time.Second)
	}

	// The settled statement credits the device-time lost, pro rata (wall
	// clock, no uptime tier, cap 100 %): rounded half away from zero.
	st, err := app.db.FindSettlement(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	reserved := int64(p.Devices) * int64(p.End.Sub(p.Start)/time.Second)
	refund := market.Cents((2*int64(r.AmountCents)*lost + reserved) / (2 * reserved))
	if st.State != store.SettlementDone || st.RefundCents != refund || refund == 0 {
		t.Fatalf("settlement %s, refund %s; want done, %s (%d of %d device-seconds lost)", st.State, st.RefundCents, refund, lost, reserved)
	}
	es := app.ledger(r.ID)
	if sumKind(es, market.EntryRefund) != refund {
		t.Fatalf("refunded %s, want %s", sumKind(es, market.EntryRefund), refund)
	}
	statement := buyer.get(fmt.Sprintf("/reservations/%d/statement", r.ID)).body
	mustContain(t, statement, refund.String(), "Host failure, 8 of 8 devices", "Fewer devices than booked, 2 of 8 devices")
	page := buyer.get(fmt.Sprintf("/reservations/%d", r.ID)).body
	mustContain(t, page, "the provider&#39;s agent (measured)", "Measured by the provider&#39;s agent on node 0")
	mustNotContain(t, page, ">you<")
	booking := prov.get(fmt.Sprintf("/provider/bookings/%d", r.ID)).body
	mustContain(t, booking, "the provider&#39;s agent (measured)")
	requireReconciled(t, app.testApp)
}

// TestServerDowntimeIsNotAHostFailure (issue 23): the market's own
// downtime is not billed to the provider. The server stops for 90 s while
// a rental runs; the agent, backing off, reconnects 60 s after the
// restart: no host failure. A silence while the market is up is still one,
// from its last heartbeat.
func TestServerDowntimeIsNotAHostFailure(t *testing.T) {
	app := newBillingApp(t)
	prov := app.client()
	prov.signUp("uptime@example.com", true)
	o := app.ownOffer(prov.userID())
	buyer := app.client()
	buyer.signUp("uptime-buyer@example.com", false)
	q := trainingQuery()
	q.Set("workload.hours", "2")
	r := app.bookAndPayQuery(buyer, q)
	p := r.Pieces[0]
	app.connectPayouts(prov)
	token := createHostToken(t, prov, o.ID, 0)
	s := p.Start
	ctx := context.Background()
	// up records that server process replica, started at started, was up
	// from then until until, as its background loop does.
	up := func(replica string, started, until time.Time) {
		t.Helper()
		for at := started; !at.After(until); at = at.Add(market.ServerBeatInterval) {
			if err := app.db.RecordServerBeat(ctx, replica, started, at); err != nil {
				t.Fatal(err)
			}
		}
	}
	seq := int64(0)
	beatAt := func(d time.Duration) {
		t.Helper()
		seq++
		if seq > 6 {
			time.Sleep(time.Second / agentRatePerSecond) // the host token's rate limit runs on the wall clock
		}
		app.clock.set(s.Add(d))
		app.beat(token, heartbeatBody(seq, 8))
	}
	up("a", s.Add(-time.Minute), s.Add(10*time.Second))
	app.tick(s)
	beatAt(0)
	beatAt(10 * time.Second)
	// The server is down from s+10s to s+100s; the agent's backoff brings it
	// back 60 s after the restart.
	up("b", s.Add(100*time.Second), s.Add(130*time.Second))
	app.tick(s.Add(130 * time.Second))
	up("b", s.Add(100*time.Second), s.Add(160*time.Second))
	beatAt(160 * time.Second)
	for d := 215 * time.Second; d <= 10*time.Minute; d += 55 * time.Second {
		up("b", s.Add(100*time.Second), s.Add(d))
		beatAt(d)
	}
	app.tick(s.Add(10 * time.Minute))
	incs, err := app.db.ListIncidents(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(incs) != 0 {
		t.Fatalf("the server's restart became incidents: %+v", incs)
	}
	// A real silence with the market up: a host failure from the last
	// heartbeat to the next.
	up("b", s.Add(100*time.Second), s.Add(20*time.Minute))
	app.tick(s.Add(15 * time.Minute))
	beatAt(20 * time.Minute)
	app.tick(s.Add(20*time.Minute + time.Second))
	incs, err = app.db.ListIncidents(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(incs) != 1 || incs[0].Kind != market.IncidentHostFailure || !incs[0].Start.Equal(s.Add(10*time.Minute)) || !incs[0].End.Equal(s.Add(20*time.Minute)) {
		t.Fatalf("incidents %+v, want one host failure from +10m to +20m", incs)
	}
	app.tick(p.End.Add(time.Minute))
	requireReconciled(t, app.testApp)
}
