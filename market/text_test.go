package market

import (
	"strings"
	"testing"
)

func TestTextProblem(t *testing.T) {
	tests := []struct {
		name      string
		s         string
		multiline bool
		want      string // part of the message; "" = accepted
	}{
		{"plain", "Llama 3.1 8B, vLLM", false, ""},
		{"accents and symbols", "Crème brûlée GPU — 100 % hydro ✓", false, ""},
		{"right-to-left script", "שלום عربى", false, ""},
		{"replacement character itself", "a \uFFFD b", false, ""},
		{"empty", "", false, ""},
		{"NUL", "a\x00b", false, "U+0000"},
		{"NUL in multiline", "a\x00b", true, "U+0000"},
		{"bell", "a\x07", false, "U+0007"},
		{"escape", "\x1b[2J", true, "U+001B"},
		{"delete", "a\x7f", false, "U+007F"},
		{"C1 next line", "a\u0085b", true, "U+0085"},
		{"line break on one line", "a\nb", false, "U+000A"},
		{"carriage return on one line", "a\rb", false, "U+000D"},
		{"tab on one line", "a\tb", false, "U+0009"},
		{"line breaks and tabs in a note", "first\r\n\tsecond\n", true, ""},
		{"invalid UTF-8", "a\xffb", false, "not valid UTF-8"},
		{"truncated UTF-8", "caf\xc3", true, "not valid UTF-8"},
	}
	for _, tt := range tests {
		got := TextProblem(tt.s, tt.multiline)
		switch {
		case tt.want == "" && got != "":
			t.Errorf("%s: %q refused: %s", tt.name, tt.s, got)
		case tt.want != "" && !strings.Contains(got, tt.want):
			t.Errorf("%s: %q: message %q, want one naming %q", tt.name, tt.s, got, tt.want)
		}
	}
}

func TestEmailLookAlikes(t *testing.T) {
	for _, ok := range []string{"ada@example.com", "ada.lovelace+gpu@example.co.uk", "jürgen@example.de"} {
		if msg := emailProblem(ok); msg != "" {
			t.Errorf("%q refused: %s", ok, msg)
		}
	}
	for _, bad := range []string{
		"ad\u202ea@example.com", // right-to-left override
		"ad\u202ba@example.com", // right-to-left embedding
		"ad\u2067a@example.com", // right-to-left isolate
		"ad\u200ea@example.com", // left-to-right mark
		"ad\u200ba@example.com", // zero-width space
		"ad\u200ca@example.com", // zero-width non-joiner
		"ad\u200da@example.com", // zero-width joiner
		"ad\u2060a@example.com", // word joiner
		"ad\ufeffa@example.com", // zero-width no-break space
		"ad\u00ada@example.com", // soft hyphen
		"ad\u180ea@example.com", // Mongolian vowel separator
		"ad\u3164a@example.com", // Hangul filler
		"ad\x00a@example.com",   // NUL
		"ad\u2028a@example.com", // line separator
		"ada@exam\u200bple.com", // in the domain
		"ada@example.com\u202e", // at the end
		"ad\xffa@example.com",   // not UTF-8
	} {
		if msg := emailProblem(bad); msg == "" {
			t.Errorf("%+q accepted", bad)
		}
	}
}

func TestDisputeStatementText(t *testing.T) {
	if s, err := ValidateDisputeStatement(" The node was down.\r\n\tLogs attached. "); err != nil || s != "The node was down.\r\n\tLogs attached." {
		t.Errorf("statement on two lines: %q, %v", s, err)
	}
	_, err := ValidateDisputeStatement("The node was down.\x00")
	if msg := FieldErrors(err)["statement"]; !strings.Contains(msg, "U+0000") {
		t.Errorf("NUL in a statement: %v", err)
	}
}
