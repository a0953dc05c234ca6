package market

import "testing"

func TestPaymentMethodLabel(t *testing.T) {
	tests := []struct{ brand, last4, want string }{
		{"visa", "4242", "Visa •••• 4242"},
		{"Visa", "0002", "Visa •••• 0002"},
		{"mastercard", "4444", "Mastercard •••• 4444"},
		{"amex", "8431", "American Express •••• 8431"},
		{"link", "1234", "Link •••• 1234"},
		{"", "4242", "Card •••• 4242"},
		{"unknown", "", "Card"},
		{"visa", "42", "Visa"},
		{"visa", "42a2", "Visa"},
	}
	for _, tt := range tests {
		if got := PaymentMethodLabel(tt.brand, tt.last4); got != tt.want {
			t.Errorf("PaymentMethodLabel(%q, %q) = %q, want %q", tt.brand, tt.last4, got, tt.want)
		}
	}
}
