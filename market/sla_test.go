package market

import (
	"math/big"
	"math/rand"
	"strings"
	"testing"
	"time"
)

var slaT0 = time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC)

func slaHour(h float64) time.Time { return slaT0.Add(time.Duration(h * float64(time.Hour))) }

// slaPiece is 4 devices for 10 hours (144,000 device-seconds) at $4,000.
func slaPiece(interruptible bool) ReservationPiece {
	return ReservationPiece{ID: 11, OfferID: 21, ProviderID: 31, Devices: 4, Start: slaT0, End: slaHour(10),
		Interruptible: interruptible, PriceCents: 10000, AmountCents: 400000}
}

func slaTerms(basis BillingBasis) SLATerms {
	return SLATerms{BillingBasis: basis, UptimeBP: 9950, CreditCapBP: 5000,
		CreditSchedule: []CreditTier{{9950, 1000}, {9900, 2500}, {9500, 10000}}}
}

func slaInput(p ReservationPiece, terms SLATerms, incs ...Incident) SettlementInput {
	return SettlementInput{
		Reservation: Reservation{ID: 1, BuyerID: 41, State: ReservationCompleted, Pieces: []ReservationPiece{p}, AmountCents: p.AmountCents},
		Terms:       map[int64]SLATerms{p.OfferID: terms}, Incidents: incs, PlatformFeeBP: 1000,
	}
}

func inc(id int64, kind IncidentKind, from, to float64, devices int) Incident {
	return Incident{ID: id, PieceID: 11, Kind: kind, Start: slaHour(from), End: slaHour(to), DevicesAffected: devices,
		Note: "seen in the provider's monitoring", Acknowledged: true}
}

type wantClause struct {
	kind  ClauseKind
	ds    int64
	rate  int
	cents Cents
	sla   bool
}

