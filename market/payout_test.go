package market

import (
	"math/big"
	"math/rand"
	"testing"
	"time"
)

// refShare is bp basis points of a, rounded half away from zero, by exact
// rationals: the reference for Share, written from its documentation.
func refShare(a Cents, bp int) Cents {
	r := new(big.Rat).Mul(big.NewRat(int64(a), 1), big.NewRat(int64(bp), 10000))
	neg := r.Sign() < 0
	r.Abs(r)
	r.Add(r, big.NewRat(1, 2))
	q := new(big.Int).Quo(r.Num(), r.Denom()).Int64()
	if neg {
		q = -q
	}
	return Cents(q)
}

func TestShareOneRule(t *testing.T) {
	// The example: 25% of $881.99 is $220.50 as a fee and as a credit.
	if got := Share(88199, 2500); got != 22050 {
		t.Fatalf("Share(88199, 2500) = %d, want 22050", got)
	}
	rng := rand.New(rand.NewSource(7))
	for i := 0; i < 20000; i++ {
		a, bp := Cents(rng.Int63n(10_000_000)), rng.Intn(10001)
		if got, want := Share(a, bp), refShare(a, bp); got != want {
			t.Fatalf("Share(%d, %d) = %d, want %d", a, bp, got, want)
		}
	}
	// A cancellation fee of 25% and an uptime credit of 25% of the same
	// amount are the same cents.
	r := Reservation{ID: 1, BuyerID: 2, State: ReservationConfirmed, AmountCents: 88199, Pieces: []ReservationPiece{{
		ID: 1, OfferID: 3, ProviderID: 4, Devices: 1, Start: slaT0.Add(time.Hour), End: slaT0.Add(5 * time.Hour),
		AmountCents: 88199, FreeCancelHours: 24, CancelFeeBP: 2500}}}
	fee, err := CancellationFee(r, slaT0)
	if err != nil || fee != 22050 {
		t.Fatalf("cancellation fee = %d, %v; want 22050", fee, err)
	}
}

func TestCancellationStatement(t *testing.T) {
	now := slaT0
	r := Reservation{ID: 9, BuyerID: 2, State: ReservationConfirmed, AmountCents: 10001 + 20000 + 5555, Pieces: []ReservationPiece{
		// Inside its 48-hour free period: 25% kept.
		{ID: 1, OfferID: 3, ProviderID: 4, Devices: 2, Start: now.Add(10 * time.Hour), End: now.Add(20 * time.Hour), AmountCents: 10001, FreeCancelHours: 48, CancelFeeBP: 2500},
		// Outside its 2-hour free period: free.
		{ID: 2, OfferID: 5, ProviderID: 6, Devices: 1, Start: now.Add(10 * time.Hour), End: now.Add(20 * time.Hour), AmountCents: 20000, FreeCancelHours: 2, CancelFeeBP: 5000},
		// Same provider as piece 1, 50% kept.
		{ID: 3, OfferID: 7, ProviderID: 4, Devices: 1, Start: now.Add(11 * time.Hour), End: now.Add(20 * time.Hour), AmountCents: 5555, FreeCancelHours: 24, CancelFeeBP: 5000},
	}}
	st, err := CancellationStatement(r, now, 1000)
	if err != nil {
		t.Fatal(err)
	}
	// By hand: piece 1 keeps 25% of 100.01 = 25.0025 → 25.00; piece 3 keeps
	// 50% of 55.55 = 27.775 → 27.78; piece 2 nothing. Provider 4 keeps
	// 52.78, fee 10% = 5.278 → 5.28, payout 47.50. Refund 360.00 - ... :
	// paid 355.56, refund 355.56 - 52.78 = 302.78.
	if !st.Cancelled || st.Paid != 35556 || st.Refund != 30278 || st.Kept != 5278 || st.Fee != 528 || st.Payout != 4750 {
		t.Fatalf("statement = paid %d refund %d kept %d fee %d payout %d cancelled %v", st.Paid, st.Refund, st.Kept, st.Fee, st.Payout, st.Cancelled)
	}
	pay := st.Payouts()
	if len(pay) != 2 || pay[0].ProviderID != 4 || pay[0].Kept != 5278 || pay[0].Fee != 528 || pay[0].Payout != 4750 ||
		pay[1].ProviderID != 6 || pay[1].Kept != 0 || pay[1].Fee != 0 || pay[1].Payout != 0 {
		t.Fatalf("payouts = %+v", pay)
	}
	fees, _ := CancellationFees(r, now)
	var sum Cents
	for _, f := range fees {
		sum += f
	}
	if sum != st.Kept {
		t.Fatalf("the statement keeps %d but the cancellation fee is %d", st.Kept, sum)
	}
	// The ledger of charge + statement balances and leaves the providers
	// owed exactly their payouts until transferred.
	charges, err := ChargeEntries(r, "pi_1", now)
	if err != nil {
		t.Fatal(err)
	}
	all := append(charges, SettlementEntries(st, now)...)
	if err := CheckSettled(all, r.ID); err != nil {
		t.Fatal(err)
	}
	started := r
	started.Pieces = append([]ReservationPiece(nil), r.Pieces...)
	started.Pieces[0].Start = now
	if _, err := CancellationStatement(started, now, 1000); ErrorCode(err) != CodeConflict {
		t.Fatalf("a started reservation: %v, want a conflict", err)
	}
	active := r
	active.State = ReservationActive
	if _, err := CancellationStatement(active, now, 1000); ErrorCode(err) != CodeConflict || ErrorMessage(err) != "An active reservation cannot be cancelled." {
		t.Fatalf("an active reservation: %v", err)
	}
}

