package account

import (
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/gpumarket/gpumarket/market"
)

func TestHashAndCheck(t *testing.T) {
	const pw = "correct horse battery"
	hash, err := Hash(pw, bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	if cost, err := bcrypt.Cost(hash); err != nil || cost != bcrypt.MinCost {
		t.Fatalf("cost %d, %v; want %d", cost, err, bcrypt.MinCost)
	}
	if !Check(hash, pw) {
		t.Fatal("the password does not match its own hash")
	}
	for _, wrong := range []string{"", "correct horse batter", "Correct horse battery", pw + " "} {
		if Check(hash, wrong) {
			t.Errorf("%q matches the hash of %q", wrong, pw)
		}
	}
	// A password bcrypt would truncate is refused, not silently cut.
	long := strings.Repeat("a", market.MaxPasswordBytes+1)
	if _, err := Hash(long, bcrypt.MinCost); market.ErrorCode(err) != market.CodeInvalid || market.FieldErrors(err)["password"] == "" {
		t.Fatalf("hash of a %d-byte password: %v, want invalid with a password field", len(long), err)
	}
	h72, err := Hash(long[:market.MaxPasswordBytes], bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	if Check(h72, long) {
		t.Fatal("a password one byte past the limit matches the hash of its first 72 bytes")
	}
	if _, err := Hash("short", bcrypt.MinCost); market.ErrorCode(err) != market.CodeInvalid {
		t.Fatalf("hash of a short password: %v, want invalid", err)
	}
}

func TestPasswords(t *testing.T) {
	if p, err := NewPasswords(0); err != nil || p.cost != DefaultCost {
		t.Fatalf("NewPasswords(0): %+v, %v; want cost %d", p, err, DefaultCost)
	}
	for _, bad := range []int{bcrypt.MinCost - 1, bcrypt.MaxCost + 1} {
		if _, err := NewPasswords(bad); err == nil {
			t.Errorf("NewPasswords(%d) accepted", bad)
		}
	}
	p, err := NewPasswords(bcrypt.MinCost + 1)
	if err != nil {
		t.Fatal(err)
	}
	hash, err := p.Hash("a long enough password")
	if err != nil {
		t.Fatal(err)
	}
	if cost, _ := bcrypt.Cost(hash); cost != bcrypt.MinCost+1 {
		t.Fatalf("hash cost %d, want %d", cost, bcrypt.MinCost+1)
	}
	if !p.Check(hash, "a long enough password") || p.Check(hash, "another password") {
		t.Fatal("Check does not tell the password from another")
	}
	if p.dummy != nil {
		t.Fatal("the dummy hash was made before an unknown account was checked")
	}
	// No account: compared against a dummy hash at the same cost, and
	// never a match, whatever is typed — the dummy's own password too.
	for _, pw := range []string{"a long enough password", "no such account", ""} {
		if p.Check(nil, pw) {
			t.Errorf("Check(nil, %q) matched", pw)
		}
	}
	if cost, err := bcrypt.Cost(p.dummy); err != nil || cost != bcrypt.MinCost+1 {
		t.Fatalf("dummy hash cost %d, %v; want %d, the same as real hashes", cost, err, bcrypt.MinCost+1)
	}
}

// A log-in naming no account costs what a wrong password costs: compare
// the two (docs/accounts.md gives the ratio).
func BenchmarkCheckWrongPassword(b *testing.B) {
	p, _ := NewPasswords(DefaultCost)
	hash, err := p.Hash("the account's password")
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		p.Check(hash, "a guess at it")
	}
}

func BenchmarkCheckNoAccount(b *testing.B) {
	p, _ := NewPasswords(DefaultCost)
	p.Check(nil, "") // the dummy hash is made once, before timing
	for b.Loop() {
		p.Check(nil, "a guess at it")
	}
}