func TestSettleEveryKindAndBasis(t *testing.T) {
	const reserved = 144000
	tier25 := wantClause{ClauseUptime, 0, 2500, 100000, true}
	tier100 := wantClause{ClauseUptime, 0, 10000, 400000, true}
	degraded := inc(1, IncidentNetworkDegradation, 2, 4, 2)
	severe := degraded
	severe.DegradationBP = 10000
	tests := []struct {
		name          string
		basis         BillingBasis
		interruptible bool
		inc           Incident
		promised      int64
		delivered     int64
		uptime        int
		breached      bool
		clauses       []wantClause
		notCharged    Cents
		beforeCap     Cents
		credits       Cents
		refund        Cents
		fee           Cents
		payout        Cents
	}{
		// One device for one hour is 2.5% of the block: uptime 97.50%, the 25% tier.
		{"host failure, wall clock", BillingWallClock, false, inc(1, IncidentHostFailure, 1, 2, 1), reserved, reserved - 3600, 9750, true,
			[]wantClause{{ClauseHostFailure, 3600, 10000, 10000, true}, tier25}, 0, 110000, 110000, 110000, 29000, 261000},
		{"host failure, committed block, breached", BillingCommittedBlock, false, inc(1, IncidentHostFailure, 1, 2, 1), reserved, reserved - 3600, 9750, true,
			[]wantClause{{ClauseHostFailure, 3600, 10000, 10000, true}, tier25}, 0, 110000, 110000, 110000, 29000, 261000},
		{"host failure, successful work", BillingSuccessfulWork, false, inc(1, IncidentHostFailure, 1, 2, 1), reserved, reserved - 3600, 9750, true,
			[]wantClause{{ClauseHostFailure, 3600, 10000, 10000, false}, tier25}, 10000, 100000, 100000, 110000, 29000, 261000},
		// Six minutes on one device is 0.25%: uptime 99.75%, within the guarantee.
		{"host failure within guarantee, wall clock", BillingWallClock, false, inc(1, IncidentHostFailure, 1, 1.1, 1), reserved, reserved - 360, 9975, false,
			[]wantClause{{ClauseHostFailure, 360, 10000, 1000, true}}, 0, 1000, 1000, 1000, 39900, 359100},
		{"host failure within guarantee, committed block", BillingCommittedBlock, false, inc(1, IncidentHostFailure, 1, 1.1, 1), reserved, reserved - 360, 9975, false,
			[]wantClause{{ClauseHostFailure, 360, 0, 0, true}}, 0, 0, 0, 0, 40000, 360000},
		{"host failure within guarantee, successful work", BillingSuccessfulWork, false, inc(1, IncidentHostFailure, 1, 1.1, 1), reserved, reserved - 360, 9975, false,
			[]wantClause{{ClauseHostFailure, 360, 10000, 1000, false}}, 1000, 0, 0, 1000, 39900, 359100},
		{"power curtailment, wall clock", BillingWallClock, false, inc(1, IncidentPowerCurtailment, 3, 4, 1), reserved, reserved - 3600, 9750, true,
			[]wantClause{{ClausePowerCurtailment, 3600, 10000, 10000, true}, tier25}, 0, 110000, 110000, 110000, 29000, 261000},
		{"power curtailment within guarantee, committed block", BillingCommittedBlock, false, inc(1, IncidentPowerCurtailment, 3, 3.1, 1), reserved, reserved - 360, 9975, false,
			[]wantClause{{ClausePowerCurtailment, 360, 0, 0, true}}, 0, 0, 0, 0, 40000, 360000},
		{"power curtailment, committed block, breached", BillingCommittedBlock, false, inc(1, IncidentPowerCurtailment, 3, 4, 1), reserved, reserved - 3600, 9750, true,
			[]wantClause{{ClausePowerCurtailment, 3600, 10000, 10000, true}, tier25}, 0, 110000, 110000, 110000, 29000, 261000},
		{"power curtailment, successful work", BillingSuccessfulWork, false, inc(1, IncidentPowerCurtailment, 3, 4, 1), reserved, reserved - 3600, 9750, true,
			[]wantClause{{ClausePowerCurtailment, 3600, 10000, 10000, false}, tier25}, 10000, 100000, 100000, 110000, 29000, 261000},
		// One device missing for the whole block is 25%: uptime 75%, the 100% tier, capped at 50%.
		{"fewer devices, wall clock", BillingWallClock, false, inc(1, IncidentFewerDevices, 0, 10, 1), reserved, 108000, 7500, true,
			[]wantClause{{ClauseFewerDevices, 36000, 10000, 100000, true}, tier100}, 0, 500000, 200000, 200000, 20000, 180000},
		{"fewer devices, committed block", BillingCommittedBlock, false, inc(1, IncidentFewerDevices, 0, 10, 1), reserved, 108000, 7500, true,
			[]wantClause{{ClauseFewerDevices, 36000, 10000, 100000, true}, tier100}, 0, 500000, 200000, 200000, 20000, 180000},
		{"fewer devices, successful work", BillingSuccessfulWork, false, inc(1, IncidentFewerDevices, 0, 10, 1), reserved, 108000, 7500, true,
			[]wantClause{{ClauseFewerDevices, 36000, 10000, 100000, false}, tier100}, 100000, 400000, 200000, 300000, 10000, 90000},
		// Two devices degraded for two hours: 14,400 device-seconds, $400 of time, half credited.
		{"network degradation, wall clock", BillingWallClock, false, degraded, reserved, reserved, 10000, false,
			[]wantClause{{ClauseNetworkDegradation, 14400, 5000, 20000, true}}, 0, 20000, 20000, 20000, 38000, 342000},
		{"network degradation, committed block", BillingCommittedBlock, false, degraded, reserved, reserved, 10000, false,
			[]wantClause{{ClauseNetworkDegradation, 14400, 5000, 20000, true}}, 0, 20000, 20000, 20000, 38000, 342000},
		{"network degradation, successful work", BillingSuccessfulWork, false, degraded, reserved, reserved, 10000, false,
			[]wantClause{{ClauseNetworkDegradation, 14400, 5000, 20000, true}}, 0, 20000, 20000, 20000, 38000, 342000},
		{"network degradation with stated severity", BillingWallClock, false, severe, reserved, reserved, 10000, false,
			[]wantClause{{ClauseNetworkDegradation, 14400, 10000, 40000, true}}, 0, 40000, 40000, 40000, 36000, 324000},
		// Two devices preempted at hour 6: 8 device-hours (28,800 s) not charged; uptime unaffected.
		{"preemption, wall clock", BillingWallClock, true, inc(1, IncidentPreemption, 6, 7, 2), reserved - 28800, reserved - 28800, 10000, false,
			[]wantClause{{ClausePreemption, 28800, 10000, 80000, false}}, 80000, 0, 0, 80000, 32000, 288000},
		{"preemption, committed block", BillingCommittedBlock, true, inc(1, IncidentPreemption, 6, 7, 2), reserved - 28800, reserved - 28800, 10000, false,
			[]wantClause{{ClausePreemption, 28800, 10000, 80000, false}}, 80000, 0, 0, 80000, 32000, 288000},
		{"preemption, successful work", BillingSuccessfulWork, true, inc(1, IncidentPreemption, 6, 7, 2), reserved - 28800, reserved - 28800, 10000, false,
			[]wantClause{{ClausePreemption, 28800, 10000, 80000, false}}, 80000, 0, 0, 80000, 32000, 288000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := slaPiece(tt.interruptible)
			st, err := Settle(slaInput(p, slaTerms(tt.basis), tt.inc))
			if err != nil {
				t.Fatal(err)
			}
			if len(st.Pieces) != 1 {
				t.Fatalf("pieces = %d", len(st.Pieces))
			}
			ps := st.Pieces[0]
			if ps.PieceID != 11 || ps.OfferID != 21 || ps.ProviderID != 31 || ps.Basis != tt.basis || ps.Paid != 400000 || ps.Devices != 4 {
				t.Errorf("identity fields = %+v", ps)
			}
			if ps.ReservedDeviceSeconds != reserved || ps.PromisedDeviceSeconds != tt.promised || ps.DeliveredDeviceSeconds != tt.delivered {
				t.Errorf("device-seconds reserved/promised/delivered = %d/%d/%d, want %d/%d/%d",
					ps.ReservedDeviceSeconds, ps.PromisedDeviceSeconds, ps.DeliveredDeviceSeconds, reserved, tt.promised, tt.delivered)
			}
			if ps.UptimeBP != tt.uptime || ps.Breached != tt.breached || ps.GuaranteeBP != 9950 {
				t.Errorf("uptime %d breached %v guarantee %d, want %d %v 9950", ps.UptimeBP, ps.Breached, ps.GuaranteeBP, tt.uptime, tt.breached)
			}
			if len(ps.Clauses) != len(tt.clauses) {
				t.Fatalf("clauses = %+v, want %d", ps.Clauses, len(tt.clauses))
			}
			for i, w := range tt.clauses {
				c := ps.Clauses[i]
				if c.Kind != w.kind || c.DeviceSeconds != w.ds || c.RateBP != w.rate || c.Cents != w.cents || c.SLA != w.sla || c.Label == "" {
					t.Errorf("clause %d = %+v, want %+v", i, c, w)
				}
				if w.kind != ClauseUptime && c.IncidentID != 1 {
					t.Errorf("clause %d incident = %d", i, c.IncidentID)
				}
			}
			if ps.NotCharged != tt.notCharged || ps.CreditsBeforeCap != tt.beforeCap || ps.CreditCap != 200000 || ps.Credits != tt.credits {
				t.Errorf("not charged %d, before cap %d, cap %d, credits %d; want %d %d 200000 %d",
					ps.NotCharged, ps.CreditsBeforeCap, ps.CreditCap, ps.Credits, tt.notCharged, tt.beforeCap, tt.credits)
			}
			if ps.Refund != tt.refund || ps.Kept != 400000-tt.refund || ps.Fee != tt.fee || ps.Payout != tt.payout {
				t.Errorf("refund %d kept %d fee %d payout %d; want %d %d %d %d", ps.Refund, ps.Kept, ps.Fee, ps.Payout,
					tt.refund, 400000-tt.refund, tt.fee, tt.payout)
			}
			if st.Paid != ps.Paid || st.Refund != ps.Refund || st.Fee != ps.Fee || st.Payout != ps.Payout || st.Credits != ps.Credits ||
				st.NotCharged != ps.NotCharged || st.UptimeBP != ps.UptimeBP || st.DeliveredDeviceSeconds != ps.DeliveredDeviceSeconds {
				t.Errorf("totals %+v do not match the one piece", st)
			}
		})
	}
}

