package market

import (
	"math/rand"
	"strings"
	"testing"
)

func TestLedgerNames(t *testing.T) {
	if BuyerAccount(12) != "buyer:12" || ProviderAccount(7) != "provider:7" || TransferGroup(3) != "res_3" ||
		EntryKey(3, EntryRefund, 0) != "res_3_refund" || EntryKey(3, EntryTransfer, 7) != "res_3_transfer_p7" {
		t.Errorf("names: %s %s %s %s %s", BuyerAccount(12), ProviderAccount(7), TransferGroup(3), EntryKey(3, EntryRefund, 0), EntryKey(3, EntryTransfer, 7))
	}
}

func TestLedgerChargeAndSettlement(t *testing.T) {
	at := slaHour(20)
	p1 := slaPiece(false)
	p2 := ReservationPiece{ID: 12, OfferID: 22, ProviderID: 32, Devices: 1, Start: slaT0, End: slaHour(3), AmountCents: 1001}
	r := Reservation{ID: 9, BuyerID: 41, State: ReservationCompleted, Pieces: []ReservationPiece{p1, p2}, AmountCents: 401001}
	charges, err := ChargeEntries(r, "pi_123", at)
	if err != nil {
		t.Fatal(err)
	}
	want := []LedgerEntry{
		{9, EntryCharge, AccountPlatformCash, "provider:31", 400000, "pi_123", "res_9_charge_p31", at},
		{9, EntryCharge, AccountPlatformCash, "provider:32", 1001, "pi_123", "res_9_charge_p32", at},
	}
	checkEntries(t, charges, want)
	if err := CheckBalanced(charges); err != nil {
		t.Error(err)
	}
	if err := CheckSettled(charges, 9); err == nil || !strings.Contains(err.Error(), "provider:31 is owed $4,000.00") {
		t.Errorf("unsettled reservation passed CheckSettled: %v", err)
	}

	st, err := Settle(SettlementInput{
		Reservation: r,
		Terms:       map[int64]SLATerms{21: slaTerms(BillingWallClock), 22: {BillingBasis: BillingSuccessfulWork, UptimeBP: 9000}},
		Incidents: []Incident{inc(1, IncidentHostFailure, 1, 2, 1),
			{ID: 2, PieceID: 12, Kind: IncidentHostFailure, Start: slaHour(0), End: slaHour(1), DevicesAffected: 1, Note: "x", Acknowledged: true}},
		PlatformFeeBP: 1000,
	})
	if err != nil {
		t.Fatal(err)
	}
	// Piece 1: refund 110000, fee 29000, payout 261000. Piece 2: refund 334, kept 667, fee 67, payout 600.
	settle := SettlementEntries(st, at)
	want = []LedgerEntry{
		{9, EntryCredit, "provider:31", "buyer:41", 110000, "", "res_9_credit_p31", at},
		{9, EntryFee, "provider:31", AccountPlatformFees, 29000, "", "res_9_fee_p31", at},
		{9, EntryCredit, "provider:32", "buyer:41", 334, "", "res_9_credit_p32", at},
		{9, EntryFee, "provider:32", AccountPlatformFees, 67, "", "res_9_fee_p32", at},
		{9, EntryRefund, "buyer:41", AccountPlatformCash, 110334, "", "res_9_refund", at},
		{9, EntryTransfer, "provider:31", AccountPlatformCash, 261000, "", "res_9_transfer_p31", at},
		{9, EntryTransfer, "provider:32", AccountPlatformCash, 600, "", "res_9_transfer_p32", at},
	}
	checkEntries(t, settle, want)
	all := append(charges, settle...)
	if err := CheckSettled(all, 9); err != nil {
		t.Error(err)
	}
	b := Balance(all)
	if b[AccountPlatformCash] != 29067 || b[AccountPlatformFees] != -29067 || b["buyer:41"] != 0 || b["provider:31"] != 0 || b["provider:32"] != 0 {
		t.Errorf("balances = %v", b)
	}
	// Half-way (refund done, transfers not yet) is balanced but not settled.
	if err := CheckBalanced(all[:len(all)-1]); err != nil {
		t.Error(err)
	}
	if err := CheckSettled(all[:len(all)-1], 9); err == nil || !strings.Contains(err.Error(), "provider:32 is owed $6.00") {
		t.Errorf("half-way settlement: %v", err)
	}
}

func TestLedgerNothingToMove(t *testing.T) {
	st := Statement{ReservationID: 4, BuyerID: 1, Pieces: []PieceStatement{{ProviderID: 2, Paid: 0}}}
	if e := SettlementEntries(st, slaT0); len(e) != 0 {
		t.Errorf("entries for zero amounts: %+v", e)
	}
	r := Reservation{ID: 4, Pieces: []ReservationPiece{{ID: 1, ProviderID: 2}}}
	if e, err := ChargeEntries(r, "pi", slaT0); err != nil || len(e) != 0 {
		t.Errorf("free reservation: %+v %v", e, err)
	}
	r.AmountCents = 5
	if _, err := ChargeEntries(r, "pi", slaT0); ErrorCode(err) != CodeInvalid {
		t.Errorf("amount mismatch: %v", err)
	}
}

func TestCheckBalancedRejects(t *testing.T) {
	good := LedgerEntry{ReservationID: 1, Kind: EntryFee, Debit: "provider:1", Credit: AccountPlatformFees, Amount: 5, IdempotencyKey: "k"}
	tests := []struct {
		name string
		mod  func(*LedgerEntry)
		want string
	}{
		{"reservation", func(e *LedgerEntry) { e.ReservationID = 0 }, "no reservation"},
		{"kind", func(e *LedgerEntry) { e.Kind = "gift" }, "unknown kind"},
		{"same account", func(e *LedgerEntry) { e.Credit = e.Debit }, "two different accounts"},
		{"no account", func(e *LedgerEntry) { e.Debit = "" }, "two different accounts"},
		{"zero", func(e *LedgerEntry) { e.Amount = 0 }, "not positive"},
		{"negative", func(e *LedgerEntry) { e.Amount = -3 }, "not positive"},
		{"duplicate key", func(e *LedgerEntry) {}, "used twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := good
			tt.mod(&e)
			err := CheckBalanced([]LedgerEntry{good, e})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want %q", err, tt.want)
			}
		})
	}
	other := good
	other.IdempotencyKey = "k2"
	if err := CheckBalanced([]LedgerEntry{good, other}); err != nil {
		t.Errorf("good entries: %v", err)
	}
}

// Every random settlement, recorded, leaves every buyer and provider at zero.
func TestLedgerSettlementProperty(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	for iter := 0; iter < 2000; iter++ {
		in := randomSettlement(rng)
		st, err := Settle(in)
		if err != nil {
			t.Fatal(err)
		}
		charges, err := ChargeEntries(in.Reservation, "pi_x", slaT0)
		if err != nil {
			t.Fatal(err)
		}
		all := append(charges, SettlementEntries(st, slaT0)...)
		if err := CheckSettled(all, in.Reservation.ID); err != nil {
			t.Fatalf("iteration %d: %v", iter, err)
		}
		b := Balance(all)
		if b[AccountPlatformCash] != st.Fee {
			t.Fatalf("iteration %d: cash %d, fee %d", iter, b[AccountPlatformCash], st.Fee)
		}
		var sum Cents
		for _, v := range b {
			sum += v
		}
		if sum != 0 {
			t.Fatalf("iteration %d: balances sum to %d", iter, sum)
		}
	}
}

func checkEntries(t *testing.T, got, want []LedgerEntry) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("entries = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("entry %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}
