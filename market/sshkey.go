package market

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// SSHKey is a buyer's SSH public key, handed to the agent of each node the
// buyer rents (docs/agent.md) and shown to no one else. Line is the key as
// an authorized_keys line ("type base64 comment"), without options.
type SSHKey struct {
	ID          int64
	UserID      int64
	Type        string // e.g. "ssh-ed25519"
	Bits        int    // the key's size: 256 for ed25519, the curve for ECDSA, the modulus for RSA
	Fingerprint string // "SHA256:…"
	Comment     string
	Line        string
	CreatedAt   time.Time
}

// Limits on SSH keys.
const (
	MinRSABits      = 3072
	MaxSSHKeys      = 20
	MaxSSHKeyLength = 16 << 10 // bytes of one pasted key
	MaxSSHComment   = 100
)

// SSHKeyTypeLabel names a key type for people.
func SSHKeyTypeLabel(keyType string) string {
	switch keyType {
	case "ssh-ed25519":
		return "Ed25519"
	case "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521":
		return "ECDSA"
	case "ssh-rsa":
		return "RSA"
	}
	return keyType
}

// SSHKeyProblem returns why a parsed public key of type keyType and size
// bits may not be used to reach rented machines, or "": only Ed25519,
// ECDSA (NIST P-256, P-384, P-521) and RSA of at least MinRSABits bits are
// accepted; DSA and short RSA keys are broken or nearly so, and security-key
// (sk-) types need hardware the hosts' sshd may not support.
func SSHKeyProblem(keyType string, bits int) string {
	switch {
	case keyType == "ssh-ed25519", strings.HasPrefix(keyType, "ecdsa-sha2-nistp"):
		return ""
	case keyType == "ssh-rsa" && bits < MinRSABits:
		return fmt.Sprintf("This RSA key has %d bits; RSA keys need at least %d. Create a new key with ssh-keygen -t ed25519 (or -t rsa -b 4096).", bits, MinRSABits)
	case keyType == "ssh-rsa":
		return ""
	case keyType == "ssh-dss":
		return "DSA keys are no longer safe and OpenSSH refuses them. Create a new key with ssh-keygen -t ed25519."
	case strings.HasPrefix(keyType, "sk-"):
		return "Security-key (sk-) keys are not supported on rented machines yet. Add an Ed25519 key (ssh-keygen -t ed25519)."
	}
	return fmt.Sprintf("Keys of type %s are not accepted: add an Ed25519, ECDSA or RSA (at least %d bits) key.", keyType, MinRSABits)
}

// SSHCommentProblem returns why a key's comment cannot be kept, or "".
func SSHCommentProblem(comment string) string {
	if msg := TextProblem(comment, false); msg != "" {
		return msg
	}
	if utf8.RuneCountInString(comment) > MaxSSHComment {
		return fmt.Sprintf("Keep the key's comment (after the key) to %d characters or fewer.", MaxSSHComment)
	}
	return ""
}
