package store

import (
	"context"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// A provider runs an agent on one of its two nodes: the piece there is
// measured from the heartbeats (a 15-minute silence and 10 minutes with 2
// devices down), whatever the parties reported on it; the piece on the
// other node counts as reported.
func TestProviderRecordMeasuredByAgent(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	prov := createUser(t, db, "prov@example.com", true)
	quiet := createUser(t, db, "quiet@example.com", true)
	buyer := createUser(t, db, "buyer@example.com", false)
	o := twoNodeOffer(t, db, prov.ID)
	s := t0.Add(2 * time.Hour)
	ra, pa, nodeA := rentedNode(t, db, buyer.ID, o, 8, s, 2)
	rb, pb, nodeB := rentedNode(t, db, buyer.ID, o, 8, s, 2)
	if nodeA == nodeB {
		t.Fatalf("both pieces on node %d", nodeA)
	}
	// The quiet provider's offer has an agent but no delivered piece.
	qo := twoNodeOffer(t, db, quiet.ID)
	qtok, _ := hostToken(t, db, quiet.ID, qo.ID, 0)
	heartbeat(t, db, qtok.ID, 1, h100s(8), s)

	tok, _ := hostToken(t, db, prov.ID, o.ID, nodeA)
	seq := int64(0)
	beats := func(from, to time.Time, healthy int) {
		t.Helper()
		for at := from; at.Before(to); at = at.Add(30 * time.Second) {
			seq++
			d := h100s(8)
			for i := healthy; i < 8; i++ {
				d[i].Healthy = false
			}
			heartbeat(t, db, tok.ID, seq, d, at)
		}
	}
	beats(s.Add(-30*time.Second), s.Add(10*time.Minute+time.Second), 8) // last at s+10m
	beats(s.Add(25*time.Minute), s.Add(60*time.Minute), 8)              // silent 15 minutes
	beats(s.Add(60*time.Minute), s.Add(70*time.Minute), 6)              // 2 devices down 10 minutes
	beats(s.Add(70*time.Minute), s.Add(2*time.Hour+time.Minute), 8)
	if _, err := db.AdvanceReservations(ctx, s.Add(90*time.Minute)); err != nil {
		t.Fatal(err)
	}
	incs, err := db.MeasureHosts(ctx, s.Add(90*time.Minute))
	if err != nil || len(incs) != 2 {
		t.Fatalf("measured incidents %+v, %v; want the silence and the fewer devices", incs, err)
	}
	// The parties' own acknowledged reports: an hour of all 8 devices on
	// the measured piece, half an hour of 4 on the other.
	for _, rep := range []struct {
		r        market.Reservation
		p        market.ReservationPiece
		from, to time.Duration
		devices  int
	}{{ra, pa, 30 * time.Minute, 90 * time.Minute, 8}, {rb, pb, 30 * time.Minute, 60 * time.Minute, 4}} {
		if _, err := db.writer.ExecContext(ctx, `INSERT INTO incidents (reservation_id, piece_id, kind, start_at, end_at, devices_affected, note,
			reported_by, reporter_id, acknowledged, created_at) VALUES (?, ?, ?, ?, ?, ?, 'x', 'buyer', ?, 1, ?)`,
			rep.r.ID, rep.p.ID, string(market.IncidentHostFailure), unix(s.Add(rep.from)), unix(s.Add(rep.to)), rep.devices, buyer.ID, unix(s)); err != nil {
			t.Fatal(err)
		}
	}
	now := s.Add(3 * time.Hour)
	if _, err := db.AdvanceReservations(ctx, now); err != nil {
		t.Fatal(err)
	}

	const m = 60 // device-seconds per device-minute
	promised := int64(2 * 8 * 120 * m)
	measured := int64(8 * 120 * m)
	measuredLost := int64(8*15*m + 2*10*m)
	buyerA, buyerB := int64(8*60*m), int64(4*30*m)
	want := market.ProviderRecord{ProviderID: prov.ID, ApprovedOffers: 1, DeliveredReservations: 2, MaxDeliveredDevices: 8,
		RecentIncidents: 4, PromisedDeviceSeconds: promised,
		// The agent's two incidents count as reported too, until the
		// measurement replaces the agent's and the provider's reports on
		// its piece; the buyer's acknowledged report keeps counting (issue
		// 23: the agent is the provider's word).
		LostDeviceSeconds:     measuredLost + buyerA + buyerB,
		MeasuredDeviceSeconds: measured, MeasuredLostDeviceSeconds: measuredLost, ReportedLostOnMeasured: measuredLost}
	one, err := db.ProviderRecord(ctx, prov.ID, now)
	if err != nil || one != want {
		t.Fatalf("ProviderRecord = %+v, %v\nwant             %+v", one, err, want)
	}
	all, err := db.ProviderRecords(ctx, now)
	if err != nil || all[prov.ID] != want {
		t.Fatalf("ProviderRecords = %+v, %v\nwant              %+v", all[prov.ID], err, want)
	}
	if r, ok := all[quiet.ID]; !ok || r.MeasuredDeviceSeconds != 0 || r.ReliabilitySource() != market.ReliabilitySelfReported {
		t.Errorf("quiet provider's record = %+v (%v)", r, ok)
	}
	// Scored: the measured 162 device-minutes on A, the buyer's 480 on A
	// and the 120 reported on B of 1,920 promised; half measured.
	if got := one.ScoredLostDeviceSeconds(); got != measuredLost+buyerA+buyerB {
		t.Errorf("scored lost = %d, want %d", got, measuredLost+buyerA+buyerB)
	}
	if src := one.ReliabilitySource(); src != market.ReliabilityMeasured {
		t.Errorf("source %q, want measured", src)
	}

	// Out of the window, nothing is measured any more.
	later, err := db.ProviderRecord(ctx, prov.ID, now.Add(market.ReliabilityWindow))
	if err != nil || later.MeasuredDeviceSeconds != 0 || later.MeasuredLostDeviceSeconds != 0 || later.ReportedLostOnMeasured != 0 {
		t.Errorf("record after the window = %+v, %v", later, err)
	}
}

// An agent whose node first reported after the rental began did not
// measure it: the piece counts as reported.
func TestProviderRecordAgentStartedLate(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	prov := createUser(t, db, "prov@example.com", true)
	buyer := createUser(t, db, "buyer@example.com", false)
	o := twoNodeOffer(t, db, prov.ID)
	s := t0.Add(2 * time.Hour)
	_, _, node := rentedNode(t, db, buyer.ID, o, 8, s, 1)
	tok, _ := hostToken(t, db, prov.ID, o.ID, node)
	for i := range 100 {
		heartbeat(t, db, tok.ID, int64(i+1), h100s(8), s.Add(2*time.Minute+time.Duration(i)*30*time.Second))
	}
	now := s.Add(2 * time.Hour)
	if _, err := db.AdvanceReservations(ctx, now); err != nil {
		t.Fatal(err)
	}
	r, err := db.ProviderRecord(ctx, prov.ID, now)
	if err != nil || r.PromisedDeviceSeconds != 8*3600 || r.MeasuredDeviceSeconds != 0 || r.ReliabilitySource() != market.ReliabilitySelfReported {
		t.Errorf("record = %+v, %v", r, err)
	}
}