func TestSettleTierChoiceIgnoresOrder(t *testing.T) {
	terms := slaTerms(BillingWallClock)
	terms.CreditCapBP = 10000
	// Reversed order: the deepest band reached must still win.
	terms.CreditSchedule = []CreditTier{{9500, 10000}, {9900, 2500}, {9950, 1000}}
	st, err := Settle(slaInput(slaPiece(false), terms, inc(1, IncidentFewerDevices, 0, 10, 1)))
	if err != nil {
		t.Fatal(err)
	}
	last := st.Pieces[0].Clauses[len(st.Pieces[0].Clauses)-1]
	if last.Kind != ClauseUptime || last.RateBP != 10000 || last.Cents != 400000 {
		t.Errorf("tier clause = %+v", last)
	}
	if st.Refund != 400000 || st.Payout != 0 || st.Fee != 0 {
		t.Errorf("refund %d payout %d fee %d, want everything back", st.Refund, st.Payout, st.Fee)
	}
}

func TestSettlePendingAndOverlap(t *testing.T) {
	pending := inc(7, IncidentHostFailure, 0, 10, 4)
	pending.Acknowledged = false
	// Two reports of 3 devices over the same hour on a 4-device piece: only 4 devices can be lost.
	a, b := inc(1, IncidentHostFailure, 1, 2, 3), inc(2, IncidentPowerCurtailment, 1, 3, 3)
	st, err := Settle(slaInput(slaPiece(false), slaTerms(BillingWallClock), pending, b, a))
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Pending) != 1 || st.Pending[0] != 7 {
		t.Errorf("pending = %v", st.Pending)
	}
	ps := st.Pieces[0]
	// Hour 1-2: a takes 3 (same start, lower id first), b takes 1. Hour 2-3: b takes 3.
	if ps.Clauses[0].IncidentID != 1 || ps.Clauses[0].DeviceSeconds != 3*3600 ||
		ps.Clauses[1].IncidentID != 2 || ps.Clauses[1].DeviceSeconds != 4*3600 {
		t.Errorf("clauses = %+v", ps.Clauses)
	}
	if ps.DeliveredDeviceSeconds != 144000-7*3600 {
		t.Errorf("delivered = %d", ps.DeliveredDeviceSeconds)
	}
}

