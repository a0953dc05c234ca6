package account

import (
	"testing"
	"time"
)

func TestClientNetwork(t *testing.T) {
	for _, c := range []struct{ ip, want string }{
		{"203.0.113.9", "203.0.113.9"},
		{"::ffff:203.0.113.9", "::ffff:203.0.113.9"}, // an IPv4 address, as written
		{"2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"},
		{"2001:db8:1:2:ffff::1", "2001:db8:1:2::/64"},
		{"2001:db8:1:3::1", "2001:db8:1:3::/64"},
		{"not an address", "not an address"},
		{"", ""},
	} {
		if got := ClientNetwork(c.ip); got != c.want {
			t.Errorf("ClientNetwork(%q) = %q, want %q", c.ip, got, c.want)
		}
	}
}

func TestWaitText(t *testing.T) {
	for _, c := range []struct {
		wait time.Duration
		want string
	}{
		{0, "1 minute"},
		{59 * time.Second, "1 minute"},
		{61 * time.Second, "2 minutes"},
		{15 * time.Minute, "15 minutes"},
		{119 * time.Minute, "119 minutes"},
		{119*time.Minute + time.Second, "2 hours"},
		{120 * time.Minute, "2 hours"},
		{121 * time.Minute, "3 hours"},
		{24 * time.Hour, "24 hours"},
	} {
		if got := WaitText(c.wait); got != c.want {
			t.Errorf("WaitText(%v) = %q, want %q", c.wait, got, c.want)
		}
	}
}
