package market

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// AccessMode says how a buyer gets onto an offer's hosts (issue 31,
// docs/booking.md): through the provider agent, which installs and removes
// the buyer's keys by itself and measures outages from its heartbeats, or
// by the provider's own hand, following the instructions the buyer reads
// after paying.
type AccessMode string

// Access modes. An offer stored before the modes existed runs the agent.
const (
	AccessAgent  AccessMode = "agent"
	AccessManual AccessMode = "manual"
)

// Agent reports whether hosts of this mode run the provider agent; the
// empty mode (an offer built without one) is the agent's.
func (m AccessMode) Agent() bool { return m != AccessManual }

// Label says the mode in a few words, for cards and badges.
func (m AccessMode) Label() string {
	if m.Agent() {
		return "Agent: automatic access"
	}
	return "No agent: access by the provider"
}

// Text says what the mode means for the buyer, for the offer page and the
// quote.
func (m AccessMode) Text() string {
	if m.Agent() {
		return "The provider's hosts run the agent: your SSH keys are installed at the start and removed at the end automatically, and outages are measured from its heartbeats."
	}
	return "The provider's hosts run no agent: the provider gives you access by hand, following instructions you read on the reservation page after paying, and answers in the reservation's messages. Outages are not measured; report them yourself."
}

// MaxAccessInstructions is the longest access instructions an offer may
// carry.
const MaxAccessInstructions = 2000

// validateAccess checks the offer's access mode and instructions: an
// offer without the agent must say how access is given; one with it
// carries none (the agent gives access).
func validateAccess(p Problems, o *Offer) {
	switch o.Access {
	case "":
		o.Access = AccessAgent
	case AccessAgent, AccessManual:
	default:
		p.Add("access", "Choose whether the hosts run the agent.")
		return
	}
	o.AccessInstructions = strings.TrimSpace(o.AccessInstructions)
	if o.Access == AccessAgent {
		o.AccessInstructions = ""
		return
	}
	switch n := utf8.RuneCountInString(o.AccessInstructions); {
	case n == 0:
		p.Add("access_instructions", "Without the agent, say how the buyer gets in: e.g. “Send your public key in the messages; I add it within an hour and reply with the host and port.”")
	case n > MaxAccessInstructions:
		p.Add("access_instructions", fmt.Sprintf("Keep the instructions under %s characters (they have %s).", FormatInt(MaxAccessInstructions), FormatInt(int64(n))))
	}
	textField(p, "access_instructions", o.AccessInstructions, true)
}

// MaxMessageText is the longest message of a reservation's thread.
const MaxMessageText = 4000

// ValidateMessage trims a message between a reservation's buyer and its
// provider and checks it: required, at most MaxMessageText characters,
// printable text (line breaks allowed). Problems are on the field "body".
func ValidateMessage(body string) (string, error) {
	body = strings.TrimSpace(body)
	p := Problems{}
	switch n := utf8.RuneCountInString(body); {
	case n == 0:
		p.Add("body", "Write the message.")
	case n > MaxMessageText:
		p.Add("body", fmt.Sprintf("Keep the message under %s characters (it has %s).", FormatInt(MaxMessageText), FormatInt(int64(n))))
	}
	textField(p, "body", body, true)
	return body, p.Err()
}

// MaxMessages is how many messages one reservation's thread may hold.
const MaxMessages = 500

// MessageRole is who a person is in a reservation's messages.
type MessageRole string

// Message roles; the empty role is no party, who may neither read nor
// write.
const (
	MessageBuyer    MessageRole = "buyer"
	MessageProvider MessageRole = "provider"
)

// MessageRoleOf says who userID is in r's messages: its buyer, the
// provider of one of its pieces, or no party ("").
func MessageRoleOf(r Reservation, userID int64) MessageRole {
	if userID == 0 {
		return ""
	}
	if r.BuyerID == userID {
		return MessageBuyer
	}
	for _, p := range r.Pieces {
		if p.ProviderID == userID {
			return MessageProvider
		}
	}
	return ""
}

// MessageRecipients are whom a message of author in r notifies: the
// providers for the buyer's, the buyer for a provider's, once each.
func MessageRecipients(r Reservation, author int64) []int64 {
	if MessageRoleOf(r, author) != MessageBuyer {
		return []int64{r.BuyerID}
	}
	var out []int64
	seen := map[int64]bool{}
	for _, p := range r.Pieces {
		if !seen[p.ProviderID] {
			seen[p.ProviderID] = true
			out = append(out, p.ProviderID)
		}
	}
	return out
}

// MessageExcerpt is the start of a message for its notification and mail:
// at most n characters, cut at a space when one is near, with "…".
func MessageExcerpt(body string, n int) string {
	body = strings.Join(strings.Fields(body), " ")
	if utf8.RuneCountInString(body) <= n {
		return body
	}
	r := []rune(body)[:n]
	cut := string(r)
	if i := strings.LastIndex(cut, " "); i > len(cut)/2 {
		cut = cut[:i]
	}
	return cut + "…"
}
