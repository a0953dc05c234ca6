package store

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// TestObservationRecordAndCount: only the reservation's buyer may report,
// during the rental, at most market.MaxObservationsPerPiece times; a report
// is compared with the agent's heartbeat and acceptance test, and the
// contradicting ones are counted per provider and per offer.
func TestObservationRecordAndCount(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	prov := createUser(t, db, "obs-prov@example.com", true)
	buyer := createUser(t, db, "obs-buyer@example.com", false)
	other := createUser(t, db, "obs-other@example.com", false)
	o, err := db.CreateOffer(ctx, validOffer(prov.ID), t0)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.ReviewOffer(ctx, o.ID, market.ReviewApproved, "", t0); err != nil {
		t.Fatal(err)
	}
	s := t0.Add(2 * time.Hour)
	r, p, node := rentedNode(t, db, buyer.ID, o, 4, s, 2)
	tok, _ := hostToken(t, db, prov.ID, o.ID, node)
	hb := market.Heartbeat{Seq: 1, AgentVersion: "1.0.0", Probe: "simulate", Devices: make([]market.HostDevice, 8)}
	for i := range hb.Devices {
		hb.Devices[i] = market.HostDevice{Index: i, Name: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559, Healthy: true}
	}
	if _, err := db.RecordHeartbeat(ctx, tok.ID, hb, s); err != nil {
		t.Fatal(err)
	}
	devs := func(n int, name string) []market.ObservedDevice {
		out := make([]market.ObservedDevice, n)
		for i := range out {
			out[i] = market.ObservedDevice{Name: name, MemoryMiB: 81559}
		}
		return out
	}
	good, err := market.NewObservation(p.ID, devs(4, "NVIDIA H100 80GB HBM3"), "", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	at := s.Add(time.Minute)
	_, err = db.RecordObservation(ctx, other.ID, r.ID, good, at)
	wantCode(t, err, market.CodeNotFound)
	_, err = db.RecordObservation(ctx, buyer.ID, r.ID, good, s.Add(-time.Second))
	wantCode(t, err, market.CodeConflict)
	_, err = db.RecordObservation(ctx, buyer.ID, r.ID, good, p.End)
	wantCode(t, err, market.CodeConflict)

	rec, err := db.RecordObservation(ctx, buyer.ID, r.ID, good, at)
	if err != nil || rec.Mismatch() || rec.Node != node || rec.ProviderID != prov.ID || rec.OfferID != o.ID ||
		rec.AgentSummary != `8 × "NVIDIA H100 80GB HBM3" (81,559 MiB)` {
		t.Fatalf("matching observation %+v %v", rec, err)
	}
	bad, _ := market.NewObservation(p.ID, devs(3, "NVIDIA H100 80GB HBM3"), "", 0, 0)
	rec, err = db.RecordObservation(ctx, buyer.ID, r.ID, bad, at)
	want := "your machine sees 3 devices; the piece holds 4 and the provider's agent reported 8"
	if err != nil || !rec.Mismatch() || len(rec.Reasons) != 1 || rec.Reasons[0] != want {
		t.Fatalf("mismatching observation %+v %v, want %q", rec, err, want)
	}
	list, err := db.ListReservationObservations(ctx, r.ID)
	if err != nil || len(list) != 2 || list[0].Mismatch() || !list[1].Mismatch() || fmt.Sprint(list[1].Reasons) != fmt.Sprint(rec.Reasons) ||
		len(list[1].Observation.Devices) != 3 {
		t.Fatalf("list %+v %v", list, err)
	}
	byProv, err := db.CountProviderContradictions(ctx, t0)
	if err != nil || len(byProv) != 1 || byProv[prov.ID] != 1 {
		t.Fatalf("per provider %v %v", byProv, err)
	}
	if n, err := db.CountOfferContradictions(ctx, o.ID, t0); err != nil || n != 1 {
		t.Fatalf("per offer %d %v", n, err)
	}
	if n, err := db.CountOfferContradictions(ctx, o.ID, at); err != nil || n != 0 {
		t.Fatalf("per offer since the report %d %v", n, err)
	}
	for i := 2; i < market.MaxObservationsPerPiece; i++ {
		if _, err := db.RecordObservation(ctx, buyer.ID, r.ID, good, at); err != nil {
			t.Fatal(err)
		}
	}
	_, err = db.RecordObservation(ctx, buyer.ID, r.ID, good, at)
	wantCode(t, err, market.CodeConflict)
}
