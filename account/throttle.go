package account

import (
	"fmt"
	"math"
	"net"
	"time"
)

// SessionTTL is how long a session lasts after log-in.
const SessionTTL = 14 * 24 * time.Hour

// Throttles of sign-up, log-in and second factors (docs/accounts.md).
// Log-ins count attempts per client network; failures per account and
// network, in a short and a daily window; and failures per account from
// every network, per day, which a browser that has logged in to the
// account before is exempt from, so guessing cannot lock its owner out.
const (
	SignUpWindow     = time.Hour
	SignUpPerNetwork = 10 // sign-ups from one client network per SignUpWindow

	LoginWindow     = 15 * time.Minute
	LoginPerNetwork = 30 // failed attempts per client network per LoginWindow
	LoginPerPair    = 8  // failures per account and network per LoginWindow
	LoginDay        = 24 * time.Hour
	LoginPerPairDay = 20  // failures per account and network per LoginDay
	LoginPerAccount = 100 // failures per account, all networks, per LoginDay

	// CodeAttemptsPerAccount is how many attempts at a code (or password,
	// when turning two-factor sign-in off) an account may make per
	// LoginWindow; a correct code at log-in starts the count again. Codes
	// are also counted per client network, at LoginPerNetwork.
	CodeAttemptsPerAccount = 5
)

// Throttles of recovery and verification. Reset links are limited per
// address and per client network, the same whether or not the address has
// an account.
const (
	RecoveryWindow       = time.Hour
	ResetPerAddress      = 5  // reset links asked for one address per RecoveryWindow
	ResetPerNetwork      = 20 // reset links asked from one client network per RecoveryWindow
	ResetUsePerNetwork   = 30 // new passwords set from one client network per RecoveryWindow
	ResendPerUser        = 3  // verification links mailed again per account per RecoveryWindow
	AddressChangePerUser = 5  // address changes asked per account per RecoveryWindow
)

// ClientNetwork is what the throttles count a client by, given its
// address: the address, or for IPv6 its /64, which one subscriber usually
// holds whole.
func ClientNetwork(ip string) string {
	addr := net.ParseIP(ip)
	if addr == nil || addr.To4() != nil {
		return ip
	}
	return addr.Mask(net.CIDRMask(64, 128)).String() + "/64"
}

// WaitText is a wait in whole minutes, rounded up, or in hours from two
// hours, for a person.
func WaitText(wait time.Duration) string {
	mins := int(math.Ceil(wait.Minutes()))
	switch {
	case mins <= 1:
		return "1 minute"
	case mins < 120:
		return fmt.Sprintf("%d minutes", mins)
	}
	return fmt.Sprintf("%d hours", (mins+59)/60)
}
