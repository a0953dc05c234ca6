package account

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"image/png"
	"net/url"
	"strconv"
	"time"

	"github.com/pquerna/otp"
	"github.com/pquerna/otp/totp"

	"github.com/gpumarket/gpumarket/market"
)

// Two-factor sign-in (TOTP, RFC 6238). The shared secret is stored sealed
// (AES-256-GCM under a key derived from the session key, bound to the
// account id), so a copy of the database alone does not reveal it; a new
// session key makes the stored secrets unreadable, and their owners then
// need `gpumarket admin reset-2fa`.

// Issuer names the site in authenticator apps.
const Issuer = "gpumarket"

var totpOpts = totp.ValidateOpts{Period: uint(market.TOTPPeriod / time.Second), Digits: otp.DigitsSix, Algorithm: otp.AlgorithmSHA1}

// NewSecret makes a new random TOTP secret (160 bits, base32) for the
// account named accountName in authenticator apps.
func NewSecret(accountName string) (string, error) {
	key, err := totp.Generate(totp.GenerateOpts{Issuer: Issuer, AccountName: accountName, Period: totpOpts.Period,
		SecretSize: 20, Digits: totpOpts.Digits, Algorithm: totpOpts.Algorithm})
	if err != nil {
		return "", err
	}
	return key.Secret(), nil
}

// SealSecret seals an account's base32 TOTP secret for the database with
// a key derived from the session key, bound to the account's id.
func SealSecret(sessionKey []byte, userID int64, secret string) ([]byte, error) {
	aead, err := totpAEAD(sessionKey)
	if err != nil {
		return nil, err
	}
	nonce := make([]byte, aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	return aead.Seal(nonce, nonce, []byte(secret), totpAdditionalData(userID)), nil
}

// OpenSecret reads back what SealSecret sealed for the account.
func OpenSecret(sessionKey []byte, userID int64, sealed []byte) (string, error) {
	aead, err := totpAEAD(sessionKey)
	if err != nil {
		return "", err
	}
	if len(sealed) < aead.NonceSize() {
		return "", errors.New("account: sealed TOTP secret too short")
	}
	plain, err := aead.Open(nil, sealed[:aead.NonceSize()], sealed[aead.NonceSize():], totpAdditionalData(userID))
	if err != nil {
		return "", fmt.Errorf("account: open TOTP secret of user %d (was the session key changed?): %w", userID, err)
	}
	return string(plain), nil
}

func totpAEAD(sessionKey []byte) (cipher.AEAD, error) {
	if len(sessionKey) == 0 {
		return nil, errors.New("account: no session key to seal two-factor secrets with")
	}
	block, err := aes.NewCipher(DeriveKey(sessionKey, "gpumarket totp secret"))
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

func totpAdditionalData(userID int64) []byte { return []byte("user " + strconv.FormatInt(userID, 10)) }

// DeriveKey derives a 32-byte key for one purpose from the session key
// (HMAC-SHA256 of the purpose), so that no two uses share a key.
func DeriveKey(sessionKey []byte, purpose string) []byte {
	m := hmac.New(sha256.New, sessionKey)
	m.Write([]byte(purpose))
	return m.Sum(nil)
}

// MatchCode finds the time step a code is for in market.TOTPWindow(now):
// ok when that step is still fresh after lastStep, used when it is not (a
// replay). Neither means the code is wrong.
func MatchCode(secret, code string, now time.Time, lastStep int64) (step int64, ok, used bool) {
	for _, s := range market.TOTPWindow(now) {
		want, err := totp.GenerateCodeCustom(secret, market.TOTPStepStart(s), totpOpts)
		if err != nil || subtle.ConstantTimeCompare([]byte(want), []byte(code)) != 1 {
			continue
		}
		if !market.TOTPStepFresh(s, lastStep) {
			return s, false, true
		}
		return s, true, false
	}
	return 0, false, false
}

// QRCode draws the otpauth:// address of the secret for the account as a
// size×size PNG, for an authenticator app to scan.
func QRCode(secret, accountName string, size int) ([]byte, error) {
	q := url.Values{"secret": {secret}, "issuer": {Issuer}, "algorithm": {"SHA1"}, "digits": {"6"},
		"period": {strconv.Itoa(int(market.TOTPPeriod / time.Second))}}
	u := url.URL{Scheme: "otpauth", Host: "totp", Path: "/" + Issuer + ":" + accountName, RawQuery: q.Encode()}
	key, err := otp.NewKeyFromURL(u.String())
	if err != nil {
		return nil, err
	}
	img, err := key.Image(size, size)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