func TestSettleSeveralPiecesAndPayouts(t *testing.T) {
	p1 := slaPiece(false)
	p2 := ReservationPiece{ID: 12, OfferID: 22, ProviderID: 32, Devices: 1, Start: slaT0, End: slaHour(3), AmountCents: 1001}
	p3 := ReservationPiece{ID: 13, OfferID: 21, ProviderID: 31, Devices: 2, Start: slaHour(1), End: slaHour(2), AmountCents: 333}
	in := SettlementInput{
		Reservation: Reservation{ID: 9, BuyerID: 41, State: ReservationCompleted, Pieces: []ReservationPiece{p1, p2, p3}, AmountCents: 401334},
		Terms:       map[int64]SLATerms{21: slaTerms(BillingWallClock), 22: {BillingBasis: BillingSuccessfulWork, UptimeBP: 9000, CreditCapBP: 5000}},
		Incidents: []Incident{
			inc(1, IncidentHostFailure, 1, 2, 1),
			{ID: 2, PieceID: 12, Kind: IncidentHostFailure, Start: slaHour(0), End: slaHour(1), DevicesAffected: 1, Note: "x", Acknowledged: true},
		},
		PlatformFeeBP: 1250,
	}
	st, err := Settle(in)
	if err != nil {
		t.Fatal(err)
	}
	if st.ReservationID != 9 || st.BuyerID != 41 || st.PlatformFeeBP != 1250 || len(st.Pieces) != 3 {
		t.Fatalf("statement = %+v", st)
	}
	// Piece 2: a third of $10.01 not charged: round(333.67) = 334; kept 667; fee round(83.375) = 83.
	if p := st.Pieces[1]; p.NotCharged != 334 || p.Refund != 334 || p.Fee != 83 || p.Payout != 584 {
		t.Errorf("piece 2 = %+v", p)
	}
	var refund, fee, payout Cents
	for _, p := range st.Pieces {
		refund += p.Refund
		fee += p.Fee
		payout += p.Payout
	}
	if st.Refund != refund || st.Fee != fee || st.Payout != payout || st.Refund+st.Fee+st.Payout != 401334 {
		t.Errorf("totals refund %d fee %d payout %d", st.Refund, st.Fee, st.Payout)
	}
	pay := st.Payouts()
	if len(pay) != 2 || pay[0].ProviderID != 31 || pay[1].ProviderID != 32 ||
		pay[0].Payout != st.Pieces[0].Payout+st.Pieces[2].Payout || pay[1].Payout != st.Pieces[1].Payout ||
		pay[0].Fee+pay[1].Fee != st.Fee || pay[0].Kept+pay[1].Kept != st.Kept {
		t.Errorf("payouts = %+v", pay)
	}
}

func TestSettleRejects(t *testing.T) {
	base := func() SettlementInput { return slaInput(slaPiece(false), slaTerms(BillingWallClock)) }
	tests := []struct {
		name string
		mod  func(*SettlementInput)
		code Code
		want string
	}{
		{"held", func(in *SettlementInput) { in.Reservation.State = ReservationHeld }, CodeConflict, "nothing to settle"},
		{"fee", func(in *SettlementInput) { in.PlatformFeeBP = 10001 }, CodeInvalid, "platform fee"},
		{"amount", func(in *SettlementInput) { in.Reservation.AmountCents++ }, CodeInvalid, "not the sum"},
		{"terms", func(in *SettlementInput) { in.Terms = nil }, CodeInvalid, "No settlement terms"},
		{"basis", func(in *SettlementInput) { in.Terms[21] = SLATerms{BillingBasis: "x"} }, CodeInvalid, "billing basis"},
		{"incident piece", func(in *SettlementInput) { in.Incidents = []Incident{{ID: 5, PieceID: 99}} }, CodeInvalid, "not on a piece"},
		{"bad incident", func(in *SettlementInput) {
			in.Incidents = []Incident{inc(5, IncidentPreemption, 1, 2, 1)}
		}, CodeInvalid, "highlighted"},
		{"no pieces", func(in *SettlementInput) { in.Reservation.Pieces = nil }, CodeInvalid, "no pieces"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := base()
			tt.mod(&in)
			_, err := Settle(in)
			if ErrorCode(err) != tt.code || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want %s containing %q", err, tt.code, tt.want)
			}
		})
	}
}

