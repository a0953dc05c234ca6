package market

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Limits on a provider's notes on the incidents its agent measured.
const (
	// MaxIncidentNoteText is the longest note.
	MaxIncidentNoteText = 1000
	// MaxIncidentNotes is how many notes one incident may carry.
	MaxIncidentNotes = 20
)

// ValidateIncidentNote trims a provider's note on an incident measured by
// its agent and checks it: required, at most MaxIncidentNoteText
// characters, printable text (line breaks allowed). Problems are on the
// field "note".
func ValidateIncidentNote(body string) (string, error) {
	body = strings.TrimSpace(body)
	p := Problems{}
	switch n := utf8.RuneCountInString(body); {
	case n == 0:
		p.Add("note", "Write the note: what happened on your side, e.g. planned maintenance or a replaced part.")
	case n > MaxIncidentNoteText:
		p.Add("note", fmt.Sprintf("Keep the note under %d characters (it has %d).", MaxIncidentNoteText, n))
	}
	textField(p, "note", body, true)
	return body, p.Err()
}
