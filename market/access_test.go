package market

import (
	"strings"
	"testing"
)

func TestValidateOfferAccess(t *testing.T) {
	for _, c := range []struct {
		name               string
		mode               AccessMode
		instructions       string
		wantMode           AccessMode
		wantInstructions   string
		wantField, wantMsg string
	}{
		{"no mode is the agent's", "", "ignored", AccessAgent, "", "", ""},
		{"agent carries no instructions", AccessAgent, "ignored", AccessAgent, "", "", ""},
		{"manual with instructions", AccessManual, "  Mail me your key.\nI add it.  ", AccessManual, "Mail me your key.\nI add it.", "", ""},
		{"manual without", AccessManual, " \n ", AccessManual, "", "access_instructions", "say how the buyer gets in"},
		{"manual too long", AccessManual, strings.Repeat("é", MaxAccessInstructions+1), AccessManual, strings.Repeat("é", MaxAccessInstructions+1), "access_instructions", "under 2,000 characters (they have 2,001)"},
		{"manual with a control character", AccessManual, "key\x07here", AccessManual, "key\x07here", "access_instructions", ""},
		{"unknown mode", "pigeon", "x", "pigeon", "x", "access", "Choose whether the hosts run the agent"},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := plainOffer(1, "nvidia-h100-80gb-sxm", "us-east-va", 8, 300)
			o.Access, o.AccessInstructions = c.mode, c.instructions
			errs := FieldErrors(ValidateOffer(&o, t0))
			if o.Access != c.wantMode || o.AccessInstructions != c.wantInstructions {
				t.Errorf("got %q %q, want %q %q", o.Access, o.AccessInstructions, c.wantMode, c.wantInstructions)
			}
			if c.wantField == "" {
				if len(errs) != 0 {
					t.Fatalf("errors %v", errs)
				}
				return
			}
			if msg, ok := errs[c.wantField]; !ok || !strings.Contains(msg, c.wantMsg) {
				t.Fatalf("errors %v, want %s: %q", errs, c.wantField, c.wantMsg)
			}
		})
	}
}

func TestValidateMessage(t *testing.T) {
	if body, err := ValidateMessage("  Hello,\nwhen can I log in?  "); err != nil || body != "Hello,\nwhen can I log in?" {
		t.Fatalf("%q %v", body, err)
	}
	for _, c := range []struct{ body, want string }{
		{" \n\t", "Write the message."},
		{strings.Repeat("a", MaxMessageText+1), "under 4,000 characters (it has 4,001)"},
		{"bell\x07", ""},
	} {
		if msg, ok := FieldErrors(func() error { _, err := ValidateMessage(c.body); return err }())["body"]; !ok || !strings.Contains(msg, c.want) {
			t.Errorf("%.20q: %q", c.body, msg)
		}
	}
	if _, err := ValidateMessage(strings.Repeat("ü", MaxMessageText)); err != nil {
		t.Errorf("4,000 characters of two bytes each: %v", err)
	}
}

func TestMessageRolesAndRecipients(t *testing.T) {
	r := Reservation{BuyerID: 1, Pieces: []ReservationPiece{{ProviderID: 7}, {ProviderID: 8}, {ProviderID: 7}}}
	for _, c := range []struct {
		user int64
		want MessageRole
	}{{1, MessageBuyer}, {7, MessageProvider}, {8, MessageProvider}, {9, ""}, {0, ""}} {
		if got := MessageRoleOf(r, c.user); got != c.want {
			t.Errorf("user %d: %q, want %q", c.user, got, c.want)
		}
	}
	if got := MessageRecipients(r, 1); len(got) != 2 || got[0] != 7 || got[1] != 8 {
		t.Errorf("the buyer's message goes to %v, want [7 8]", got)
	}
	if got := MessageRecipients(r, 8); len(got) != 1 || got[0] != 1 {
		t.Errorf("a provider's message goes to %v, want [1]", got)
	}
	if got := MessageExcerpt("one two  three\nfour", 100); got != "one two three four" {
		t.Errorf("excerpt %q", got)
	}
	if got := MessageExcerpt("alpha beta gamma delta", 13); got != "alpha beta…" {
		t.Errorf("cut excerpt %q", got)
	}
}

func TestSearchAndMatchOnAgent(t *testing.T) {
	s, err := ParseSearch("agent=no")
	if err != nil || s.Agent == nil || *s.Agent {
		t.Fatalf("agent=no: %+v %v", s.Agent, err)
	}
	s, err = ParseSearch("automatic_access!=no")
	if err != nil || s.Agent == nil || !*s.Agent {
		t.Fatalf("automatic_access!=no: %+v %v", s.Agent, err)
	}
	if _, err := ParseSearch("agent=sometimes"); err == nil || !strings.Contains(ErrorMessage(err), "yes or no") {
		t.Fatalf("agent=sometimes: %v", err)
	}
	if s, err := ParseSearch("agent=yes interruptible=no"); err != nil || s.Interruptible == nil || *s.Interruptible || !*s.Agent {
		t.Fatalf("both booleans: %+v %v", s, err)
	}

	acc := "nvidia-h100-80gb-sxm"
	agent := plainOffer(1, acc, "us-east-va", 8, 300)
	byHand := plainOffer(2, acc, "us-east-va", 8, 100)
	byHand.Access, byHand.AccessInstructions = AccessManual, "Mail me."
	cands := []Candidate{{Offer: agent}, {Offer: byHand}}
	req := oneDeviceJob(WorkTraining)
	res, err := Match(cands, nil, req, t0)
	if err != nil {
		t.Fatal(err)
	}
	if got := quotedOffers(res); !sameIDs(got, []int64{1, 2}) {
		t.Fatalf("without the constraint: %v", got)
	}
	req.Constraints.RequireAgent = true
	res, err = Match(cands, nil, req, t0)
	if err != nil {
		t.Fatal(err)
	}
	if got := quotedOffers(res); !sameIDs(got, []int64{1}) {
		t.Fatalf("with require_agent: %v, want only the agent's offer", got)
	}
	if s := res.Explanation.Summary(); !strings.Contains(s, "1 run no agent") {
		t.Fatalf("summary %q", s)
	}

	// Only the offer without the agent is left: the relaxation offers to drop the constraint.
	res, err = Match([]Candidate{{Offer: byHand}}, nil, req, t0)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, x := range res.Explanation.Relaxations {
		found = found || (x.Constraint == ConstraintAgent && !x.Request.Constraints.RequireAgent)
	}
	if len(res.Quotes) != 0 || !found {
		t.Fatalf("quotes %d, relaxations %+v", len(res.Quotes), res.Explanation.Relaxations)
	}

	// The portable request carries it.
	data, err := EncodeRequestJSON(req)
	if err != nil || !strings.Contains(string(data), `"require_agent": true`) {
		t.Fatalf("encode: %s %v", data, err)
	}
	back, err := DecodeRequestJSON(data)
	if err != nil || !back.Constraints.RequireAgent {
		t.Fatalf("decode: %+v %v", back.Constraints, err)
	}
}
