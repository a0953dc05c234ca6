// Package market is the domain of the compute marketplace: offers, requests,
// the matcher, money and the error type. It is pure: no database, no HTTP, no
// clock (time is passed in), standard library only.
package market

import (
	"errors"
	"fmt"
	"sort"
)

// Code classifies an Error. Every code maps to one HTTP status in web.
type Code string

// Error codes.
const (
	CodeInvalid      Code = "invalid"
	CodeNotFound     Code = "not_found"
	CodeConflict     Code = "conflict"
	CodeUnauthorized Code = "unauthorized"
	CodeForbidden    Code = "forbidden"
	CodeRateLimited  Code = "rate_limited"
	CodeUnavailable  Code = "unavailable" // the service cannot answer now (its database is out of reach); try again shortly
	CodeInternal     Code = "internal"
)

// Error is the one error type of the application. Message is always safe to
// show a person; Fields carries per-field messages for invalid input.
type Error struct {
	Code    Code
	Message string
	Fields  map[string]string
}

func (e *Error) Error() string {
	if len(e.Fields) == 0 {
		return fmt.Sprintf("%s: %s", e.Code, e.Message)
	}
	keys := make([]string, 0, len(e.Fields))
	for k := range e.Fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	s := fmt.Sprintf("%s: %s", e.Code, e.Message)
	for _, k := range keys {
		s += fmt.Sprintf("; %s: %s", k, e.Fields[k])
	}
	return s
}

// Errorf returns an *Error with a formatted, person-safe message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// ErrorCode returns the code of the first *Error in err's chain, or
// CodeInternal for any other non-nil error.
func ErrorCode(err error) Code {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInternal
}

// ErrorMessage returns a message that is safe to show a person: the message
// of an *Error, or a generic sentence for anything internal.
func ErrorMessage(err error) string {
	var e *Error
	if errors.As(err, &e) && e.Code != CodeInternal {
		return e.Message
	}
	return "Something went wrong on our side. Please try again; if it keeps happening, contact support."
}

// FieldErrors returns the per-field messages of an invalid-input error, or nil.
func FieldErrors(err error) map[string]string {
	var e *Error
	if errors.As(err, &e) {
		return e.Fields
	}
	return nil
}

// Problems collects per-field validation messages. The zero value is ready.
type Problems map[string]string

// Add records msg for field unless the field already has a message, so the
// first (most basic) problem with a field is the one shown.
func (p Problems) Add(field, msg string) {
	if _, ok := p[field]; !ok {
		p[field] = msg
	}
}

// Err returns nil when there are no problems, else an invalid *Error.
func (p Problems) Err() error {
	if len(p) == 0 {
		return nil
	}
	return &Error{Code: CodeInvalid, Message: "Please correct the highlighted fields.", Fields: map[string]string(p)}
}
