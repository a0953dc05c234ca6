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
