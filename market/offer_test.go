package market

import (
	"strings"
	"testing"
	"time"
)

var validationNow = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

func validOffer() Offer {
	return Offer{
		Title: "8× H100 SXM", AcceleratorID: "nvidia-h100-80gb-sxm", MemoryGB: 80, DevicesPerNode: 8, Nodes: 2,
		Interconnect: InterconnectNVLink, NetworkID: "infiniband-400", PlacementGroup: true,
		CPUCores: 96, RAMGB: 1024, StorageGB: 8000, DriverVersion: "550.90", CUDAVersion: "12.4",
		OSImage: "Ubuntu 22.04", ContainerRuntime: "Docker 26", RegionID: "eu-north-se",
		AvailableFrom: validationNow, AvailableUntil: validationNow.AddDate(0, 1, 0), MinRentalHours: 1, MaxRentalHours: 720,
		ProvisioningMins: 10, PriceCentsPerDeviceHour: 239, StorageCentsPerGBMonth: 8, EgressCentsPerGB: 5,
		BillingBasis: BillingWallClock, UptimeBP: 9950, CreditSchedule: []CreditTier{{9950, 1000}, {9900, 2500}},
		CreditCapBP: 10000, FreeCancelHours: 24, CancelFeeBP: 2500,
	}
}

func TestValidateOffer(t *testing.T) {
	tests := []struct {
		name  string
		edit  func(o *Offer)
		field string // "" = valid
		msg   string // part of the field's message
	}{
		{"valid", func(o *Offer) {}, "", ""},
		{"empty title", func(o *Offer) { o.Title = "  " }, "title", "short title"},
		{"unknown accelerator", func(o *Offer) { o.AcceleratorID = "nvidia-h999" }, "accelerator", "catalogue"},
		{"memory disagrees with catalogue", func(o *Offer) { o.MemoryGB = 96 }, "memory_gb", "has 80 GB per device"},
		{"too many devices per node", func(o *Offer) { o.DevicesPerNode = 17 }, "devices_per_node", "between 1 and 16"},
		{"no nodes", func(o *Offer) { o.Nodes = 0 }, "nodes", "between 1"},
		{"nvlink with one device", func(o *Offer) { o.DevicesPerNode = 1 }, "interconnect", "choose PCIe"},
		{"several nodes without network", func(o *Offer) { o.NetworkID = "none"; o.PlacementGroup = false }, "network", "need a network"},
		{"placement group without RDMA", func(o *Offer) { o.NetworkID = "ethernet-100" }, "placement_group", "RDMA"},
		{"bad driver version", func(o *Offer) { o.DriverVersion = "latest" }, "driver_version", "numbers separated by dots"},
		{"ROCm named for AMD", func(o *Offer) {
			o.AcceleratorID, o.MemoryGB, o.CUDAVersion = "amd-mi300x-192gb-oam", 192, "six"
		}, "cuda_version", "ROCm"},
		{"unknown region", func(o *Offer) { o.RegionID = "mars-1" }, "region", "Choose a region"},
		{"carbon out of range", func(o *Offer) { o.CarbonGPerKWh = 2000 }, "carbon", "between 0 and 1,500"},
		{"window ends before it starts", func(o *Offer) { o.AvailableUntil = o.AvailableFrom }, "available_until", "end after it starts"},
		{"window already over", func(o *Offer) {
			o.AvailableFrom, o.AvailableUntil = validationNow.AddDate(0, -2, 0), validationNow.AddDate(0, -1, 0)
		}, "available_until", "already ended"},
		{"min rental longer than window", func(o *Offer) { o.MinRentalHours = 24 * 40; o.MaxRentalHours = 24 * 40 }, "min_rental_hours", "longer than the availability window"},
		{"max below min", func(o *Offer) { o.MaxRentalHours = 0 }, "max_rental_hours", "at least the minimum"},
		// 5,000,000 hours overflows a time.Duration: it was accepted, and
		// then every booking of the offer was refused.
		{"max rental beyond any window", func(o *Offer) { o.MaxRentalHours = 5_000_000 }, "max_rental_hours", "at most 26,352 hours"},
		{"max rental one hour beyond three years", func(o *Offer) { o.MaxRentalHours = 3*366*24 + 1 }, "max_rental_hours", "at most 26,352 hours"},
		{"min rental beyond any window", func(o *Offer) { o.MinRentalHours = 1 << 40 }, "min_rental_hours", "between 1 and 26,352 hours"},
		{"NUL in the title", func(o *Offer) { o.Title = "8× H100\x00 admin" }, "title", "U+0000"},
		{"escape sequence in the OS image", func(o *Offer) { o.OSImage = "Ubuntu \x1b[31m22.04" }, "os_image", "U+001B"},
		{"C1 control in the runtime", func(o *Offer) { o.ContainerRuntime = "Docker\u0085 26" }, "container_runtime", "U+0085"},
		{"line break in the power note", func(o *Offer) { o.PowerNote = "hydro\nwind" }, "power_note", "U+000A"},
		{"invalid UTF-8 in a method", func(o *Offer) {
			o.Figures = []Figure{{Kind: FigureAllReduce, Value: 370, Basis: FigureEstimated, Method: "nccl \xff"}}
		}, "figure_allreduce_busbw", "not valid UTF-8"},
		{"free price", func(o *Offer) { o.PriceCentsPerDeviceHour = 0 }, "price", "between $0.01"},
		{"interruptible without price", func(o *Offer) { o.Interruptible = true }, "interruptible_price", "Enter the spot floor price"},
		{"interruptible dearer than on-demand", func(o *Offer) { o.Interruptible, o.InterruptibleCentsPerDH = true, 300 }, "interruptible_price", "cannot exceed"},
		{"unknown billing basis", func(o *Offer) { o.BillingBasis = "vibes" }, "billing_basis", "Choose a billing basis"},
		{"uptime below 90%", func(o *Offer) { o.UptimeBP = 8000 }, "uptime", "between 90.00%"},
		{"tier above guarantee", func(o *Offer) { o.CreditSchedule = []CreditTier{{9990, 1000}} }, "credit_schedule", "above the guaranteed uptime"},
		{"tiers out of order", func(o *Offer) { o.CreditSchedule = []CreditTier{{9900, 2500}, {9950, 1000}} }, "credit_schedule", "highest uptime down"},
		{"estimated figure without method", func(o *Offer) {
			o.Figures = []Figure{{Kind: FigureAllReduce, Value: 370, Basis: FigureEstimated}}
		}, "figure_allreduce_busbw", "how this estimate was measured"},
		{"provider claims verified", func(o *Offer) {
			o.Figures = []Figure{{Kind: FigureBF16TFLOPS, Value: 900, Basis: FigureVerified}}
		}, "figure_bf16_tflops", "Only the platform"},
		{"figure stated twice", func(o *Offer) {
			o.Figures = []Figure{{Kind: FigureBF16TFLOPS, Value: 900, Basis: FigureGuaranteed}, {Kind: FigureBF16TFLOPS, Value: 800, Basis: FigureGuaranteed}}
		}, "figure_bf16_tflops", "once"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := validOffer()
			tt.edit(&o)
			err := ValidateOffer(&o, validationNow)
			if tt.field == "" {
				if err != nil {
					t.Fatalf("valid offer rejected: %v", err)
				}
				return
			}
			if ErrorCode(err) != CodeInvalid {
				t.Fatalf("code %q, want invalid (err %v)", ErrorCode(err), err)
			}
			msg, ok := FieldErrors(err)[tt.field]
			if !ok {
				t.Fatalf("no message for %q; got %v", tt.field, FieldErrors(err))
			}
			if !strings.Contains(msg, tt.msg) {
				t.Errorf("%s: message %q does not mention %q", tt.field, msg, tt.msg)
			}
			if len(FieldErrors(err)) != 1 {
				t.Errorf("one bad field gave %d messages: %v", len(FieldErrors(err)), FieldErrors(err))
			}
		})
	}
}

