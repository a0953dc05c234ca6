// Package account holds the rules and the cryptography of signing in:
// password hashing and checking, the sealing of two-factor secrets and the
// matching of their codes, recovery codes, and the throttle policy of
// log-ins, codes, sign-ups and recovery. It keeps no state and does no
// I/O: workflow calls it and has store persist what it produces; cmd calls
// it to create accounts from the command line.
package account