// disputeStatement is a settled statement of two providers: provider 4 paid
// 600.00 keeping 566.41 after a 33.59 SLA refund, provider 6 paid 400.00
// keeping all.
func disputeStatement(feeBP int) Statement {
	st := Statement{ReservationID: 3, BuyerID: 2, PlatformFeeBP: feeBP, Pieces: []PieceStatement{
		{PieceID: 1, ProviderID: 4, Paid: 60000, Refund: 3359, Kept: 56641},
		{PieceID: 2, ProviderID: 6, Paid: 40000, Kept: 40000},
	}}
	for _, p := range st.Pieces {
		st.Paid += p.Paid
		st.Refund += p.Refund
		st.Kept += p.Kept
	}
	st.applyProviderFees()
	return st
}

func TestApplyDisputeCreditOnHeldPayouts(t *testing.T) {
	st := disputeStatement(1000)
	// Credit 68.90, split 60:40 by what was paid: 41.34 and 27.56.
	got, entries, err := ApplyDisputeCredit(st, 11, 6890, map[int64]bool{}, false, slaT0)
	if err != nil {
		t.Fatal(err)
	}
	pay := got.Payouts()
	// Provider 4 keeps 566.41 - 41.34 = 525.07; fee 10% → 52.507 → 52.51;
	// payout 472.56. Provider 6 keeps 400.00 - 27.56 = 372.44; fee 37.244 →
	// 37.24; payout 335.20.
	if pay[0].Kept != 52507 || pay[0].Fee != 5251 || pay[0].Payout != 47256 || pay[0].DisputeCredit != 4134 ||
		pay[1].Kept != 37244 || pay[1].Fee != 3724 || pay[1].Payout != 33520 || pay[1].DisputeCredit != 2756 {
		t.Fatalf("payouts after the credit = %+v", pay)
	}
	if got.DisputeCreditTotal() != 6890 {
		t.Fatalf("credit total %d", got.DisputeCreditTotal())
	}
	// Ledger: the charge, the settlement's credit and fee entries, the
	// dispute's entries, then the refunds and the transfers of the payouts
	// as they stand: every account closes.
	r := Reservation{ID: 3, BuyerID: 2, AmountCents: 100000, Pieces: []ReservationPiece{{ID: 1, ProviderID: 4, AmountCents: 60000}, {ID: 2, ProviderID: 6, AmountCents: 40000}}}
	all, _ := ChargeEntries(r, "pi", slaT0)
	for _, e := range SettlementEntries(st, slaT0) {
		if e.Kind == EntryCredit || e.Kind == EntryFee || e.Kind == EntryRefund {
			all = append(all, e)
		}
	}
	all = append(all, entries...)
	for _, pp := range pay {
		all = append(all, TransferEntry(3, pp.ProviderID, pp.Payout, "tr", slaT0)...)
	}
	if err := CheckSettled(all, 3); err != nil {
		t.Fatal(err)
	}
	b := Balance(all)
	if -b[AccountPlatformFees] != 5251+3724 || b[AccountPlatformLosses] != 0 {
		t.Fatalf("fees %d losses %d", -b[AccountPlatformFees], b[AccountPlatformLosses])
	}
	if _, _, err := ApplyDisputeCredit(got, 11, 100, nil, false, slaT0); ErrorCode(err) != CodeConflict {
		t.Fatalf("the same dispute twice: %v", err)
	}
}

