package market

import (
	"strings"
	"time"
)

// PaymentMethod is a card a buyer saved with the payment processor (a
// Checkout in setup mode), to pay later without entering it again: a held
// reservation at once, a standing order or a purchase, charged off-session.
// Customer is the processor's customer the method is attached to;
// ProcessorMethodID the processor's id of the method (pm_…); Label what the
// buyer sees, e.g. "Visa •••• 4242". The marketplace never sees the card
// number.
type PaymentMethod struct {
	ID, UserID        int64
	Customer          string
	ProcessorMethodID string
	Label             string
	CreatedAt         time.Time // when it was saved: its setup verified it
	// LastChargedAt is when a charge of it last succeeded (zero: never).
	LastChargedAt time.Time
}

// LastVerified is when the card last proved it works: its latest
// successful charge, or its saving, whichever is later.
func (m PaymentMethod) LastVerified() time.Time {
	if m.LastChargedAt.After(m.CreatedAt) {
		return m.LastChargedAt
	}
	return m.CreatedAt
}

// MaxPaymentMethods bounds how many saved cards an account keeps.
const MaxPaymentMethods = 10

// PaymentMethodLabel names a card for people from its brand (as the
// processor reports it: "visa", "mastercard", "amex"…) and its last four
// digits: "Visa •••• 4242". An unknown brand is shown capitalised; no
// digits, "Card".
func PaymentMethodLabel(brand, last4 string) string {
	name := cardBrandNames[strings.ToLower(strings.TrimSpace(brand))]
	if name == "" {
		name = strings.TrimSpace(brand)
		if name == "" || strings.EqualFold(name, "unknown") {
			name = "Card"
		} else {
			name = strings.ToUpper(name[:1]) + name[1:]
		}
	}
	last4 = strings.TrimSpace(last4)
	if len(last4) != 4 || strings.Trim(last4, "0123456789") != "" {
		return name
	}
	return name + " •••• " + last4
}

var cardBrandNames = map[string]string{
	"visa": "Visa", "mastercard": "Mastercard", "amex": "American Express", "discover": "Discover",
	"diners": "Diners Club", "jcb": "JCB", "unionpay": "UnionPay", "cartes_bancaires": "Cartes Bancaires",
}
