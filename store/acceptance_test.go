package store

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

func TestAcceptanceResultsAndUnderperformance(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	prov := createUser(t, db, "prov@example.com", true)
	buyer := createUser(t, db, "buyer@example.com", false)
	in := validOffer(prov.ID)
	in.Nodes, in.NetworkID = 2, "ethernet-100"
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
	other, _ := hostToken(t, db, prov.ID, o.ID, 1-node)
	res, err := market.AcceptanceFromReport("bf16_tflops", []float64{912.4, 905.1, 0, 700, 900, 900, 900, 900}, 30, "")
	if err != nil {
		t.Fatal(err)
	}

	_, err = db.RecordAcceptance(ctx, other.ID, p.ID, res, s)
	wantCode(t, err, market.CodeNotFound)
	_, err = db.RecordAcceptance(ctx, tok.ID, p.ID, res, s.Add(-time.Second))
	wantCode(t, err, market.CodeConflict)
	if as, _ := db.ListAssignments(ctx, tok.ID, s); len(as) != 1 || !as[0].Acceptance {
		t.Fatalf("acceptance not asked for: %+v", as)
	}

	at := s.Add(time.Minute)
	a, err := db.RecordAcceptance(ctx, tok.ID, p.ID, res, at)
	// Below 810 (900 less 10 %): 0 and 700, short by 100 % and 22.22 %.
	if err != nil || a.Guaranteed != 900 || a.DevicesBelow != 2 || a.ShortfallBP != 6111 || a.Node != node || a.OfferID != o.ID {
		t.Fatalf("acceptance %+v %v", a, err)
	}
	// Posted again: the first result stands.
	again, _ := market.AcceptanceFromReport("bf16_tflops", []float64{900, 900, 900, 900, 900, 900, 900, 900}, 30, "")
	if a2, err := db.RecordAcceptance(ctx, tok.ID, p.ID, again, at.Add(time.Minute)); err != nil || a2.DevicesBelow != 2 || !a2.CreatedAt.Equal(at) {
		t.Fatalf("posted again: %+v %v", a2, err)
	}
	if as, _ := db.ListAssignments(ctx, tok.ID, at); len(as) != 1 || as[0].Acceptance {
		t.Fatalf("acceptance asked for again: %+v", as)
	}

	// The next round records the underperformance to the piece's end.
	if _, err := db.AdvanceReservations(ctx, at); err != nil {
		t.Fatal(err)
	}
	incs, err := db.MeasureHosts(ctx, at.Add(time.Second))
	if err != nil || len(incs) != 1 {
		t.Fatalf("incidents %+v %v", incs, err)
	}
	i := incs[0]
	if i.Kind != market.IncidentUnderperformance || !i.Start.Equal(at) || !i.End.Equal(p.End) || i.DevicesAffected != 2 || i.DegradationBP != 6111 ||
		i.ReportedBy != ReportedByAgent || !i.Acknowledged || i.ReservationID != r.ID {
		t.Fatalf("incident %+v", i)
	}
	for _, w := range []string{"BF16 throughput per device measured 912 TFLOPS, 905 TFLOPS, 0 TFLOPS, 700 TFLOPS", "against the guaranteed 900 TFLOPS",
		"2 device(s) more than 10% below it, 61.11% short on average"} {
		if !strings.Contains(i.Note, w) {
			t.Errorf("note %q lacks %q", i.Note, w)
		}
	}
	if incs, _ := db.MeasureHosts(ctx, at.Add(time.Hour)); len(incs) != 0 {
		t.Fatalf("recorded twice: %+v", incs)
	}

	// The offer's figure measured by agents: the median device.
	figs, err := db.OfferAgentFigures(ctx, o.ID)
	if err != nil || len(figs) != 1 || figs[0].Metric != market.FigureBF16TFLOPS || figs[0].MedianMilli != 900000 ||
		figs[0].Devices != 8 || figs[0].Tests != 1 || !figs[0].Last.Equal(at) {
		t.Fatalf("agent figures %+v %v", figs, err)
	}
	// A failed test is stored but measures nothing.
	r2, p2, node2 := rentedNode(t, db, buyer.ID, o, 8, s.Add(3*time.Hour), 1)
	_ = r2
	tok2 := tok
	if node2 != node {
		tok2 = other
	}
	failed, _ := market.AcceptanceFromReport("bf16_tflops", nil, 0, "cuda: out of memory")
	if a, err := db.RecordAcceptance(ctx, tok2.ID, p2.ID, failed, s.Add(3*time.Hour)); err != nil || a.DevicesBelow != 0 || a.Result.Error == "" {
		t.Fatalf("failed test %+v %v", a, err)
	}
	if figs, _ := db.OfferAgentFigures(ctx, o.ID); len(figs) != 1 || figs[0].Tests != 1 {
		t.Fatalf("a failed test counted: %+v", figs)
	}
}
