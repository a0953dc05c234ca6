package store

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

func TestMeasuredOutagesBecomeAgentIncidents(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	prov := createUser(t, db, "prov@example.com", true)
	buyer := createUser(t, db, "buyer@example.com", false)
	o := twoNodeOffer(t, db, prov.ID)
	s := t0.Add(2 * time.Hour)
	r, p, node := rentedNode(t, db, buyer.ID, o, 8, s, 4)
	tok, _ := hostToken(t, db, prov.ID, o.ID, node)
	// The other node's agent, silent all along, measures nothing for p.
	other, _ := hostToken(t, db, prov.ID, o.ID, 1-node)
	heartbeat(t, db, other.ID, 1, h100s(8), s.Add(-time.Hour))

	seq := int64(0)
	beat := func(at time.Time, healthy int) {
		t.Helper()
		seq++
		d := h100s(8)
		for i := healthy; i < 8; i++ {
			d[i].Healthy = false
		}
		heartbeat(t, db, tok.ID, seq, d, at)
	}
	measure := func(at time.Time) []Incident {
		t.Helper()
		if _, err := db.AdvanceReservations(ctx, at); err != nil {
			t.Fatal(err)
		}
		incs, err := db.MeasureHosts(ctx, at)
		if err != nil {
			t.Fatal(err)
		}
		return incs
	}
	type want struct {
		kind       market.IncidentKind
		start, end time.Time
		devices    int
	}
	check := func(got []Incident, wants ...want) {
		t.Helper()
		if len(got) != len(wants) {
			t.Fatalf("incidents %+v, want %d", got, len(wants))
		}
		for i, w := range wants {
			g := got[i]
			if g.Kind != w.kind || !g.Start.Equal(w.start) || !g.End.Equal(w.end) || g.DevicesAffected != w.devices ||
				g.ReportedBy != ReportedByAgent || g.ReporterID != prov.ID || !g.Acknowledged || g.PieceID != p.ID || g.ReservationID != r.ID ||
				g.Note == "" || len(g.Note) > market.MaxIncidentNote {
				t.Errorf("incident %d = %+v, want %+v", i, g, w)
			}
		}
	}

	beat(s.Add(-10*time.Second), 8)
	beat(s.Add(30*time.Second), 8)
	beat(s.Add(time.Minute), 8)
	check(measure(s.Add(90 * time.Second))) // silent 30 s: within the grace period
	// Silent for longer than the grace period: a host failure opens at the
	// last heartbeat, and ends with the next one.
	check(measure(s.Add(5 * time.Minute)))
	check(measure(s.Add(6 * time.Minute)))
	beat(s.Add(10*time.Minute), 8)
	incs := measure(s.Add(10*time.Minute + time.Second))
	check(incs, want{market.IncidentHostFailure, s.Add(time.Minute), s.Add(10 * time.Minute), 8})
	note := incs[0].Note
	for _, w := range []string{fmt.Sprint("node ", node), "no heartbeat for longer than the 1 minute grace period from " + market.FormatTime(s.Add(time.Minute)),
		"until heartbeats resumed at " + market.FormatTime(s.Add(10*time.Minute)), "Heartbeat timeline:", "3 heartbeat(s), seq 1 to 3, 8 of 8 devices healthy",
		"1 heartbeat(s), seq 4 to 4"} {
		if !strings.Contains(note, w) {
			t.Errorf("note %q lacks %q", note, w)
		}
	}
	check(measure(s.Add(11 * time.Minute))) // recorded once

	// Fewer healthy devices than the piece holds, over the heartbeats that
	// show it, for the devices missing.
	beat(s.Add(11*time.Minute), 7)
	beat(s.Add(11*time.Minute+30*time.Second), 7)
	beat(s.Add(12*time.Minute), 6)
	beat(s.Add(13*time.Minute), 8)
	incs = measure(s.Add(13*time.Minute + time.Second))
	check(incs, want{market.IncidentFewerDevices, s.Add(11 * time.Minute), s.Add(12 * time.Minute), 1},
		want{market.IncidentFewerDevices, s.Add(12 * time.Minute), s.Add(13 * time.Minute), 2})
	if !strings.Contains(incs[0].Note, "showed 1 healthy device(s) fewer than the 8 the piece holds there") ||
		!strings.Contains(incs[0].Note, "7 of 8 devices healthy; unhealthy: 7 (GPU-h)") {
		t.Errorf("fewer devices note %q", incs[0].Note)
	}

	// A silence no round of MeasureHosts saw is still one: the heartbeat
	// that ends it records it.
	beat(s.Add(20*time.Minute), 8)
	check(measure(s.Add(20*time.Minute+time.Second)), want{market.IncidentHostFailure, s.Add(13 * time.Minute), s.Add(20 * time.Minute), 8})

	// Devices missing when the host falls silent: the "fewer devices" ends
	// at the last heartbeat that showed it (one heartbeat: nothing to
	// count), the host failure starts there and, silent to the end, ends
	// with the rental.
	beat(s.Add(3*time.Hour), 5)
	check(measure(s.Add(3*time.Hour+30*time.Second)), want{market.IncidentHostFailure, s.Add(20 * time.Minute), s.Add(3 * time.Hour), 8})
	check(measure(s.Add(3*time.Hour + 5*time.Minute)))
	incs = measure(p.End.Add(time.Minute))
	check(incs, want{market.IncidentHostFailure, s.Add(3 * time.Hour), p.End, 8})
	if !strings.Contains(incs[0].Note, "to the end of the rental at "+market.FormatTime(p.End)) {
		t.Errorf("note %q", incs[0].Note)
	}
	// Heartbeats after the end change nothing; nothing is recorded twice.
	beat(p.End.Add(2*time.Minute), 8)
	check(measure(p.End.Add(3 * time.Minute)))
	check(measure(p.End.Add(time.Hour)))
	all, err := db.ListIncidents(ctx, r.ID)
	if err != nil || len(all) != 6 {
		t.Fatalf("%d incidents on the reservation (%v), want 6", len(all), err)
	}
	// Both parties were told.
	for _, u := range []int64{buyer.ID, prov.ID} {
		ns, err := db.ListNotifications(ctx, u, 50)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, x := range ns {
			if x.Kind == NotifyIncidentReported && strings.Contains(x.Notice.Text(), "outage") {
				n++
			}
		}
		if n != 6 {
			t.Errorf("user %d has %d outage notifications, want 6", u, n)
		}
	}
}