func TestApplyDisputeCreditBeyondWhatIsUnpaid(t *testing.T) {
	st := disputeStatement(1000)
	// Provider 6 was paid out already; provider 4 is held. The largest
	// credit the form allows: paid less refunded, 1000.00 - 33.59 = 966.41,
	// split 579.85 / 386.56. Provider 4 keeps only 566.41: 13.44 beyond it
	// and provider 6's whole part are the platform's loss.
	got, entries, err := ApplyDisputeCredit(st, 12, 96641, map[int64]bool{6: true}, false, slaT0)
	if err != nil {
		t.Fatal(err)
	}
	pay := got.Payouts()
	if pay[0].Kept != 0 || pay[0].Fee != 0 || pay[0].Payout != 0 || pay[1].Kept != 40000 || pay[1].Fee != 4000 || pay[1].Payout != 36000 {
		t.Fatalf("payouts = %+v", pay)
	}
	var loss, refund, feeBack Cents
	for _, e := range entries {
		switch e.Kind {
		case EntryLoss:
			loss += e.Amount
		case EntryRefund:
			refund += e.Amount
		case EntryFeeReversal:
			feeBack += e.Amount
		}
		if e.Amount <= 0 {
			t.Fatalf("entry %+v", e)
		}
	}
	// Loss: 579.85 - 566.41 = 13.44 from provider 4's part, 386.56 of
	// provider 6's: 400.00. The fee on 566.41 (56.64) is given back.
	if loss != 40000 || refund != 96641 || feeBack != 5664 {
		t.Fatalf("loss %d refund %d fee back %d", loss, refund, feeBack)
	}
	r := Reservation{ID: 3, BuyerID: 2, AmountCents: 100000, Pieces: []ReservationPiece{{ID: 1, ProviderID: 4, AmountCents: 60000}, {ID: 2, ProviderID: 6, AmountCents: 40000}}}
	all, _ := ChargeEntries(r, "pi", slaT0)
	for _, e := range SettlementEntries(st, slaT0) {
		// Provider 6's transfer was made before the dispute, at its first amount.
		if e.Kind != EntryTransfer || e.Debit == ProviderAccount(6) {
			all = append(all, e)
		}
	}
	all = append(all, entries...)
	all = append(all, TransferEntry(3, 4, pay[0].Payout, "tr", slaT0)...)
	if err := CheckSettled(all, 3); err != nil {
		t.Fatal(err)
	}
	if b := Balance(all); b[AccountPlatformLosses] != 40000 || -b[AccountPlatformFees] != 4000 {
		t.Fatalf("losses %d fees %d", b[AccountPlatformLosses], -b[AccountPlatformFees])
	}
}

func TestApplyDisputeCreditProperties(t *testing.T) {
	rng := rand.New(rand.NewSource(16))
	for iter := 0; iter < 3000; iter++ {
		feeBP := rng.Intn(3001)
		st := Statement{ReservationID: 1, BuyerID: 100, PlatformFeeBP: feeBP}
		n := 1 + rng.Intn(4)
		for i := 0; i < n; i++ {
			paid := Cents(1 + rng.Int63n(500000))
			refund := Cents(rng.Int63n(int64(paid) + 1))
			st.Pieces = append(st.Pieces, PieceStatement{PieceID: int64(i + 1), ProviderID: int64(1 + rng.Intn(3)), Paid: paid, Refund: refund, Kept: paid - refund})
			st.Paid += paid
			st.Refund += refund
		}
		st.applyProviderFees()
		paidOut := map[int64]bool{}
		for id := int64(1); id <= 3; id++ {
			paidOut[id] = rng.Intn(3) == 0
		}
		max := st.Paid - st.Refund
		if max <= 0 {
			continue
		}
		credit := Cents(1 + rng.Int63n(int64(max)))
		got, entries, err := ApplyDisputeCredit(st, 7, credit, paidOut, false, slaT0)
		if err != nil {
			t.Fatal(err)
		}
		before := map[int64]ProviderPayout{}
		for _, pp := range st.Payouts() {
			before[pp.ProviderID] = pp
		}
		var loss, taken, refund Cents
		for _, e := range entries {
			switch e.Kind {
			case EntryLoss:
				loss += e.Amount
			case EntryCredit:
				taken += e.Amount
			case EntryRefund:
				refund += e.Amount
			}
		}
		if refund != credit || loss+taken != credit {
			t.Fatalf("iter %d: credit %d, taken %d + loss %d, refund %d", iter, credit, taken, loss, refund)
		}
		for _, pp := range got.Payouts() {
			b := before[pp.ProviderID]
			if paidOut[pp.ProviderID] {
				if pp != b {
					t.Fatalf("iter %d: provider %d was paid out but changed: %+v → %+v", iter, pp.ProviderID, b, pp)
				}
				continue
			}
			// Never negative; the fee is the rate on what is kept now.
			if pp.Kept < 0 || pp.Payout < 0 || pp.Fee != refShare(pp.Kept, feeBP) || pp.Kept+pp.DisputeCredit != b.Kept || pp.Payout != pp.Kept-pp.Fee {
				t.Fatalf("iter %d: provider %d %+v (before %+v)", iter, pp.ProviderID, pp, b)
			}
		}
	}
}

func TestPaymentMismatch(t *testing.T) {
	for _, c := range []struct {
		name             string
		due              Cents
		paidIntent       string
		amount           Cents
		currency, intent string
		ok               bool
	}{
		{"exact", 22000, "", 22000, "usd", "pi_1", true},
		{"same intent again", 22000, "pi_1", 22000, "usd", "pi_1", true},
		{"one cent", 22000, "", 1, "usd", "pi_1", false},
		{"overpaid", 22000, "", 22001, "usd", "pi_1", false},
		{"another currency", 22000, "", 22000, "eur", "pi_1", false},
		{"second intent", 22000, "pi_1", 22000, "usd", "pi_2", false},
	} {
		if got := PaymentMismatch(c.due, c.paidIntent, c.amount, c.currency, c.intent); (got == "") != c.ok {
			t.Errorf("%s: mismatch %q, want ok=%v", c.name, got, c.ok)
		}
	}
}
