package market

import (
	"fmt"
	"unicode"
	"unicode/utf8"
)

// TextProblem returns why text a person or client sent cannot be kept as
// it is, or "": it is not valid UTF-8, or it holds a control character
// (NUL, escape, the C1 controls, …), which no one types on purpose and which
// can end a C string, corrupt a log line or a terminal. Line breaks and tabs
// are allowed when multiline (notes, statements) and refused otherwise.
func TextProblem(s string, multiline bool) string {
	for i, r := range s {
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(s[i:]); size <= 1 {
				return "Remove the bytes that are not text (the input is not valid UTF-8)."
			}
		}
		if multiline && (r == '\n' || r == '\r' || r == '\t') {
			continue
		}
		if unicode.IsControl(r) {
			return fmt.Sprintf("Remove the invisible control character %s: only printable text is kept.", runeName(r))
		}
	}
	return ""
}

// textField records TextProblem's message for field, if any.
func textField(p Problems, field, s string, multiline bool) {
	if msg := TextProblem(s, multiline); msg != "" {
		p.Add(field, msg)
	}
}

// emailCharProblem returns why an address holds a character that would
// let two accounts look alike, or "": a control character, a space, or an
// invisible formatting character such as a right-to-left override (U+202E)
// or a zero-width space (U+200B) or joiner.
func emailCharProblem(email string) string {
	for _, r := range email {
		switch {
		case r == utf8.RuneError:
			return "Enter the address as text (it is not valid UTF-8)."
		case unicode.IsControl(r) || unicode.IsSpace(r):
			return fmt.Sprintf("Remove the invisible character %s from the address.", runeName(r))
		case unicode.Is(unicode.Cf, r) || unicode.Is(unicode.Zl, r) || unicode.Is(unicode.Zp, r) || r == '\u180e' || r == '\u3164' || r == '\u115f' || r == '\u1160':
			// Format characters (bidirectional overrides, zero-width
			// spaces and joiners, soft hyphens) and fillers render as
			// nothing, or reorder what is shown.
			return fmt.Sprintf("Remove the invisible character %s from the address: it would make it look like another.", runeName(r))
		}
	}
	return ""
}

// runeName names a character by its code point, e.g. "U+0000".
func runeName(r rune) string { return fmt.Sprintf("U+%04X", r) }
