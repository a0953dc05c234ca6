package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"net"
)

// IsUnavailable reports whether err means the database could not serve
// the request now but may in a moment — unreachable, out of connections
// ("sorry, too many clients already"), starting or stopping, locked past
// the busy timeout, or not answering within the caller's deadline — as
// opposed to a request that failed on its own. The web layer answers these
// with 503 and Retry-After instead of an internal error.
func IsUnavailable(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, driver.ErrBadConn) || errors.Is(err, sql.ErrConnDone) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	return isPgUnavailable(err) || isSQLiteUnavailable(err)
}
