package market

import (
	"reflect"
	"testing"
	"time"
)

func TestSplitCredit(t *testing.T) {
	tests := []struct {
		name   string
		credit Cents
		shares map[int64]Cents
		want   map[int64]Cents
	}{
		{"one provider takes it all", 1234, map[int64]Cents{7: 5000}, map[int64]Cents{7: 1234}},
		{"even split", 1000, map[int64]Cents{1: 500, 2: 500}, map[int64]Cents{1: 500, 2: 500}},
		{"odd cent to the lower id on a tie", 1001, map[int64]Cents{1: 500, 2: 500}, map[int64]Cents{1: 501, 2: 500}},
		{"largest remainder", 100, map[int64]Cents{1: 1, 2: 2}, map[int64]Cents{1: 33, 2: 67}},
		{"zero shares are skipped", 50, map[int64]Cents{1: 0, 2: 10}, map[int64]Cents{2: 50}},
		{"nothing to split", 0, map[int64]Cents{1: 10}, map[int64]Cents{}},
		{"no shares", 10, nil, map[int64]Cents{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := SplitCredit(tt.credit, tt.shares)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("SplitCredit(%d, %v) = %v, want %v", tt.credit, tt.shares, got, tt.want)
			}
		})
	}
	// The parts always add up to the credit.
	for credit := Cents(1); credit < 500; credit += 7 {
		var sum Cents
		for _, c := range SplitCredit(credit, map[int64]Cents{3: 333, 5: 1, 9: 1000}) {
			sum += c
		}
		if sum != credit {
			t.Fatalf("parts of %d add up to %d", credit, sum)
		}
	}
}

func TestDisputeCreditEntries(t *testing.T) {
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	es := DisputeCreditEntries(12, 3, 40, map[int64]Cents{8: 300, 7: 200, 9: 0}, "re_1", at)
	want := []LedgerEntry{
		{ReservationID: 12, Kind: EntryCredit, Debit: "provider:7", Credit: "buyer:40", Amount: 200, IdempotencyKey: "dispute_3_credit_p7", At: at},
		{ReservationID: 12, Kind: EntryCredit, Debit: "provider:8", Credit: "buyer:40", Amount: 300, IdempotencyKey: "dispute_3_credit_p8", At: at},
		{ReservationID: 12, Kind: EntryRefund, Debit: "buyer:40", Credit: AccountPlatformCash, Amount: 500, StripeRef: "re_1", IdempotencyKey: "dispute_3_refund", At: at},
	}
	if !reflect.DeepEqual(es, want) {
		t.Fatalf("entries:\n%+v\nwant\n%+v", es, want)
	}
	if err := CheckBalanced(es); err != nil {
		t.Errorf("entries do not balance: %v", err)
	}
	if b := Balance(es); b["buyer:40"] != 0 {
		t.Errorf("the buyer's account is %d after a credit refunded in full, want 0", b["buyer:40"])
	}
	if es := DisputeCreditEntries(1, 1, 1, nil, "", at); len(es) != 0 {
		t.Errorf("no credit made entries: %v", es)
	}
}

func TestMaxDisputeCreditAndStatement(t *testing.T) {
	if got := MaxDisputeCredit(1000, 300); got != 700 {
		t.Errorf("MaxDisputeCredit = %d", got)
	}
	if got := MaxDisputeCredit(1000, 1200); got != 0 {
		t.Errorf("MaxDisputeCredit over-refunded = %d, want 0", got)
	}
	if s, err := ValidateDisputeStatement("  it broke  "); err != nil || s != "it broke" {
		t.Errorf("ValidateDisputeStatement = %q, %v", s, err)
	}
	if _, err := ValidateDisputeStatement(" "); ErrorCode(err) != CodeInvalid || FieldErrors(err)["statement"] == "" {
		t.Errorf("empty statement: %v", err)
	}
}