func TestValidateIncident(t *testing.T) {
	p := slaPiece(false)
	ip := slaPiece(true)
	good := inc(1, IncidentHostFailure, 1, 2, 1)
	tests := []struct {
		name   string
		piece  ReservationPiece
		mod    func(*Incident)
		fields []string
	}{
		{"valid", p, func(*Incident) {}, nil},
		{"piece", p, func(i *Incident) { i.PieceID = 12 }, []string{"piece"}},
		{"kind", p, func(i *Incident) { i.Kind = "meteor" }, []string{"kind"}},
		{"preempting fixed capacity", p, func(i *Incident) { i.Kind = IncidentPreemption }, []string{"kind"}},
		{"no start", p, func(i *Incident) { i.Start = time.Time{} }, []string{"start"}},
		{"start before", p, func(i *Incident) { i.Start = slaHour(-1) }, []string{"start"}},
		{"start at end", p, func(i *Incident) { i.Start, i.End = slaHour(10), slaHour(11) }, []string{"start", "end"}},
		{"no end", p, func(i *Incident) { i.End = time.Time{} }, []string{"end"}},
		{"end before start", p, func(i *Incident) { i.End = slaHour(0.5) }, []string{"end"}},
		{"end after piece", p, func(i *Incident) { i.End = slaHour(11) }, []string{"end"}},
		{"no devices", p, func(i *Incident) { i.DevicesAffected = 0 }, []string{"devices_affected"}},
		{"too many devices", p, func(i *Incident) { i.DevicesAffected = 5 }, []string{"devices_affected"}},
		{"severity range", p, func(i *Incident) { i.Kind, i.DegradationBP = IncidentNetworkDegradation, 10001 }, []string{"degradation"}},
		{"severity on other kind", p, func(i *Incident) { i.DegradationBP = 100 }, []string{"degradation"}},
		{"no note", p, func(i *Incident) { i.Note = "  " }, []string{"note"}},
		{"long note", p, func(i *Incident) { i.Note = strings.Repeat("x", MaxIncidentNote+1) }, []string{"note"}},
		{"NUL in the note", p, func(i *Incident) { i.Note = "host down\x00" }, []string{"note"}},
		{"note on several lines", p, func(i *Incident) { i.Note = "host down\r\n\tsee ticket 42" }, nil},
		{"preemption without end", ip, func(i *Incident) { i.Kind, i.End = IncidentPreemption, time.Time{} }, nil},
		{"preemption marked at the end (spot)", ip, func(i *Incident) { i.Kind, i.Start, i.End = IncidentPreemption, slaHour(10), slaHour(10) }, nil},
		{"outage marked at the end", ip, func(i *Incident) { i.Start, i.End = slaHour(10), slaHour(10) }, []string{"start", "end"}},
		{"preemption after the end", ip, func(i *Incident) { i.Kind, i.Start, i.End = IncidentPreemption, slaHour(11), slaHour(11) }, []string{"start", "end"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			i := good
			tt.mod(&i)
			err := ValidateIncident(&i, tt.piece)
			fields := FieldErrors(err)
			if len(fields) != len(tt.fields) {
				t.Fatalf("fields = %v, want %v", fields, tt.fields)
			}
			for _, f := range tt.fields {
				if fields[f] == "" {
					t.Errorf("no message for %s in %v", f, fields)
				}
			}
			if tt.fields != nil && ErrorCode(err) != CodeInvalid {
				t.Errorf("code = %s", ErrorCode(err))
			}
		})
	}
	i := inc(1, IncidentPreemption, 1.5, 0, 1)
	i.End = time.Time{}
	i.Start = i.Start.Add(300 * time.Millisecond).In(time.FixedZone("x", 3600))
	i.Note = "  evidence  "
	if err := ValidateIncident(&i, ip); err != nil {
		t.Fatal(err)
	}
	if !i.End.Equal(ip.End) || i.Start != slaHour(1.5) || i.Note != "evidence" {
		t.Errorf("normalised = %+v", i)
	}
}

func TestIncidentKinds(t *testing.T) {
	for _, k := range IncidentKinds {
		if !k.Valid() || k.Label() == string(k) || k.Remedy() == "" {
			t.Errorf("kind %s: valid %v label %q remedy %q", k, k.Valid(), k.Label(), k.Remedy())
		}
	}
	if IncidentKind("x").Valid() || IncidentKind("x").Remedy() != "" {
		t.Error("unknown kind accepted")
	}
	if FormatDeviceHours(45000) != "12.50" || FormatDeviceHours(18) != "0.01" || FormatDeviceHours(17) != "0.00" {
		t.Errorf("FormatDeviceHours: %s %s %s", FormatDeviceHours(45000), FormatDeviceHours(18), FormatDeviceHours(17))
	}
	o := Offer{BillingBasis: BillingCommittedBlock, UptimeBP: 9900, CreditCapBP: 3000, CreditSchedule: []CreditTier{{9900, 500}}}
	if tt := TermsOf(o); tt.BillingBasis != BillingCommittedBlock || tt.UptimeBP != 9900 || tt.CreditCapBP != 3000 || len(tt.CreditSchedule) != 1 {
		t.Errorf("TermsOf = %+v", tt)
	}
}

