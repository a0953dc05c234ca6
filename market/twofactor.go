package market

import (
	"strings"
	"time"
)

// Two-factor sign-in: time-based one-time passwords (TOTP, RFC 6238) with
// 30-second steps and 6 digits (what authenticator apps assume), plus
// single-use recovery codes. The code arithmetic itself lives where the
// TOTP library is (account); these are the rules around it.
const (
	// TOTPPeriod is the length of one time step.
	TOTPPeriod = 30 * time.Second
	// TOTPDigits is the length of a code.
	TOTPDigits = 6
	// TOTPSkew is how many steps either side of now a code may be for, to
	// allow for a phone's clock that is a little off (RFC 6238 §5.2).
	TOTPSkew = 1
	// RecoveryCodeCount is how many recovery codes a person gets at once.
	RecoveryCodeCount = 10
	// RecoveryCodeLen is the characters of a recovery code without its
	// dashes: 12 from a 32-letter alphabet, 60 bits.
	RecoveryCodeLen = 12
	// RecoveryAlphabet is what recovery codes are written in: lower-case
	// letters and digits without 0, 1, l and o, which are easy to misread.
	RecoveryAlphabet = "abcdefghijkmnpqrstuvwxyz23456789"
	// LoginChallengeTTL is how long a person has to enter their code once
	// their password was accepted.
	LoginChallengeTTL = 5 * time.Minute
)

// TOTPStep is the time step t falls in (RFC 6238's T: unix seconds over
// the period).
func TOTPStep(t time.Time) int64 { return t.Unix() / int64(TOTPPeriod/time.Second) }

// TOTPStepStart is when step begins.
func TOTPStepStart(step int64) time.Time {
	return time.Unix(step*int64(TOTPPeriod/time.Second), 0).UTC()
}

// TOTPWindow are the steps a code entered at now may be for, oldest first:
// now's and TOTPSkew either side.
func TOTPWindow(now time.Time) []int64 {
	cur := TOTPStep(now)
	out := make([]int64, 0, 2*TOTPSkew+1)
	for s := cur - TOTPSkew; s <= cur+TOTPSkew; s++ {
		out = append(out, s)
	}
	return out
}

// TOTPStepFresh reports whether a code for step may still be accepted when
// lastUsed is the last step a code was accepted for: only later steps, so
// an accepted code, and any older one, cannot be used again.
func TOTPStepFresh(step, lastUsed int64) bool { return step > lastUsed }

// SecondFactor is what a person typed as their second factor, normalised.
type SecondFactor struct {
	Code     string // a TOTP code: TOTPDigits digits
	Recovery string // or a recovery code: RecoveryCodeLen characters, no dashes
}

// ParseSecondFactor reads a TOTP code ("123 456" and "123456" alike) or a
// recovery code (any case, with or without dashes and spaces). Anything
// else is invalid with a message for the code field.
func ParseSecondFactor(input string) (SecondFactor, error) {
	s := strings.Map(func(r rune) rune {
		switch r {
		case ' ', '-', '\t':
			return -1
		}
		return r
	}, strings.ToLower(strings.TrimSpace(input)))
	switch {
	case s == "":
		return SecondFactor{}, fieldError("code", "Enter the 6-digit code from your authenticator app, or a recovery code.")
	case len(s) == TOTPDigits && allIn(s, "0123456789"):
		return SecondFactor{Code: s}, nil
	case len(s) == RecoveryCodeLen && allIn(s, RecoveryAlphabet):
		return SecondFactor{Recovery: s}, nil
	}
	return SecondFactor{}, fieldError("code", "That is not a code: enter the 6 digits your authenticator app shows, or one of your recovery codes.")
}

// ParseTOTPCode reads a TOTP code only (setting up or turning off
// two-factor sign-in takes no recovery code).
func ParseTOTPCode(input string) (string, error) {
	f, err := ParseSecondFactor(input)
	if err != nil || f.Code == "" {
		return "", fieldError("code", "Enter the 6-digit code your authenticator app shows now.")
	}
	return f.Code, nil
}

// FormatRecoveryCode writes a recovery code in groups of four for reading
// out: "abcd-efgh-jkmn".
func FormatRecoveryCode(code string) string {
	var b strings.Builder
	for i, r := range code {
		if i > 0 && i%4 == 0 {
			b.WriteByte('-')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// TwoFactorRequired reports whether u must have two-factor sign-in on to
// use their account fully: administrators, who can refund money and
// suspend providers. Buyers and providers choose.
func TwoFactorRequired(u User) bool { return u.IsAdmin }

func allIn(s, alphabet string) bool {
	for _, r := range s {
		if !strings.ContainsRune(alphabet, r) {
			return false
		}
	}
	return true
}

func fieldError(field, msg string) *Error {
	return &Error{Code: CodeInvalid, Message: msg, Fields: map[string]string{field: msg}}
}
