package account

import (
	"fmt"
	"sync"

	"golang.org/x/crypto/bcrypt"

	"github.com/gpumarket/gpumarket/market"
)

// DefaultCost is the bcrypt cost of stored passwords.
const DefaultCost = 12

// Hash hashes a new password with bcrypt at cost. The password is checked
// first (market.PasswordProblem): bcrypt's 72-byte limit is a message for
// the person, not a silent truncation.
func Hash(pw string, cost int) ([]byte, error) {
	if msg := market.PasswordProblem(pw); msg != "" {
		return nil, &market.Error{Code: market.CodeInvalid, Message: msg, Fields: map[string]string{"password": msg}}
	}
	return bcrypt.GenerateFromPassword([]byte(pw), cost)
}

// Check reports whether pw matches hash.
func Check(hash []byte, pw string) bool {
	if len(pw) > market.MaxPasswordBytes {
		return false
	}
	return bcrypt.CompareHashAndPassword(hash, []byte(pw)) == nil
}

// Passwords hashes new passwords at one cost and checks passwords, also
// for accounts that do not exist. It is safe for concurrent use.
type Passwords struct {
	cost int
	// dummy is a hash at cost that a log-in naming no account is compared
	// against, so that it takes as long as a wrong password. It is made
	// once, when first needed: a service that never checks a log-in (a
	// test, a command) does not pay for it.
	once  sync.Once
	dummy []byte
}

// NewPasswords returns Passwords hashing at cost; 0 means DefaultCost.
func NewPasswords(cost int) (*Passwords, error) {
	if cost == 0 {
		cost = DefaultCost
	}
	if cost < bcrypt.MinCost || cost > bcrypt.MaxCost {
		return nil, fmt.Errorf("account: password cost %d is outside bcrypt's %d to %d", cost, bcrypt.MinCost, bcrypt.MaxCost)
	}
	return &Passwords{cost: cost}, nil
}

// Hash hashes a new password at p's cost (the package's Hash).
func (p *Passwords) Hash(pw string) ([]byte, error) { return Hash(pw, p.cost) }

// Check reports whether pw matches hash. A nil hash (no such account) is
// compared against a dummy hash at p's cost, taking as long as a wrong
// password, and never matches.
func (p *Passwords) Check(hash []byte, pw string) bool {
	if hash != nil {
		return Check(hash, pw)
	}
	p.once.Do(func() {
		// The cost was checked by NewPasswords, the only error bcrypt has here.
		p.dummy, _ = bcrypt.GenerateFromPassword([]byte("no such account"), p.cost)
	})
	Check(p.dummy, pw)
	return false
}
