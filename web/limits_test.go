package web

import "github.com/gpumarket/gpumarket/account"

// The throttle limits the tests count up to, by the names the tests knew
// them by when they lived in web.
const (
	loginPerAddress        = account.LoginPerNetwork
	loginPerPair           = account.LoginPerPair
	loginPerAccount        = account.LoginPerAccount
	codeFailuresPerAccount = account.CodeAttemptsPerAccount
)
