package account

import (
	"crypto/sha256"
	"fmt"
	"strings"
	"testing"

	"github.com/gpumarket/gpumarket/market"
)

func TestNewRecoveryCodes(t *testing.T) {
	seen := map[string]bool{}
	counts := map[rune]int{}
	const sets = 100
	for range sets {
		codes, err := NewRecoveryCodes()
		if err != nil {
			t.Fatal(err)
		}
		if len(codes) != market.RecoveryCodeCount {
			t.Fatalf("%d codes, want %d", len(codes), market.RecoveryCodeCount)
		}
		for _, c := range codes {
			if len(c) != market.RecoveryCodeLen || strings.Trim(c, market.RecoveryAlphabet) != "" || seen[c] {
				t.Fatalf("recovery code %q: wrong length, alphabet or repeated", c)
			}
			seen[c] = true
			// What a person types back, in any form, reads as this code.
			if f, err := market.ParseSecondFactor(strings.ToUpper(market.FormatRecoveryCode(c))); err != nil || f.Recovery != c {
				t.Fatalf("%q typed back reads as %+v, %v", c, f, err)
			}
			for _, r := range c {
				counts[r]++
			}
		}
	}
	// Every letter of the alphabet is about as likely: 12,000 letters
	// give each of the 32 about 375 (a standard deviation of 19).
	want := sets * market.RecoveryCodeCount * market.RecoveryCodeLen / len(market.RecoveryAlphabet)
	for _, r := range market.RecoveryAlphabet {
		if n := counts[r]; n < want*2/3 || n > want*4/3 {
			t.Errorf("letter %q appears %d times, want about %d", r, n, want)
		}
	}
}

func TestHashRecoveryCode(t *testing.T) {
	// The stored form, written out: databases hold these hashes.
	sum := sha256.Sum256([]byte("42:abcdefghijkm"))
	if got, want := HashRecoveryCode(42, "abcdefghijkm"), fmt.Sprintf("%x", sum); got != want {
		t.Fatalf("hash %s, want %s", got, want)
	}
	if HashRecoveryCode(42, "abcdefghijkm") == HashRecoveryCode(43, "abcdefghijkm") {
		t.Fatal("two accounts' hashes of one code are equal")
	}
	got := HashRecoveryCodes(7, []string{"aaaa", "bbbb"})
	if len(got) != 2 || got[0] != HashRecoveryCode(7, "aaaa") || got[1] != HashRecoveryCode(7, "bbbb") {
		t.Fatalf("HashRecoveryCodes: %v", got)
	}
}
