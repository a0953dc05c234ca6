package store

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

func TestAnnotateAgentIncident(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	prov := createUser(t, db, "prov@example.com", true)
	otherProv := createUser(t, db, "prov2@example.com", true)
	buyer := createUser(t, db, "buyer@example.com", false)
	in := validOffer(prov.ID)
	in.Figures = []market.Figure{{Kind: market.FigureBF16TFLOPS, Value: 900, Basis: market.FigureGuaranteed}}
	o, err := db.CreateOffer(ctx, in, t0)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.ReviewOffer(ctx, o.ID, market.ReviewApproved, "", t0); err != nil {
		t.Fatal(err)
	}
	s := t0.Add(2 * time.Hour)
	r, p, node := rentedNode(t, db, buyer.ID, o, 8, s, 2)
	tok, _ := hostToken(t, db, prov.ID, o.ID, node)
	res, _ := market.AcceptanceFromReport("bf16_tflops", []float64{500, 900, 900, 900, 900, 900, 900, 900}, 30, "")
	if _, err := db.RecordAcceptance(ctx, tok.ID, p.ID, res, s.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, err := db.AdvanceReservations(ctx, s.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	incs, err := db.MeasureHosts(ctx, s.Add(2*time.Minute))
	if err != nil || len(incs) != 1 {
		t.Fatalf("incidents %+v %v", incs, err)
	}
	agentInc := incs[0]
	manual, err := db.ReportIncident(ctx, Incident{Incident: market.Incident{PieceID: p.ID, Kind: market.IncidentHostFailure,
		Start: s.Add(10 * time.Minute), End: s.Add(20 * time.Minute), DevicesAffected: 1, Note: "fan"},
		ReservationID: r.ID, ReportedBy: ReportedByProvider, ReporterID: prov.ID}, s.Add(30*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	at := s.Add(time.Hour)

	_, err = db.AnnotateIncident(ctx, otherProv.ID, agentInc.ID, "not mine", at)
	wantCode(t, err, market.CodeNotFound)
	_, err = db.AnnotateIncident(ctx, buyer.ID, agentInc.ID, "I am the buyer", at)
	wantCode(t, err, market.CodeNotFound)
	_, err = db.AnnotateIncident(ctx, prov.ID, agentInc.ID+1000, "no such", at)
	wantCode(t, err, market.CodeNotFound)
	_, err = db.AnnotateIncident(ctx, prov.ID, manual.ID, "a person's report", at)
	wantMessage(t, err, market.CodeConflict, "Only incidents your agent measured")
	_, err = db.AnnotateIncident(ctx, prov.ID, agentInc.ID, " \n ", at)
	if market.FieldErrors(err)["note"] == "" {
		t.Fatalf("an empty note: %v", err)
	}

	n, err := db.AnnotateIncident(ctx, prov.ID, agentInc.ID, "  GPU 0 was thermally throttled; fan replaced at 11:30. ", at)
	if err != nil || n.Body != "GPU 0 was thermally throttled; fan replaced at 11:30." || n.IncidentID != agentInc.ID || n.AuthorID != prov.ID || !n.CreatedAt.Equal(at) {
		t.Fatalf("note %+v %v", n, err)
	}
	notes, err := db.ListIncidentNotes(ctx, r.ID)
	if err != nil || len(notes[agentInc.ID]) != 1 || notes[agentInc.ID][0] != n || len(notes[manual.ID]) != 0 {
		t.Fatalf("notes %+v %v", notes, err)
	}
	// The measurement stands; the buyer is told; the timeline shows the note.
	after, _ := db.ListIncidents(ctx, r.ID)
	if after[0].DegradationBP != agentInc.DegradationBP || after[0].Note != agentInc.Note {
		t.Fatalf("the note changed the incident: %+v", after[0])
	}
	if ns, _ := db.ListNotifications(ctx, buyer.ID, 5); len(ns) == 0 || !strings.Contains(ns[0].Notice.Text(), "added a note") {
		t.Fatalf("buyer's notifications %+v", ns)
	}
	tl, err := db.ReservationTimeline(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range tl {
		found = found || strings.Contains(e.Text, "Provider's note on an incident") && strings.Contains(e.Text, "fan replaced at 11:30")
	}
	if !found {
		t.Fatalf("timeline lacks the note: %+v", tl)
	}
	// At most MaxIncidentNotes.
	for i := 1; i < market.MaxIncidentNotes; i++ {
		if _, err := db.AnnotateIncident(ctx, prov.ID, agentInc.ID, "more", at); err != nil {
			t.Fatal(err)
		}
	}
	_, err = db.AnnotateIncident(ctx, prov.ID, agentInc.ID, "one too many", at)
	wantMessage(t, err, market.CodeConflict, "the most it can take")
}