// randomSettlement builds a valid random input; pieces are short enough for
// the brute-force reference to walk second by second.
func randomSettlement(rng *rand.Rand) SettlementInput {
	bases := []BillingBasis{BillingWallClock, BillingCommittedBlock, BillingSuccessfulWork}
	in := SettlementInput{
		Reservation:   Reservation{ID: rng.Int63n(1000) + 1, BuyerID: 2, State: ReservationCompleted},
		Terms:         map[int64]SLATerms{},
		PlatformFeeBP: rng.Intn(10001),
	}
	if rng.Intn(4) == 0 {
		in.PlatformFeeBP = []int{0, 10000, 1000}[rng.Intn(3)]
	}
	nPieces := 1 + rng.Intn(3)
	for i := 0; i < nPieces; i++ {
		start := slaT0.Add(time.Duration(rng.Intn(3600)) * time.Second)
		p := ReservationPiece{
			ID: int64(i + 1), OfferID: int64(100 + i), ProviderID: int64(1 + rng.Intn(2)),
			Devices: 1 + rng.Intn(8), Start: start, End: start.Add(time.Duration(60+rng.Intn(3600)) * time.Second),
			Interruptible: rng.Intn(2) == 0, AmountCents: Cents(rng.Int63n(5_000_000)),
		}
		if rng.Intn(10) == 0 {
			p.AmountCents = Cents(rng.Intn(3))
		}
		in.Reservation.Pieces = append(in.Reservation.Pieces, p)
		in.Reservation.AmountCents += p.AmountCents
		terms := SLATerms{BillingBasis: bases[rng.Intn(3)], UptimeBP: 9000 + rng.Intn(1001), CreditCapBP: rng.Intn(10001)}
		below, credit := terms.UptimeBP, 0
		for n := rng.Intn(4); n > 0 && below > 0; n-- {
			credit += 1 + rng.Intn(4000)
			terms.CreditSchedule = append(terms.CreditSchedule, CreditTier{BelowBP: below, CreditBP: min(credit, 10000)})
			below -= 1 + rng.Intn(800)
		}
		in.Terms[p.OfferID] = terms
		for n := rng.Intn(6); n > 0; n-- {
			in.Incidents = append(in.Incidents, randomIncident(rng, p, int64(len(in.Incidents)+1)))
		}
	}
	return in
}

func randomIncident(rng *rand.Rand, p ReservationPiece, id int64) Incident {
	kinds := []IncidentKind{IncidentHostFailure, IncidentPowerCurtailment, IncidentNetworkDegradation, IncidentFewerDevices}
	if p.Interruptible {
		kinds = append(kinds, IncidentPreemption)
	}
	secs := int(p.End.Sub(p.Start) / time.Second)
	from := rng.Intn(secs)
	to := from + 1 + rng.Intn(secs-from)
	i := Incident{ID: id, PieceID: p.ID, Kind: kinds[rng.Intn(len(kinds))],
		Start: p.Start.Add(time.Duration(from) * time.Second), End: p.Start.Add(time.Duration(to) * time.Second),
		DevicesAffected: 1 + rng.Intn(p.Devices), Note: "random", Acknowledged: rng.Intn(8) != 0}
	if i.Kind == IncidentNetworkDegradation && rng.Intn(2) == 0 {
		i.DegradationBP = rng.Intn(10001)
	}
	return i
}

