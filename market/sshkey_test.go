package market

import (
	"strings"
	"testing"
)

func TestSSHKeyProblem(t *testing.T) {
	tests := []struct {
		keyType string
		bits    int
		want    string // "" accepted, else a piece of the message
	}{
		{"ssh-ed25519", 256, ""},
		{"ecdsa-sha2-nistp256", 256, ""},
		{"ecdsa-sha2-nistp521", 521, ""},
		{"ssh-rsa", 3072, ""},
		{"ssh-rsa", 4096, ""},
		{"ssh-rsa", 3071, "has 3071 bits; RSA keys need at least 3072"},
		{"ssh-rsa", 2048, "has 2048 bits"},
		{"ssh-dss", 1024, "DSA keys are no longer safe"},
		{"sk-ssh-ed25519@openssh.com", 256, "Security-key (sk-) keys are not supported"},
		{"ssh-xmss@openssh.com", 0, "Keys of type ssh-xmss@openssh.com are not accepted"},
	}
	for _, tt := range tests {
		got := SSHKeyProblem(tt.keyType, tt.bits)
		if (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
			t.Errorf("SSHKeyProblem(%s, %d) = %q, want %q", tt.keyType, tt.bits, got, tt.want)
		}
	}
	if SSHKeyTypeLabel("ecdsa-sha2-nistp384") != "ECDSA" || SSHKeyTypeLabel("ssh-ed25519") != "Ed25519" || SSHKeyTypeLabel("ssh-rsa") != "RSA" {
		t.Error("SSHKeyTypeLabel")
	}
	if SSHCommentProblem("me@laptop") != "" || SSHCommentProblem("a\x1bb") == "" || SSHCommentProblem(strings.Repeat("c", MaxSSHComment+1)) == "" {
		t.Error("SSHCommentProblem")
	}
}