func TestMeasuredOutagesStopAtSettlement(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	prov := createUser(t, db, "prov@example.com", true)
	buyer := createUser(t, db, "buyer@example.com", false)
	o := twoNodeOffer(t, db, prov.ID)
	s := t0.Add(2 * time.Hour)
	r, p, node := rentedNode(t, db, buyer.ID, o, 8, s, 1)
	tok, _ := hostToken(t, db, prov.ID, o.ID, node)
	heartbeat(t, db, tok.ID, 1, h100s(8), s)
	// The host goes silent; the reservation is settled (here: marked so)
	// before the outage is recorded.
	if _, err := db.AdvanceReservations(ctx, p.End); err != nil {
		t.Fatal(err)
	}
	if _, err := db.writer.ExecContext(ctx, `INSERT INTO settlements (reservation_id, state, statement_json, refund_cents, created_at, updated_at)
		VALUES (?, 'done', '{}', 0, ?, ?)`, r.ID, unix(p.End), unix(p.End)); err != nil {
		t.Fatal(err)
	}
	incs, err := db.MeasureHosts(ctx, p.End.Add(time.Minute))
	if err != nil || len(incs) != 0 {
		t.Fatalf("incidents after settlement began: %+v %v", incs, err)
	}
	var skipped string
	if err := db.reader.QueryRowContext(ctx, `SELECT skipped FROM measured_outages WHERE piece_id = ?`, p.ID).Scan(&skipped); err != nil || !strings.Contains(skipped, "settled") {
		t.Fatalf("skipped %q %v", skipped, err)
	}
}
