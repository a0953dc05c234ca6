package account

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"strconv"

	"github.com/gpumarket/gpumarket/market"
)

// NewRecoveryCodes returns market.RecoveryCodeCount random codes of
// market.RecoveryCodeLen characters from market.RecoveryAlphabet (32
// letters, so a byte's low five bits pick one without bias). They are
// shown to the person once; the database keeps only their hashes
// (HashRecoveryCode).
func NewRecoveryCodes() ([]string, error) {
	out := make([]string, market.RecoveryCodeCount)
	b := make([]byte, market.RecoveryCodeLen)
	for i := range out {
		if _, err := rand.Read(b); err != nil {
			return nil, err
		}
		c := make([]byte, len(b))
		for j, x := range b {
			c[j] = market.RecoveryAlphabet[x&31]
		}
		out[i] = string(c)
	}
	return out, nil
}

// HashRecoveryCode is how the account's recovery code, normalised as
// market.ParseSecondFactor reads it, is stored and looked up: SHA-256
// salted with the account id (the codes are random and 60 bits long, so a
// fast hash suffices; the salt keeps one table of guesses from serving
// every account).
func HashRecoveryCode(userID int64, code string) string {
	sum := sha256.Sum256([]byte(strconv.FormatInt(userID, 10) + ":" + code))
	return hex.EncodeToString(sum[:])
}

// HashRecoveryCodes is HashRecoveryCode of each code, in order.
func HashRecoveryCodes(userID int64, codes []string) []string {
	out := make([]string, len(codes))
	for i, c := range codes {
		out[i] = HashRecoveryCode(userID, c)
	}
	return out
}