// referencePiece recomputes a piece second by second with exact rationals.
func referencePiece(t *testing.T, p ReservationPiece, terms SLATerms, incs []Incident, feeBP int) PieceStatement {
	t.Helper()
	var ack []Incident
	for _, i := range incs {
		if i.PieceID == p.ID && i.Acknowledged {
			ack = append(ack, i)
		}
	}
	// Same deterministic order as Settle: start, then id.
	for a := 1; a < len(ack); a++ {
		for b := a; b > 0 && (ack[b].Start.Before(ack[b-1].Start) || ack[b].Start.Equal(ack[b-1].Start) && ack[b].ID < ack[b-1].ID); b-- {
			ack[b], ack[b-1] = ack[b-1], ack[b]
		}
	}
	ds := make([]int64, len(ack))
	var preempted, lost int64
	dev := int64(p.Devices)
	for s := p.Start.Unix(); s < p.End.Unix(); s++ {
		in := func(i Incident) bool {
			end := i.End.Unix()
			if i.Kind == IncidentPreemption {
				end = p.End.Unix()
			}
			return i.Start.Unix() <= s && s < end
		}
		left := dev
		for k, i := range ack {
			if i.Kind == IncidentPreemption && in(i) {
				n := min(int64(i.DevicesAffected), left)
				left -= n
				ds[k] += n
				preempted += n
			}
		}
		up := left
		for k, i := range ack {
			if i.Kind.outage() && in(i) {
				n := min(int64(i.DevicesAffected), left)
				left -= n
				ds[k] += n
				lost += n
			}
		}
		for k, i := range ack {
			if i.Kind == IncidentNetworkDegradation && in(i) {
				n := min(int64(i.DevicesAffected), up)
				up -= n
				ds[k] += n
			}
		}
	}
	reserved := dev * (p.End.Unix() - p.Start.Unix())
	ps := PieceStatement{ReservedDeviceSeconds: reserved, PromisedDeviceSeconds: reserved - preempted}
	ps.DeliveredDeviceSeconds = ps.PromisedDeviceSeconds - lost
	ps.UptimeBP = 10000
	if ps.PromisedDeviceSeconds > 0 {
		ps.UptimeBP = int(ps.DeliveredDeviceSeconds * 10000 / ps.PromisedDeviceSeconds)
	}
	breached := ps.UptimeBP < terms.UptimeBP
	var n1, n2 int64 // numerators over reserved*10000
	for k, i := range ack {
		switch {
		case i.Kind == IncidentPreemption:
			n1 += ds[k] * 10000
		case i.Kind == IncidentNetworkDegradation:
			rate := int64(i.DegradationBP)
			if rate == 0 {
				rate = NetworkDegradationCreditBP
			}
			n2 += ds[k] * rate
		case terms.BillingBasis == BillingSuccessfulWork:
			n1 += ds[k] * 10000
		case terms.BillingBasis == BillingCommittedBlock && !breached:
		default:
			n2 += ds[k] * 10000
		}
	}
	best := 0
	for _, tier := range terms.CreditSchedule {
		if ps.UptimeBP < tier.BelowBP && tier.CreditBP > best {
			best = tier.CreditBP
		}
	}
	n2 += int64(best) * reserved
	round := func(num *big.Rat) Cents { // half away from zero, num >= 0
		q := new(big.Rat).Add(num, big.NewRat(1, 2))
		return Cents(new(big.Int).Quo(q.Num(), q.Denom()).Int64())
	}
	frac := func(n, d int64) *big.Rat {
		return new(big.Rat).Mul(big.NewRat(int64(p.AmountCents), 1), big.NewRat(n, d))
	}
	den := reserved * 10000
	ps.NotCharged = round(frac(n1, den))
	ps.CreditsBeforeCap = round(frac(n2, den))
	ps.CreditCap = round(frac(int64(terms.CreditCapBP), 10000))
	ps.Credits = min(ps.CreditsBeforeCap, ps.CreditCap)
	ps.Refund = min(ps.NotCharged+ps.Credits, p.AmountCents)
	ps.Kept = p.AmountCents - ps.Refund
	ps.Fee = round(new(big.Rat).Mul(big.NewRat(int64(ps.Kept), 1), big.NewRat(int64(feeBP), 10000)))
	ps.Payout = ps.Kept - ps.Fee
	return ps
}

func TestSettleProperties(t *testing.T) {
	rng := rand.New(rand.NewSource(20250301))
	n := 3000
	if testing.Short() {
		n = 300
	}
	for iter := 0; iter < n; iter++ {
		in := randomSettlement(rng)
		st, err := Settle(in)
		if err != nil {
			t.Fatalf("iteration %d: %v\ninput %+v", iter, err, in)
		}
		checkStatement(t, iter, in, st, iter%4 == 0)

		// More downtime: extend or add an outage on a random piece.
		more := in
		more.Incidents = append([]Incident(nil), in.Incidents...)
		p := in.Reservation.Pieces[rng.Intn(len(in.Reservation.Pieces))]
		extended := false
		for k, i := range more.Incidents {
			if i.PieceID == p.ID && i.Kind.outage() && i.Acknowledged && i.End.Before(p.End) {
				more.Incidents[k].End = i.End.Add(time.Duration(1+rng.Int63n(int64(p.End.Sub(i.End)/time.Second))) * time.Second)
				if rng.Intn(2) == 0 && i.DevicesAffected < p.Devices {
					more.Incidents[k].DevicesAffected++
				}
				extended = true
				break
			}
		}
		if !extended {
			i := randomIncident(rng, p, 999)
			i.Kind, i.DegradationBP, i.Acknowledged = IncidentHostFailure, 0, true
			more.Incidents = append(more.Incidents, i)
		}
		st2, err := Settle(more)
		if err != nil {
			t.Fatalf("iteration %d (more downtime): %v", iter, err)
		}
		checkStatement(t, iter, more, st2, iter%4 == 1)
		if st2.Refund < st.Refund || st2.Credits < st.Credits || st2.DeliveredDeviceSeconds > st.DeliveredDeviceSeconds {
			t.Fatalf("iteration %d: more downtime gave refund %d→%d, credits %d→%d, delivered %d→%d",
				iter, st.Refund, st2.Refund, st.Credits, st2.Credits, st.DeliveredDeviceSeconds, st2.DeliveredDeviceSeconds)
		}
		for k := range st.Pieces {
			if st2.Pieces[k].Refund < st.Pieces[k].Refund || st2.Pieces[k].Credits < st.Pieces[k].Credits {
				t.Fatalf("iteration %d piece %d: more downtime gave less: %+v then %+v", iter, k, st.Pieces[k], st2.Pieces[k])
			}
		}
	}
}

