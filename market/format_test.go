package market

import (
	"strings"
	"testing"
	"time"
)

func TestFormatEmissions(t *testing.T) {
	for _, c := range []struct {
		g    int64
		want string
	}{
		{0, "0 g CO2e"}, {640, "640 g CO2e"}, {999, "999 g CO2e"}, {1000, "1.0 kg CO2e"},
		{1049, "1.0 kg CO2e"}, {1050, "1.1 kg CO2e"}, {27_149, "27.1 kg CO2e"}, {1_204_000, "1,204.0 kg CO2e"}, {-5, "0 g CO2e"},
	} {
		if got := FormatEmissions(c.g); got != c.want {
			t.Errorf("FormatEmissions(%d) = %q, want %q", c.g, got, c.want)
		}
	}
}

func TestFormatNumbersOneWay(t *testing.T) {
	for _, c := range []struct {
		milli int64
		want  string
	}{
		{0, "0"}, {1250, "1.3"}, {12_000, "12"}, {99_940, "99.9"}, {99_950, "100"}, {676_600, "677"},
		{5_773_300, "5,773"}, {5_934_000, "5,934"}, {1_800_000, "1,800"},
	} {
		if got := FormatMilli(c.milli); got != c.want {
			t.Errorf("FormatMilli(%d) = %q, want %q", c.milli, got, c.want)
		}
	}
	for _, c := range []struct {
		n    int64
		want string
	}{{0, "0"}, {999, "999"}, {1000, "1,000"}, {1_234_567, "1,234,567"}, {-1500, "−1,500"}} {
		if got := FormatInt(c.n); got != c.want {
			t.Errorf("FormatInt(%d) = %q, want %q", c.n, got, c.want)
		}
	}
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.FixedZone("X", 3600))
	if got := FormatTime(at); got != "1 Dec 2026 09:00 UTC" {
		t.Errorf("FormatTime = %q", got)
	}
	if got := FormatDate(at); got != "1 Dec 2026" {
		t.Errorf("FormatDate = %q", got)
	}
	if got := FormatSpan(at, at.Add(9*time.Hour)); got != "1 Dec 2026 09:00 UTC – 1 Dec 2026 18:00 UTC" {
		t.Errorf("FormatSpan = %q", got)
	}
	if FormatTime(time.Time{}) != "—" || FormatDate(time.Time{}) != "—" {
		t.Error("zero time is not a dash")
	}
}

// Every ledger entry the marketplace writes reads the way its money went,
// for the staff and for each party of it.
func TestLedgerEntryDescribe(t *testing.T) {
	buyer, prov := BuyerAccount(3), ProviderAccount(7)
	for _, c := range []struct {
		e           LedgerEntry
		staff, b, p string
	}{
		{LedgerEntry{Kind: EntryCharge, Debit: AccountPlatformCash, Credit: prov},
			"Paid by the buyer, owed to provider #7", "Paid by the buyer, owed to the provider", "Paid by the buyer, owed to you"},
		{LedgerEntry{Kind: EntryCredit, Debit: prov, Credit: buyer},
			"Credit from provider #7's takings to buyer #3", "Credit from the provider's takings to you", "Credit from your takings to the buyer"},
		{LedgerEntry{Kind: EntryRefund, Debit: buyer, Credit: AccountPlatformCash},
			"Refund to buyer #3's card", "Refund to your card", "Refund to the buyer's card"},
		{LedgerEntry{Kind: EntryFee, Debit: prov, Credit: AccountPlatformFees},
			"Platform fee from provider #7's takings", "Platform fee from the provider's takings", "Platform fee from your takings"},
		{LedgerEntry{Kind: EntryFeeReversal, Debit: AccountPlatformFees, Credit: prov},
			"Platform fee given back to provider #7", "Platform fee given back to the provider", "Platform fee given back to you"},
		{LedgerEntry{Kind: EntryTransfer, Debit: prov, Credit: AccountPlatformCash},
			"Payout to provider #7's bank account", "Payout to the provider's bank account", "Payout to your bank account"},
		{LedgerEntry{Kind: EntryLoss, Debit: AccountPlatformLosses, Credit: buyer},
			"Credit to buyer #3, borne by the platform", "Credit to you, borne by the platform", "Credit to the buyer, borne by the platform"},
		{LedgerEntry{Kind: EntryChargeback, Debit: buyer, Credit: AccountPlatformCash},
			"Taken back by buyer #3's bank (chargeback)", "Taken back by your bank (chargeback)", "Taken back by the buyer's bank (chargeback)"},
		{LedgerEntry{Kind: EntryChargebackReversal, Debit: AccountPlatformCash, Credit: buyer},
			"Chargeback reversed: returned by buyer #3's bank", "Chargeback reversed: returned by your bank", "Chargeback reversed: returned by the buyer's bank"},
		{LedgerEntry{Kind: EntryReplacement, Debit: prov, Credit: ProviderAccount(9)},
			"Paid for a replacement: from provider #7's takings to provider #9", "Paid for a replacement: from the provider's takings to the provider",
			"Paid for the replacement of your failed piece, from your takings to its provider"},
	} {
		for _, r := range []struct{ reader, want string }{{"", c.staff}, {buyer, c.b}, {prov, c.p}} {
			if got := c.e.Describe(r.reader); got != r.want {
				t.Errorf("%s for %q = %q, want %q", c.e.Kind, r.reader, got, r.want)
			}
		}
	}
}

