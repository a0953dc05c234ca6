package market

import (
	"slices"
	"testing"
	"time"
)

func TestTOTPStep(t *testing.T) {
	for _, c := range []struct {
		at   time.Time
		want int64
	}{
		{time.Unix(59, 0), 1}, // RFC 6238 appendix B's first vector: T = 1
		{time.Unix(1111111109, 0), 37037036},
		{time.Unix(1234567890, 0), 41152263},
		{time.Unix(2000000000, 0), 66666666},
		{time.Unix(29, 0), 0},
		{time.Unix(30, 0), 1},
	} {
		if got := TOTPStep(c.at); got != c.want {
			t.Errorf("TOTPStep(%d) = %d, want %d", c.at.Unix(), got, c.want)
		}
		if start := TOTPStepStart(c.want); start.Unix() > c.at.Unix() || c.at.Unix()-start.Unix() >= 30 {
			t.Errorf("TOTPStepStart(%d) = %d, not within 30 s before %d", c.want, start.Unix(), c.at.Unix())
		}
	}
}

func TestTOTPWindowAndFreshSteps(t *testing.T) {
	if got, want := TOTPWindow(time.Unix(3000, 0)), []int64{99, 100, 101}; !slices.Equal(got, want) {
		t.Errorf("TOTPWindow at step 100: %v, want %v", got, want)
	}
	if got, want := TOTPWindow(time.Unix(3029, 0)), []int64{99, 100, 101}; !slices.Equal(got, want) {
		t.Errorf("TOTPWindow at the end of step 100: %v, want %v", got, want)
	}
	for _, c := range []struct {
		step, lastUsed int64
		want           bool
	}{
		{100, 0, true},
		{100, 99, true},
		{100, 100, false},
		{99, 100, false},
		{101, 100, true},
	} {
		if got := TOTPStepFresh(c.step, c.lastUsed); got != c.want {
			t.Errorf("TOTPStepFresh(%d, %d) = %v, want %v", c.step, c.lastUsed, got, c.want)
		}
	}
}

func TestParseSecondFactor(t *testing.T) {
	for _, c := range []struct {
		in             string
		code, recovery string
		bad            bool
	}{
		{in: "123456", code: "123456"},
		{in: " 123 456 ", code: "123456"},
		{in: "123-456", code: "123456"},
		{in: "abcd-efgh-jkmn", recovery: "abcdefghjkmn"},
		{in: "ABCD EFGH JKMN", recovery: "abcdefghjkmn"},
		{in: "abcdefghjkmn", recovery: "abcdefghjkmn"},
		{in: "", bad: true},
		{in: "12345", bad: true},
		{in: "1234567", bad: true},
		{in: "12345a", bad: true},
		{in: "abcd-efgh-jkm0", bad: true}, // 0 is not in the alphabet
		{in: "abcd-efgh-jkmno", bad: true},
		{in: "１２３４５６", bad: true}, // full-width digits
	} {
		f, err := ParseSecondFactor(c.in)
		if c.bad {
			if ErrorCode(err) != CodeInvalid || FieldErrors(err)["code"] == "" {
				t.Errorf("%q: %+v, %v; want invalid with a message on code", c.in, f, err)
			}
			continue
		}
		if err != nil || f.Code != c.code || f.Recovery != c.recovery {
			t.Errorf("%q: %+v, %v; want code %q recovery %q", c.in, f, err, c.code, c.recovery)
		}
	}
	if _, err := ParseTOTPCode("abcd-efgh-jkmn"); ErrorCode(err) != CodeInvalid {
		t.Errorf("a recovery code taken as a TOTP code: %v", err)
	}
	if c, err := ParseTOTPCode("000 001"); err != nil || c != "000001" {
		t.Errorf("ParseTOTPCode: %q, %v", c, err)
	}
}

func TestFormatRecoveryCode(t *testing.T) {
	if got := FormatRecoveryCode("abcdefghjkmn"); got != "abcd-efgh-jkmn" {
		t.Errorf("got %q", got)
	}
	f, err := ParseSecondFactor(FormatRecoveryCode("23456789abcd"))
	if err != nil || f.Recovery != "23456789abcd" {
		t.Errorf("formatted code does not parse back: %+v, %v", f, err)
	}
}

func TestTwoFactorRequired(t *testing.T) {
	for _, c := range []struct {
		u    User
		want bool
	}{
		{User{IsAdmin: true}, true},
		{User{IsAdmin: true, IsBuyer: true}, true},
		{User{IsBuyer: true}, false},
		{User{IsProvider: true}, false},
	} {
		if got := TwoFactorRequired(c.u); got != c.want {
			t.Errorf("%+v: %v, want %v", c.u, got, c.want)
		}
	}
}
