package market

import (
	"strings"
	"testing"
)

func TestValidateIncidentNote(t *testing.T) {
	for _, tc := range []struct {
		name, in, want, problem string
	}{
		{"trimmed", "  PSU replaced at 10:40.\n", "PSU replaced at 10:40.", ""},
		{"several lines", "Maintenance.\nTicket 42.", "Maintenance.\nTicket 42.", ""},
		{"the longest", strings.Repeat("é", MaxIncidentNoteText), strings.Repeat("é", MaxIncidentNoteText), ""},
		{"empty", "   ", "", "Write the note"},
		{"too long", strings.Repeat("x", MaxIncidentNoteText+1), "", "Keep the note under 1000 characters (it has 1001)."},
		{"a control character", "ok\x1b[31m", "", "control character"},
		{"not UTF-8", "\xff", "", "not valid UTF-8"},
	} {
		got, err := ValidateIncidentNote(tc.in)
		if tc.problem == "" {
			if err != nil || got != tc.want {
				t.Errorf("%s: %q, %v; want %q", tc.name, got, err, tc.want)
			}
			continue
		}
		if msg := FieldErrors(err)["note"]; !strings.Contains(msg, tc.problem) || ErrorCode(err) != CodeInvalid {
			t.Errorf("%s: %v (note: %q), want %q", tc.name, err, msg, tc.problem)
		}
	}
}
