package market

import (
	"reflect"
	"testing"
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

// TestCheckDisputeDecision: which decisions may be made, row by row.
func TestCheckDisputeDecision(t *testing.T) {
	for _, tc := range []struct {
		name  string
		d     DisputeDecision
		code  Code
		field string
	}{
		{"an open dispute, rejected with a reason", DisputeDecision{Reason: "as listed", Open: true}, "", ""},
		{"a credit on an open dispute", DisputeDecision{Reason: "slow", Credit: 500, Open: true}, "", ""},
		{"no reason", DisputeDecision{Reason: "  ", Credit: 500, Open: true}, CodeInvalid, "reason"},
		{"a negative credit", DisputeDecision{Reason: "x", Credit: -1, Open: true}, CodeInvalid, "credit"},
		{"decided already", DisputeDecision{Reason: "x", Open: false}, CodeConflict, ""},
		{"a chargeback the bank has not ruled on", DisputeDecision{Reason: "x", Open: true, Chargeback: true}, CodeConflict, ""},
		{"a chargeback the bank ruled against us", DisputeDecision{Reason: "x", Credit: 100, Open: true, Chargeback: true, BankLost: true}, "", ""},
	} {
		err := CheckDisputeDecision(tc.d)
		if ErrorCode(err) != tc.code && !(tc.code == "" && err == nil) {
			t.Errorf("%s: %v, want code %q", tc.name, err, tc.code)
		}
		if tc.field != "" && FieldErrors(err)[tc.field] == "" {
			t.Errorf("%s: %v, want a message for %s", tc.name, err, tc.field)
		}
	}
	if err := CheckDisputeCredit(7665, 2628, 10512, 7884); FieldErrors(err)["credit"] != "The credit can be at most $26.28: $105.12 paid, less $78.84 refunded or credited already." {
		t.Errorf("a credit above the limit: %v", err)
	}
	if err := CheckDisputeCredit(2628, 2628, 10512, 7884); err != nil {
		t.Errorf("the largest credit: %v", err)
	}
}
