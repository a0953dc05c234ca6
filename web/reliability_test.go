package web

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
)

// deliveredOffer lists an approved offer of a new provider and delivers
// one booking of all its 8 devices for an hour, a month ago, on which the
// provider reported half an hour of host failure. With agent, the node's
// agent reported every 30 seconds from before the start to the end, all
// devices healthy. It returns the offer.
func (a *testApp) deliveredOffer(name string, agent bool) market.Offer {
	a.t.Helper()
	ctx := context.Background()
	prov, err := a.db.CreateUser(ctx, market.User{Email: name + "@example.com", DisplayName: name, IsProvider: true}, []byte("x"), testNow)
	if err != nil {
		a.t.Fatal(err)
	}
	buyer, err := a.db.CreateUser(ctx, market.User{Email: name + "-buyer@example.com", DisplayName: "Buyer", IsBuyer: true}, []byte("x"), testNow)
	if err != nil {
		a.t.Fatal(err)
	}
	o := market.Offer{
		ProviderID: prov.ID, Title: name + " H100", AcceleratorID: "nvidia-h100-80gb-sxm", MemoryGB: 80, DevicesPerNode: 8, Nodes: 1,
		Interconnect: market.InterconnectNVLink, NetworkID: "none", CPUCores: 32, RAMGB: 256, StorageGB: 1000,
		DriverVersion: "550.90", CUDAVersion: "12.4", OSImage: "Ubuntu", ContainerRuntime: "Docker", RegionID: "us-east-va",
		AvailableFrom: testNow.AddDate(0, -2, 0), AvailableUntil: testNow.AddDate(0, 1, 0), MinRentalHours: 1, MaxRentalHours: 720,
		PriceCentsPerDeviceHour: 250, BillingBasis: market.BillingWallClock, UptimeBP: 9950, CreditCapBP: 10000,
		RejectMinutes: market.DefaultRejectMinutes,
	}
	if o, err = a.db.CreateOffer(ctx, o, testNow); err != nil {
		a.t.Fatal(err)
	}
	if err := a.db.ReviewOffer(ctx, o.ID, market.ReviewApproved, "", testNow); err != nil {
		a.t.Fatal(err)
	}
	start := testNow.AddDate(0, -1, 0)
	p := market.ReservationPiece{OfferID: o.ID, Devices: 8, Start: start, End: start.Add(time.Hour), PriceCents: 250, AmountCents: 250 * 8}
	r, err := a.db.CreateReservation(ctx, buyer.ID, []market.ReservationPiece{p}, `{}`, start.Add(-time.Hour), time.Hour)
	if err != nil {
		a.t.Fatal(err)
	}
	if _, err := a.db.ConfirmReservation(ctx, r.ID, start.Add(-time.Hour)); err != nil {
		a.t.Fatal(err)
	}
	if agent {
		tok, _, err := a.db.CreateHostToken(ctx, prov.ID, o.ID, 0, start.Add(-time.Hour))
		if err != nil {
			a.t.Fatal(err)
		}
		seq := int64(0)
		for at := start.Add(-time.Minute); !at.After(p.End); at = at.Add(30 * time.Second) {
			seq++
			hb := market.Heartbeat{Seq: seq, AgentVersion: "1.0.0", Probe: "simulate", Devices: make([]market.HostDevice, 8)}
			for i := range hb.Devices {
				hb.Devices[i] = market.HostDevice{Index: i, Name: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559, Healthy: true}
			}
			if _, err := a.db.RecordHeartbeat(ctx, tok.ID, hb, at); err != nil {
				a.t.Fatal(err)
			}
		}
	}
	if _, err := a.db.AdvanceReservations(ctx, p.End.Add(time.Minute)); err != nil {
		a.t.Fatal(err)
	}
	in := store.Incident{Incident: market.Incident{Kind: market.IncidentHostFailure, Start: start.Add(10 * time.Minute), End: start.Add(40 * time.Minute),
		DevicesAffected: 8, Note: "PSU"}, ReservationID: r.ID, ReportedBy: store.ReportedByProvider, ReporterID: prov.ID}
	if _, err := a.db.ReportIncident(ctx, in, p.End.Add(time.Minute)); err != nil {
		a.t.Fatal(err)
	}
	if _, err := a.db.AdvanceReservations(ctx, testNow); err != nil {
		a.t.Fatal(err)
	}
	return o
}

// offerCardOf is the catalogue card of one offer.
func offerCardOf(t *testing.T, page string, offerID int64) string {
	t.Helper()
	_, card, ok := strings.Cut(page, fmt.Sprintf(`data-offer-id="%d"`, offerID))
	if !ok {
		t.Fatalf("no card for offer %d", offerID)
	}
	card, _, _ = strings.Cut(card, "</article>")
	return card
}

// The offer page and the catalogue card say whether the provider's
// reliability is measured by its agents or self-reported, and the score
// follows the measurement where there is one. Both providers delivered
// 8 device-hours and reported 4 of them lost (+25 bp a report); the
// agent's heartbeats show none lost:
// measured (500 h × 95 % + 8 h × 100 %) / 508 h − 0.25 % = 94.83 %,
// reported (500 h × 95 % + 4 h × 100 %) / 508 h − 0.25 % = 94.04 %.
func TestReliabilityMeasuredOrSelfReported(t *testing.T) {
	app := newTestApp(t)
	measured := app.deliveredOffer("agent-provider", true)
	reported := app.deliveredOffer("word-provider", false)
	if err := app.handler.wf.ReloadIndex(context.Background()); err != nil {
		t.Fatal(err)
	}
	visitor := app.client()
	catalogue := visitor.get("/")
	if catalogue.status != http.StatusOK {
		t.Fatalf("catalogue: %d", catalogue.status)
	}
	for _, tt := range []struct {
		offer        market.Offer
		score, label string
		class        string
	}{
		{measured, "94.83%", "reported by the provider’s agent", "badge-measured"},
		{reported, "94.04%", "self-reported", "badge-reported"},
	} {
		page := visitor.get(fmt.Sprintf("/offers/%d", tt.offer.ID))
		if page.status != http.StatusOK {
			t.Fatalf("offer %d: %d", tt.offer.ID, page.status)
		}
		_, line, _ := strings.Cut(page.body, `data-testid="offer-reliability"`)
		line, _, _ = strings.Cut(line, "</p>")
		mustContain(t, line, "<strong>"+tt.score+"</strong> <span", `data-testid="offer-reliability-source">`+tt.label+"<", tt.class)
		card := offerCardOf(t, catalogue.body, tt.offer.ID)
		_, line, _ = strings.Cut(card, `data-testid="card-reliability"`)
		line, _, _ = strings.Cut(line, "</li>")
		mustContain(t, line, "Provider reliability "+tt.score+` <span`, `data-testid="card-reliability-source">`+tt.label+"<", tt.class)
	}
	// A provider with no history yet has the prior, self-reported.
	fresh := app.listedOffer("nvidia-h100-80gb-sxm", 8, 1, "us-east-va", 300)
	page := visitor.get(fmt.Sprintf("/offers/%d", fresh.ID))
	mustContain(t, page.body, "<strong>95%</strong>", `data-testid="offer-reliability-source">self-reported<`)
}
