package market

import (
	"net/mail"
	"strings"
	"time"
	"unicode/utf8"
)

// User is an account. One account may be both buyer and provider; admins
// are created only by the operator's command line.
type User struct {
	ID           int64
	Email        string
	DisplayName  string
	Organisation string
	IsBuyer      bool
	IsProvider   bool
	IsAdmin      bool
	Suspended    bool
	CreatedAt    time.Time
	// EmailVerifiedAt is when the owner confirmed the address by following
	// a link mailed to it; zero while unconfirmed.
	EmailVerifiedAt time.Time
}

// Verified reports whether the account's e-mail address is confirmed.
func (u User) Verified() bool { return !u.EmailVerifiedAt.IsZero() }

// MayAct reports whether anything may act for the account: book compute,
// list offers, bid, leave standing orders, list reserved time for resale,
// be paid out, or hold the things that act for it without its owner at
// the keyboard (API tokens, host tokens, SSH keys, saved cards). Only once
// its e-mail address is confirmed: until then the account may belong to
// someone who typed another person's address (a squatter), and whatever it
// created would outlive the real owner's reset. Browsing and quoting need
// no confirmation. The error is forbidden and says what to do.
//
// This is the one rule; the store's create methods and web's
// requireVerified both call it.
func (u User) MayAct() error {
	if u.Verified() {
		return nil
	}
	return &Error{Code: CodeForbidden, Message: "Confirm your e-mail address first: follow the link we sent to " + u.Email +
		". Until then you can browse and get quotes, but nothing can act for the account: no bookings, offers, bids, " +
		"standing orders, resale listings, payouts, API or host tokens, SSH keys or saved cards."}
}

// How long the links mailed for account recovery and verification work.
const (
	VerifyLinkTTL        = 48 * time.Hour // confirming the address given at sign-up
	AddressChangeLinkTTL = 48 * time.Hour // confirming a new address
	ResetLinkTTL         = time.Hour      // setting a new password
)

// Password limits. bcrypt reads at most 72 bytes; a longer password is
// refused with a message rather than silently truncated.
const (
	MinPasswordLen   = 10
	MaxPasswordBytes = 72
)

// SignUp is what a person submits to create an account.
type SignUp struct {
	Email        string
	Password     string
	DisplayName  string
	Organisation string
	IsBuyer      bool
	IsProvider   bool
}

// NormaliseEmail lower-cases and trims an address so one mailbox is one account.
func NormaliseEmail(s string) string { return strings.ToLower(strings.TrimSpace(s)) }

// ValidateSignUp checks a sign-up and normalises its fields in place.
func ValidateSignUp(s *SignUp) error {
	p := Problems{}
	s.Email = NormaliseEmail(s.Email)
	s.DisplayName = strings.TrimSpace(s.DisplayName)
	s.Organisation = strings.TrimSpace(s.Organisation)
	if msg := emailProblem(s.Email); msg != "" {
		p.Add("email", msg)
	}
	if msg := PasswordProblem(s.Password); msg != "" {
		p.Add("password", msg)
	}
	switch n := utf8.RuneCountInString(s.DisplayName); {
	case n == 0:
		p.Add("display_name", "Enter the name other people will see.")
	case n > 80:
		p.Add("display_name", "Keep the name under 80 characters.")
	}
	if msg := TextProblem(s.DisplayName, false); msg != "" {
		p.Add("display_name", msg)
	}
	if utf8.RuneCountInString(s.Organisation) > 120 {
		p.Add("organisation", "Keep the organisation under 120 characters.")
	}
	if msg := TextProblem(s.Organisation, false); msg != "" {
		p.Add("organisation", msg)
	}
	if !s.IsBuyer && !s.IsProvider {
		p.Add("roles", "Choose at least one: rent compute, or list compute.")
	}
	return p.Err()
}

// EmailProblem returns why email (normalised) is not an acceptable
// address, or "".
func EmailProblem(email string) string { return emailProblem(email) }

func emailProblem(email string) string {
	if email == "" {
		return "Enter your email address."
	}
	if len(email) > 254 {
		return "That email address is too long."
	}
	if msg := emailCharProblem(email); msg != "" {
		return msg
	}
	a, err := mail.ParseAddress(email)
	if err != nil || a.Address != email || !strings.Contains(email[strings.LastIndex(email, "@")+1:], ".") {
		return "Enter an email address like name@example.com."
	}
	return ""
}

// PasswordProblem returns why a new password is unacceptable, or "".
func PasswordProblem(pw string) string {
	switch {
	case utf8.RuneCountInString(pw) < MinPasswordLen:
		return "Use at least 10 characters."
	case len(pw) > MaxPasswordBytes:
		return "Use at most 72 bytes (fewer characters if you use accents or symbols)."
	}
	return ""
}