// The replacing provider reads the replacement's pay without the failing
// provider's name.
func TestReplacementEntryForTheReplacingProvider(t *testing.T) {
	e := LedgerEntry{Kind: EntryReplacement, Debit: ProviderAccount(7), Credit: ProviderAccount(9)}
	if got, want := e.Describe(ProviderAccount(9)), "Paid for your replacement of another provider's failed piece, from their takings"; got != want {
		t.Errorf("Describe = %q, want %q", got, want)
	}
}

// Relative throughput is stored in thousandths of the reference and typed
// and read as a percentage; every other figure is a whole number.
func TestFigureValuesAsPeopleWriteThem(t *testing.T) {
	for _, c := range []struct {
		k       FigureKind
		in      string
		stored  int64
		shown   string
		written string
	}{
		{FigureRelThroughput, "317", 3170, "317", "317% of an A100 80GB SXM"},
		{FigureRelThroughput, "105.5", 1055, "105.5", "105.5% of an A100 80GB SXM"},
		{FigureRelThroughput, " 100 %", 1000, "100", "100% of an A100 80GB SXM"},
		{FigureBF16TFLOPS, "1979", 1979, "1979", "1,979 TFLOPS"},
		{FigureMemBandwidth, "3350", 3350, "3350", "3,350 GB/s"},
	} {
		got, err := ParseFigureValue(c.k, c.in)
		if err != nil || got != c.stored {
			t.Errorf("ParseFigureValue(%s, %q) = %d, %v; want %d", c.k, c.in, got, err, c.stored)
		}
		if s := FormatFigureValue(c.k, c.stored); s != c.shown {
			t.Errorf("FormatFigureValue(%s, %d) = %q, want %q", c.k, c.stored, s, c.shown)
		}
		if s := FormatFigure(c.k, c.stored); s != c.written {
			t.Errorf("FormatFigure(%s, %d) = %q, want %q", c.k, c.stored, s, c.written)
		}
	}
	for _, c := range []struct {
		k  FigureKind
		in string
	}{{FigureRelThroughput, "10.55"}, {FigureRelThroughput, "abc"}, {FigureRelThroughput, "-5"}, {FigureRelThroughput, "1."}, {FigureBF16TFLOPS, "9.5"}, {FigureBF16TFLOPS, "-1"}} {
		if _, err := ParseFigureValue(c.k, c.in); err == nil {
			t.Errorf("ParseFigureValue(%s, %q) accepted", c.k, c.in)
		}
	}
	if strings.Contains(FigureFormUnit(FigureRelThroughput), "‰") {
		t.Error("the form asks for thousandths")
	}
}

// A sparsity figure (twice the dense peak) is caught before the admin sees
// it, with the published figure and the reason; figures within the
// catalogue are not.
func TestFiguresAboveCatalogue(t *testing.T) {
	o := Offer{AcceleratorID: "nvidia-h100-80gb-sxm", Figures: []Figure{
		{Kind: FigureBF16TFLOPS, Value: 1979}, {Kind: FigureMemBandwidth, Value: 3350}, {Kind: FigureRelThroughput, Value: 3487},
	}}
	got := FiguresAboveCatalogue(o)
	if len(got) != 1 || got[0].Kind != FigureBF16TFLOPS || got[0].Stated != 1979 || got[0].Published != 989 || got[0].Model != "H100 80GB SXM" {
		t.Fatalf("FiguresAboveCatalogue = %+v, want only the BF16 figure against 989", got)
	}
	if m := got[0].ProviderMessage(); !strings.Contains(m, "1,979 TFLOPS") || !strings.Contains(m, "989 TFLOPS") || !strings.Contains(m, "sparsity") {
		t.Errorf("provider message %q lacks the figures or the reason", m)
	}
	o.Figures[2].Value = 3488 // more than 10 % above 3170
	got = FiguresAboveCatalogue(o)
	if len(got) != 2 || got[1].Kind != FigureRelThroughput || !strings.Contains(got[1].ProviderMessage(), "348.8%") || strings.Contains(got[1].AdminMessage(), "‰") {
		t.Errorf("relative throughput above the tolerance: %+v", got)
	}
	if pub, ok := PublishedFigure("nvidia-h100-80gb-sxm", FigureAllReduce); ok || pub != 0 {
		t.Error("all-reduce has a published figure")
	}
	for _, c := range []RedFlagCode{FlagFigureAboveCatalogue, FlagPriceLow, FlagPriceHigh, FlagCapacityAboveHistory, FlagManyIncidents, FlagUpheldDisputes} {
		if l := c.Label(); l == "" || l == "Warning" || strings.Contains(l, "_") {
			t.Errorf("flag %s reads %q", c, l)
		}
	}
	for _, s := range []SettlementState{SettlementPending, SettlementWaiting, SettlementFailed, SettlementDone} {
		if l := s.Label(); l == string(s) || l == "unknown" {
			t.Errorf("settlement state %s reads %q", s, l)
		}
	}
	for _, p := range []PayoutState{PayoutPending, PayoutHeld, PayoutFrozen} {
		if l := p.Label(); l == string(p) || l == "unknown" {
			t.Errorf("payout state %s reads %q", p, l)
		}
	}
}