// checkStatement checks the invariants of every statement and, when
// reference is set, compares each piece with the brute-force reference.
func checkStatement(t *testing.T, iter int, in SettlementInput, st Statement, reference bool) {
	t.Helper()
	var tot Statement
	kept, fees := map[int64]Cents{}, map[int64]Cents{}
	for k, ps := range st.Pieces {
		p := in.Reservation.Pieces[k]
		terms := in.Terms[p.OfferID]
		if ps.Refund+ps.Payout+ps.Fee != ps.Paid || ps.Paid != p.AmountCents {
			t.Fatalf("iteration %d piece %d: refund %d + payout %d + fee %d != paid %d", iter, k, ps.Refund, ps.Payout, ps.Fee, ps.Paid)
		}
		if ps.Refund < 0 || ps.Payout < 0 || ps.Fee < 0 || ps.Credits < 0 || ps.NotCharged < 0 {
			t.Fatalf("iteration %d piece %d: negative amount %+v", iter, k, ps)
		}
		capCents := Cents(MulDivRound(int64(ps.Paid), int64(terms.CreditCapBP), 10000))
		if ps.Credits > capCents || ps.Credits > ps.Paid || ps.Credits > ps.CreditsBeforeCap || ps.CreditCap != capCents {
			t.Fatalf("iteration %d piece %d: credits %d above cap %d (paid %d)", iter, k, ps.Credits, capCents, ps.Paid)
		}
		var sumSLA, sumNot Cents
		for _, c := range ps.Clauses {
			if c.Cents < 0 {
				t.Fatalf("iteration %d piece %d: negative line %+v", iter, k, c)
			}
			// A percentage of the amount reads the same everywhere: the
			// uptime credit is exactly rate × paid, rounded half away from zero.
			if c.Kind == ClauseUptime {
				q := new(big.Rat).Add(new(big.Rat).Mul(big.NewRat(int64(ps.Paid), 1), big.NewRat(int64(c.RateBP), 10000)), big.NewRat(1, 2))
				if want := Cents(new(big.Int).Quo(q.Num(), q.Denom()).Int64()); c.Cents != want {
					t.Fatalf("iteration %d piece %d: uptime credit %d, want %d", iter, k, c.Cents, want)
				}
			}
			if c.SLA {
				sumSLA += c.Cents
			} else {
				sumNot += c.Cents
			}
		}
		if sumSLA != ps.CreditsBeforeCap || sumNot != ps.NotCharged {
			t.Fatalf("iteration %d piece %d: lines do not add up: %+v", iter, k, ps)
		}
		if !(ps.DeliveredDeviceSeconds >= 0 && ps.DeliveredDeviceSeconds <= ps.PromisedDeviceSeconds && ps.PromisedDeviceSeconds <= ps.ReservedDeviceSeconds) {
			t.Fatalf("iteration %d piece %d: device-seconds %+v", iter, k, ps)
		}
		if reference {
			ref := referencePiece(t, p, terms, in.Incidents, in.PlatformFeeBP)
			if ref.PromisedDeviceSeconds != ps.PromisedDeviceSeconds || ref.DeliveredDeviceSeconds != ps.DeliveredDeviceSeconds ||
				ref.UptimeBP != ps.UptimeBP || ref.NotCharged != ps.NotCharged || ref.CreditsBeforeCap != ps.CreditsBeforeCap ||
				ref.Credits != ps.Credits || ref.Refund != ps.Refund || ref.Kept != ps.Kept {
				t.Fatalf("iteration %d piece %d: differs from the reference\n got %+v\nwant %+v", iter, k, ps, ref)
			}
		}
		tot.Paid += ps.Paid
		tot.Refund += ps.Refund
		tot.Fee += ps.Fee
		tot.Payout += ps.Payout
		kept[ps.ProviderID] += ps.Kept
		fees[ps.ProviderID] += ps.Fee
	}
	// The fee is the platform's share of what each provider keeps in total,
	// rounded half away from zero once: kept × bp / 10000, by exact rationals.
	for id, k := range kept {
		q := new(big.Rat).Add(new(big.Rat).Mul(big.NewRat(int64(k), 1), big.NewRat(int64(in.PlatformFeeBP), 10000)), big.NewRat(1, 2))
		want := Cents(new(big.Int).Quo(q.Num(), q.Denom()).Int64())
		if fees[id] != want {
			t.Fatalf("iteration %d provider %d: fees %d, want %d%% of kept %d = %d", iter, id, fees[id], in.PlatformFeeBP/100, k, want)
		}
	}
	if st.Refund+st.Payout+st.Fee != st.Paid || st.Paid != in.Reservation.AmountCents ||
		tot.Refund != st.Refund || tot.Fee != st.Fee || tot.Payout != st.Payout {
		t.Fatalf("iteration %d: totals do not add up: %+v", iter, st)
	}
}

func BenchmarkSettle(b *testing.B) {
	rng := rand.New(rand.NewSource(1))
	in := randomSettlement(rng)
	for b.Loop() {
		if _, err := Settle(in); err != nil {
			b.Fatal(err)
		}
	}
}
