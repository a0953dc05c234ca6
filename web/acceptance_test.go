package web

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
)

// TestAcceptanceUnderperformanceAndAgentFigure: the agent is asked for the
// acceptance test when the rental starts; a result below the guaranteed
// figure opens an underperformance incident that the statement credits,
// and the offer shows the figure measured by agent.
func TestAcceptanceUnderperformanceAndAgentFigure(t *testing.T) {
	app := newBillingApp(t)
	prov := app.client()
	prov.signUp("acceptance@example.com", true)
	o := app.ownOfferTerms(prov.userID(), func(o *market.Offer) {
		o.Figures = []market.Figure{{Kind: market.FigureBF16TFLOPS, Value: 900, Basis: market.FigureGuaranteed}}
	})
	buyer := app.client()
	buyer.signUp("acceptance-buyer@example.com", false)
	q := trainingQuery()
	q.Set("workload.hours", "2")
	r := app.bookAndPayQuery(buyer, q)
	p := r.Pieces[0]
	if p.OfferID != o.ID {
		t.Fatalf("booked offer %d, want %d", p.OfferID, o.ID)
	}
	app.connectPayouts(prov)
	token := createHostToken(t, prov, o.ID, 0)
	mustNotContain(t, buyer.get(fmt.Sprintf("/offers/%d", o.ID)).body, `data-testid="agent-figures"`)

	app.tick(p.Start)
	rep := app.beat(token, heartbeatBody(1, 8))
	if len(rep.Assignments) != 1 || !rep.Assignments[0].Acceptance {
		t.Fatalf("acceptance not asked for: %+v", rep.Assignments)
	}
	path := fmt.Sprintf("/agent/v1/assignments/%d/acceptance", p.ID)
	if res := app.agentPost(token, path, map[string]any{"metric": "flops", "per_device": []float64{1}}); res.status != http.StatusBadRequest {
		t.Errorf("unknown metric: %d %s", res.status, res.body)
	}
	// Another provider's agent cannot report on this piece.
	otherProv := app.client()
	otherProv.signUp("acceptance-other@example.com", true)
	o2 := app.ownOffer(otherProv.userID())
	stranger := createHostToken(t, otherProv, o2.ID, 0)
	body := map[string]any{"metric": "bf16_tflops", "per_device": []float64{912.4, 905.1, 0, 900, 900, 900, 900, 900}, "duration_seconds": 30, "error": ""}
	if res := app.agentPost(stranger, path, body); res.status != http.StatusNotFound {
		t.Errorf("another provider's agent: %d %s", res.status, res.body)
	}

	// Heartbeats every 50 seconds keep the host up all along (through the
	// store: the API's per-token rate limit runs on the wall clock).
	seq := int64(1)
	tokenID := liveHostTokenID(t, app.testApp, prov.userID(), o.ID, 0)
	beatUntil := func(until time.Time) {
		for at := app.clock.now().Add(50 * time.Second); !at.After(until); at = at.Add(50 * time.Second) {
			seq++
			app.clock.set(at)
			hb := market.Heartbeat{Seq: seq, AgentVersion: "1.0.0", Probe: "simulate", Devices: make([]market.HostDevice, 8)}
			for i := range hb.Devices {
				hb.Devices[i] = market.HostDevice{Index: i, Name: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559, Healthy: true}
			}
			if _, err := app.db.RecordHeartbeat(context.Background(), tokenID, hb, at); err != nil {
				t.Fatal(err)
			}
		}
	}
	at := p.Start.Add(10 * time.Minute)
	beatUntil(at)
	res := app.agentPost(token, path, body)
	if res.status != http.StatusOK {
		t.Fatalf("acceptance: %d %s", res.status, res.body)
	}
	var reply struct {
		Guaranteed       int64 `json:"guaranteed"`
		DevicesBelow     int   `json:"devices_below"`
		ShortfallBP      int   `json:"shortfall_bp"`
		Underperformance bool  `json:"underperformance"`
	}
	if err := json.Unmarshal([]byte(res.body), &reply); err != nil || reply.Guaranteed != 900 || reply.DevicesBelow != 1 ||
		reply.ShortfallBP != 10000 || !reply.Underperformance {
		t.Fatalf("reply %s %v", res.body, err)
	}
	seq++
	if rep := app.beat(token, heartbeatBody(seq, 8)); len(rep.Assignments) != 1 || rep.Assignments[0].Acceptance {
		t.Fatalf("acceptance asked for again: %+v", rep.Assignments)
	}
	offerPage := buyer.get(fmt.Sprintf("/offers/%d", o.ID)).body
	mustContain(t, offerPage, `data-testid="agent-figures"`, "Reported by the provider’s agent", "BF16 throughput per device", "900 TFLOPS",
		"900 TFLOPS, guaranteed", "median of 8 device(s) in 1 acceptance test(s)")

	beatUntil(p.End)
	app.tick(p.End.Add(time.Minute))
	ctx := context.Background()
	incs, err := app.db.ListIncidents(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(incs) != 1 {
		t.Fatalf("incidents %+v, want the underperformance only", incs)
	}
	slow := incs[0]
	if slow.Kind != market.IncidentUnderperformance || !slow.Start.Equal(at) || !slow.End.Equal(p.End) || slow.DevicesAffected != 1 || slow.DegradationBP != 10000 ||
		slow.ReportedBy != store.ReportedByAgent {
		t.Fatalf("underperformance incident %+v", slow)
	}
	// The statement credits the underperforming device-time at its
	// shortfall: one device of eight from the result to the end, at 100 %.
	reserved := int64(p.Devices) * int64(p.End.Sub(p.Start)/time.Second)
	slowDS := int64(p.End.Sub(at) / time.Second)
	credit := market.Cents((2*int64(r.AmountCents)*(slowDS) + reserved) / (2 * reserved))
	st, err := app.db.FindSettlement(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	stmt := st.Statement
	found := false
	for _, c := range stmt.Pieces[0].Clauses {
		if c.Kind == market.ClauseUnderperformance {
			found = true
			if c.DeviceSeconds != slowDS || c.RateBP != 10000 || !c.SLA {
				t.Errorf("underperformance clause %+v, want %d device-seconds at 100%%", c, slowDS)
			}
		}
	}
	if !found || stmt.Pieces[0].Refund != credit || st.RefundCents != credit || credit == 0 || st.State != store.SettlementDone {
		t.Fatalf("statement %+v (state %s), want a refund of %s", stmt.Pieces[0], st.State, credit)
	}
	mustContain(t, buyer.get(fmt.Sprintf("/reservations/%d/statement", r.ID)).body, "Underperformance, 1 of 8 devices")
	requireReconciled(t, app.testApp)
}