func TestValidateOfferDefaultsCarbonToRegion(t *testing.T) {
	o := validOffer()
	o.CarbonGPerKWh = 0
	if err := ValidateOffer(&o, validationNow); err != nil {
		t.Fatal(err)
	}
	if o.CarbonGPerKWh != 41 {
		t.Fatalf("carbon %d, want Sweden's default 41", o.CarbonGPerKWh)
	}
	o.Interruptible, o.InterruptibleCentsPerDH, o.PreemptNoticeMins = false, 100, 5
	if err := ValidateOffer(&o, validationNow); err != nil || o.InterruptibleCentsPerDH != 0 || o.PreemptNoticeMins != 0 {
		t.Fatalf("interruptible terms kept on a non-interruptible offer: %v %+v", err, o)
	}
}

func TestParseCents(t *testing.T) {
	tests := []struct {
		in   string
		want Cents
		ok   bool
	}{
		{"2.49", 249, true}, {"2.5", 250, true}, {"3", 300, true}, {"$1.05", 105, true}, {" 0.01 ", 1, true},
		{".5", 50, true}, {"2.999", 0, false}, {"-1", 0, false}, {"1e3", 0, false}, {"1,000", 0, false},
		{"", 0, false}, {"2.", 0, false}, {"abc", 0, false}, {"1234567890", 0, false},
	}
	for _, tt := range tests {
		got, err := ParseCents(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("ParseCents(%q) = %d, %v; want %d, ok=%v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

func TestCentsString(t *testing.T) {
	for c, want := range map[Cents]string{0: "$0.00", 5: "$0.05", 123456: "$1,234.56", -50: "-$0.50", 100000000: "$1,000,000.00"} {
		if got := c.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", c, got, want)
		}
	}
}

func TestMulDivRound(t *testing.T) {
	tests := []struct{ a, b, c, want int64 }{
		{10, 1, 4, 3},   // 2.5 → 3, half away from zero
		{-10, 1, 4, -3}, // -2.5 → -3
		{7, 1, 3, 2},    // 2.33 → 2
		{239, 8 * 24 * 3600, 3600, 239 * 8 * 24},
		{1 << 40, 1 << 40, 1 << 30, 1 << 50}, // product beyond int64, quotient fits
	}
	for _, tt := range tests {
		if got := MulDivRound(tt.a, tt.b, tt.c); got != tt.want {
			t.Errorf("MulDivRound(%d, %d, %d) = %d, want %d", tt.a, tt.b, tt.c, got, tt.want)
		}
	}
}

func TestCreditScheduleRoundTrip(t *testing.T) {
	tiers, err := ParseCreditSchedule("99.5:10, 99:25, 95:100")
	if err != nil {
		t.Fatal(err)
	}
	want := []CreditTier{{9950, 1000}, {9900, 2500}, {9500, 10000}}
	if len(tiers) != len(want) {
		t.Fatalf("tiers %v", tiers)
	}
	for i := range want {
		if tiers[i] != want[i] {
			t.Errorf("tier %d = %v, want %v", i, tiers[i], want[i])
		}
	}
	if got := FormatCreditSchedule(tiers); got != "99.5:10, 99:25, 95:100" {
		t.Errorf("format = %q", got)
	}
	for _, bad := range []string{"99.5", "99.5:ten", "101:5", "99.555:1"} {
		if _, err := ParseCreditSchedule(bad); err == nil {
			t.Errorf("ParseCreditSchedule(%q) accepted", bad)
		}
	}
}

func TestValidateSignUp(t *testing.T) {
	base := func() SignUp {
		return SignUp{Email: " Ada@Example.COM ", Password: "correct horse battery", DisplayName: " Ada ", IsBuyer: true}
	}
	s := base()
	if err := ValidateSignUp(&s); err != nil {
		t.Fatal(err)
	}
	if s.Email != "ada@example.com" || s.DisplayName != "Ada" {
		t.Errorf("not normalised: %+v", s)
	}
	tests := []struct {
		name, field string
		edit        func(s *SignUp)
	}{
		{"bad email", "email", func(s *SignUp) { s.Email = "ada" }},
		{"email without domain dot", "email", func(s *SignUp) { s.Email = "ada@localhost" }},
		{"short password", "password", func(s *SignUp) { s.Password = "short" }},
		{"password over 72 bytes", "password", func(s *SignUp) { s.Password = strings.Repeat("é", 40) }},
		{"no name", "display_name", func(s *SignUp) { s.DisplayName = "" }},
		{"no role", "roles", func(s *SignUp) { s.IsBuyer = false }},
		{"NUL in the name", "display_name", func(s *SignUp) { s.DisplayName = "Ada\x00" }},
		{"escape in the organisation", "organisation", func(s *SignUp) { s.Organisation = "\x1b]0;pwned\x07" }},
		{"right-to-left override in the email", "email", func(s *SignUp) { s.Email = "moc.elpmaxe@\u202eada@example.com" }},
		{"right-to-left override in the local part", "email", func(s *SignUp) { s.Email = "ad\u202ea@example.com" }},
		{"zero-width space in the email", "email", func(s *SignUp) { s.Email = "ad\u200ba@example.com" }},
		{"zero-width joiner in the email", "email", func(s *SignUp) { s.Email = "ada\u200d@example.com" }},
		{"word joiner in the domain", "email", func(s *SignUp) { s.Email = "ada@exa\u2060mple.com" }},
		{"soft hyphen in the email", "email", func(s *SignUp) { s.Email = "a\u00adda@example.com" }},
		{"byte-order mark in the email", "email", func(s *SignUp) { s.Email = "\ufeffada@example.com" }},
	}
	for _, tt := range tests {
		s := base()
		tt.edit(&s)
		err := ValidateSignUp(&s)
		if _, ok := FieldErrors(err)[tt.field]; !ok {
			t.Errorf("%s: no message for %q (got %v)", tt.name, tt.field, err)
		}
	}
}

func TestCancellationFee(t *testing.T) {
	start := validationNow.Add(48 * time.Hour)
	r := Reservation{State: ReservationConfirmed, Pieces: []ReservationPiece{
		{Start: start, End: start.Add(time.Hour), AmountCents: 1001, FreeCancelHours: 24, CancelFeeBP: 2500},
		{Start: start, End: start.Add(time.Hour), AmountCents: 400, FreeCancelHours: 72, CancelFeeBP: 1000},
	}}
	if fee, err := CancellationFee(r, validationNow); err != nil || fee != 40 {
		t.Errorf("48 h before: fee %d (%v), want only the 72 h piece's 10%% = 40", fee, err)
	}
	if fee, err := CancellationFee(r, start.Add(-time.Hour)); err != nil || fee != 250+40 {
		t.Errorf("1 h before: fee %d (%v), want 250 (25%% of 1001, rounded) + 40", fee, err)
	}
	if _, err := CancellationFee(r, start); ErrorCode(err) != CodeConflict {
		t.Errorf("after start: %v, want conflict", err)
	}
	r.State = ReservationHeld
	if fee, err := CancellationFee(r, start.Add(-time.Hour)); err != nil || fee != 0 {
		t.Errorf("unpaid hold: fee %d (%v), want 0", fee, err)
	}
}

func TestEveryRegionCountryHasAName(t *testing.T) {
	for _, cc := range Countries() {
		if CountryName(cc) == cc {
			t.Errorf("country %s of a region has no name", cc)
		}
	}
	if CountryName("XX") != "XX" {
		t.Error("an unknown code should come back as itself")
	}
}
