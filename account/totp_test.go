package account

import (
	"bytes"
	"encoding/base32"
	"encoding/hex"
	"image/png"
	"strings"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

var testKey = []byte(strings.Repeat("k", 32))

// A secret sealed by the code before it moved here (web.SealTOTPSecret,
// session key "k"×32, user 42) still opens: stored secrets survive.
const sealedBefore = "6f88293a75a2375cd5f420217b1d8a2711f46f5f9bfb29bcebf54b3afa0e9d63c2648660691a7a7627b5997913b0859df7eab37e124cb57ff4cecc24"

func TestSealAndOpenSecret(t *testing.T) {
	old, _ := hex.DecodeString(sealedBefore)
	if got, err := OpenSecret(testKey, 42, old); err != nil || got != "JBSWY3DPEHPK3PXPJBSWY3DPEHPK3PXP" {
		t.Fatalf("secret sealed before the move: %q, %v", got, err)
	}
	const secret = "GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ"
	a, err := SealSecret(testKey, 7, secret)
	if err != nil {
		t.Fatal(err)
	}
	b, err := SealSecret(testKey, 7, secret)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(a, b) || bytes.Contains(a, []byte(secret)) {
		t.Fatal("sealing is deterministic or shows the secret")
	}
	if got, err := OpenSecret(testKey, 7, a); err != nil || got != secret {
		t.Fatalf("open: %q, %v", got, err)
	}
	other := []byte(strings.Repeat("j", 32))
	for name, try := range map[string]func() (string, error){
		"another account":     func() (string, error) { return OpenSecret(testKey, 8, a) },
		"another session key": func() (string, error) { return OpenSecret(other, 7, a) },
		"no session key":      func() (string, error) { return OpenSecret(nil, 7, a) },
		"too short":           func() (string, error) { return OpenSecret(testKey, 7, a[:5]) },
		"tampered":            func() (string, error) { c := bytes.Clone(a); c[len(c)-1] ^= 1; return OpenSecret(testKey, 7, c) },
	} {
		if got, err := try(); err == nil {
			t.Errorf("%s: opened as %q", name, got)
		}
	}
	if _, err := SealSecret(nil, 7, secret); err == nil {
		t.Error("sealed without a session key")
	}
}

func TestDeriveKey(t *testing.T) {
	// HMAC-SHA256("k"×32, purpose), computed outside Go.
	const want = "42706163f1ea9b9ab29e2708dbecd289f29092e5e45de5949591995decc67e83"
	if got := hex.EncodeToString(DeriveKey(testKey, "gpumarket totp secret")); got != want {
		t.Fatalf("derived key %s, want %s", got, want)
	}
	if bytes.Equal(DeriveKey(testKey, "a"), DeriveKey(testKey, "b")) {
		t.Fatal("two purposes share a key")
	}
}

// RFC 6238's test secret ("12345678901234567890") and its SHA-1 codes
// (appendix B, the last 6 of the 8 digits).
var rfcSecret = base32.StdEncoding.EncodeToString([]byte("12345678901234567890"))

func TestMatchCode(t *testing.T) {
	at := time.Unix(1111111109, 0).UTC()
	step := market.TOTPStep(at)
	for _, c := range []struct {
		name     string
		code     string
		now      time.Time
		lastStep int64
		wantStep int64
		ok, used bool
	}{
		{"now's code", "081804", at, 0, step, true, false},
		{"the next step's code, a fast phone clock", "050471", at, 0, step + 1, true, false},
		{"a code from one step ago", "081804", at.Add(market.TOTPPeriod), 0, step, true, false},
		{"a code from two steps ago", "081804", at.Add(2 * market.TOTPPeriod), 0, 0, false, false},
		{"a code two steps ahead", "050471", at.Add(-2 * market.TOTPPeriod), 0, 0, false, false},
		{"a replay of the accepted step", "081804", at, step, step, false, true},
		{"an older step after a newer one", "081804", at, step + 1, step, false, true},
		{"a wrong code", "081805", at, 0, 0, false, false},
		{"empty", "", at, 0, 0, false, false},
	} {
		s, ok, used := MatchCode(rfcSecret, c.code, c.now, c.lastStep)
		if s != c.wantStep || ok != c.ok || used != c.used {
			t.Errorf("%s: step %d ok %v used %v; want %d %v %v", c.name, s, ok, used, c.wantStep, c.ok, c.used)
		}
	}
	// RFC 6238 at T=59 s.
	if s, ok, _ := MatchCode(rfcSecret, "287082", time.Unix(59, 0).UTC(), 0); !ok || s != 1 {
		t.Fatalf("RFC 6238 at 59 s: step %d, ok %v", s, ok)
	}
}

func TestNewSecretAndQRCode(t *testing.T) {
	a, err := NewSecret("ada@example.com")
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewSecret("ada@example.com")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := base32.StdEncoding.WithPadding(base32.NoPadding).DecodeString(a)
	if err != nil || len(raw) != 20 || a == b {
		t.Fatalf("secrets %q and %q: %d bytes, %v; want 20 random bytes each", a, b, len(raw), err)
	}
	img, err := QRCode(a, "ada@example.com", 200)
	if err != nil {
		t.Fatal(err)
	}
	p, err := png.Decode(bytes.NewReader(img))
	if err != nil {
		t.Fatal(err)
	}
	if r := p.Bounds(); r.Dx() != 200 || r.Dy() != 200 {
		t.Fatalf("QR code %v, want 200×200", r)
	}
}
