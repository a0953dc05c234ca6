package market

import (
	"fmt"
	"strconv"
	"time"
)

// Automatic replacement (docs/replacement.md). When the agent measures a
// host failure or fewer devices on a node serving an active piece, the
// market re-matches the piece's remaining window under the original
// request's hard constraints with the failed node left out, and moves the
// rental there: the original piece ends where the replacement starts and
// settles for what it delivered; the replacement is paid from what the
// buyer paid for the remaining time (ReplacementMoney).

// ReplacementPolicy is what the buyer wants done when a host fails.
type ReplacementPolicy string

// Replacement policies. The zero value reads as ReplaceNever: a request
// that says nothing — one stored before replacement existed, or an API
// client that does not know of it — keeps the contract it was booked
// under.
const (
	// ReplaceNever leaves the rental where it is; the SLA credit is the
	// remedy.
	ReplaceNever ReplacementPolicy = "never"
	// ReplaceAsk offers the replacement to the buyer, who confirms it
	// within ReplacementOfferTTL; otherwise it lapses.
	ReplaceAsk ReplacementPolicy = "ask"
	// ReplaceAuto books the replacement without asking.
	ReplaceAuto ReplacementPolicy = "auto"
)

// Limits and timings of replacement.
const (
	// ReplacementOfferTTL is how long a buyer with the ask policy has to
	// confirm an offered replacement.
	ReplacementOfferTTL = 15 * time.Minute
	// MinReplacementWindow is the least remaining time worth replacing:
	// with less left, the SLA credit is the remedy.
	MinReplacementWindow = 15 * time.Minute
	// MaxReplacementPremium bounds the premium a buyer may accept per
	// reference device-hour, as a price is bounded.
	MaxReplacementPremium = Cents(MaxPriceCents)
)

// ReplacementPolicies lists the policies in the order forms show them.
func ReplacementPolicies() []ReplacementPolicy {
	return []ReplacementPolicy{ReplaceNever, ReplaceAsk, ReplaceAuto}
}

// Label names the policy for people.
func (p ReplacementPolicy) Label() string {
	switch p {
	case ReplaceAsk:
		return "Ask me first"
	case ReplaceAuto:
		return "Replace automatically"
	case ReplaceNever, "":
		return "Never replace (SLA credit only)"
	}
	return string(p)
}

// Replacement is the buyer's terms for a host failure: the policy and the
// most they accept to pay per reference device-hour of the replacement
// above what they already paid (0: nothing more).
type Replacement struct {
	Policy     ReplacementPolicy
	MaxPremium Cents
}

// Effective is the policy as it applies: the zero value is never.
func (r Replacement) Effective() ReplacementPolicy {
	if r.Policy == "" {
		return ReplaceNever
	}
	return r.Policy
}

// validateReplacement checks the replacement terms of a request into p;
// an empty policy stays empty and reads as never (Effective).
func validateReplacement(p Problems, r *Replacement) {
	switch r.Policy {
	case "", ReplaceNever, ReplaceAsk, ReplaceAuto:
	default:
		p.Add("replacement.policy", "Choose auto, ask or never.")
	}
	if r.MaxPremium < 0 || r.MaxPremium > MaxReplacementPremium {
		p.Add("replacement.max_premium_cents", "The maximum premium must be between $0.00 and $1,000.00 per reference device-hour.")
	}
}

// Sentence says in one sentence what happens on a host failure under r:
// for the offer page and the quote.
func (r Replacement) Sentence() string {
	more := "at no extra cost to you"
	if r.MaxPremium > 0 {
		more = "paying at most " + r.MaxPremium.String() + " more per reference device-hour"
	}
	switch r.Effective() {
	case ReplaceAuto:
		return "If a host fails, the market moves your rental to another machine that meets your request, " + more + ", and tells you where; if none fits, the SLA credit applies."
	case ReplaceAsk:
		return "If a host fails, the market offers you another machine that meets your request, " + more + ", to confirm within 15 minutes; otherwise the SLA credit applies."
	}
	return "If a host fails, the rental stays where it is and the SLA credit applies."
}

// ReplacementOfferSentence says in one sentence, for an offer's page,
// what happens when one of its hosts fails: the SLA credit up to the
// offer's cap, unless the buyer's request asks for a replacement — then
// the market moves the rental, and this provider bears a dearer one up to
// the same cap (ReplacementMoney).
func ReplacementOfferSentence(o Offer) string {
	return "If a host fails, the rental stays where it is and the SLA credit applies (at most " + FormatPercentBP(o.CreditCapBP) +
		"% of the piece's amount), unless your request asks for a replacement: then the market moves it to another machine that meets the request, and this provider bears a dearer one up to the same cap."
}

// TriggersReplacement reports whether a measured outage of kind on a piece
// at now calls for a replacement: a host failure (opened only past the
// grace period) or fewer healthy devices than the piece holds, measured
// by the agent while the piece runs, with at least MinReplacementWindow
// of it left. A buyer's report never triggers it alone.
func TriggersReplacement(kind IncidentKind, measuredByAgent bool, piece ReservationPiece, now time.Time) bool {
	if !measuredByAgent || (kind != IncidentHostFailure && kind != IncidentFewerDevices) {
		return false
	}
	return !now.Before(piece.Start) && piece.End.Sub(now) >= MinReplacementWindow
}

// ReplacementTier says where a replacement was found, in search order.
type ReplacementTier int

// Tiers, searched in order.
const (
	TierSameOffer    ReplacementTier = 1 // other nodes of the failed piece's offer
	TierSameProvider ReplacementTier = 2 // the same provider's other offers
	TierAnyone       ReplacementTier = 3 // every offer
)

// Label names the tier for people.
func (t ReplacementTier) Label() string {
	switch t {
	case TierSameOffer:
		return "another node of the same offer"
	case TierSameProvider:
		return "another offer of the same provider"
	case TierAnyone:
		return "another provider's offer"
	}
	return "tier " + strconv.Itoa(int(t))
}

// RematchInput is everything a re-match depends on.
type RematchInput struct {
	// Request is the original request (decoded from the reservation's
	// portable JSON): its hard constraints and preferences apply.
	Request Request
	// Piece is the affected piece; FailedNode the node of its offer the
	// agent measured failing.
	Piece      ReservationPiece
	FailedNode int
	// From and Until are the remaining window [From, Until): from the
	// replacement's start to the piece's end.
	From, Until time.Time
	// Candidates are the offers that may take it (listed ones, with the
	// providers' records); Commitments the capacity they hold. The
	// affected piece's own commitment (by its id) is left out: its
	// healthy nodes may take the replacement.
	Candidates  []Candidate
	Commitments []Commitment
}

// ReplacementOption is one way to replace a piece: the tier it was found
// in, the matcher's quote over the whole hours of the window, and the
// pieces to book — clamped to the window, placed on nodes (never the
// failed one), each amount the quote's pro rata to the clamped time,
// rounded down.
type ReplacementOption struct {
	Tier   ReplacementTier
	Quote  Quote
	Pieces []ReservationPiece
	// RefDeviceHoursMilli is the work the pieces deliver in thousandths of
	// a reference device-hour (catalogue throughput), for the premium.
	RefDeviceHoursMilli int64
}

// Amount is what the option's pieces cost together.
func (o ReplacementOption) Amount() Cents {
	var c Cents
	for _, p := range o.Pieces {
		c += p.AmountCents
	}
	return c
}

// RematchResult is the re-match's answer: the options in search order
// (tier, then the matcher's rank), and the matcher's explanation over
// every offer for when none fits.
type RematchResult struct {
	Options     []ReplacementOption
	Explanation Explanation
}

// ReplacementRequest is the request a piece's remaining window is matched
// with: the original hard constraints and preferences, the piece's devices
// (a gang stays a gang: training, never split; a split piece may itself be
// split, each part at least the original minimum, or the piece if
// smaller), the window's whole hours rounded up starting at from, and no
// budget (ReplacementMoney decides what may be paid).
func ReplacementRequest(orig Request, piece ReservationPiece, from, until time.Time) Request {
	r := orig
	hours := int((until.Sub(from) + time.Hour - 1) / time.Hour)
	r.Workload.Devices = piece.Devices
	r.Workload.Hours = hours
	r.Workload.WorkDeviceHours = 0
	r.Workload.WorkModelID = ""
	if piece.Gang {
		r.Workload.Kind = WorkTraining
		r.Workload.MinPieceDevices = 0
	} else {
		if r.Workload.Kind == WorkTraining {
			r.Workload.Kind = WorkBatch
		}
		r.Workload.MinPieceDevices = min(max(orig.Workload.MinPieceDevices, 1), piece.Devices)
	}
	r.Constraints.EarliestStart = from
	r.Constraints.Deadline = from.Add(time.Duration(hours) * time.Hour)
	r.Constraints.BudgetCents = 0
	r.Preferences.CarbonAwareStart = false
	r.Limit = MaxQuoteLimit
	return r
}

// Rematch searches for replacements of a piece's remaining window: the
// offer's other nodes first, then the same provider's other offers, then
// every offer, each ranked as the matcher ranks (Match), with the failed
// node held for the whole window so nothing is placed on it. A quote one
// of whose clamped pieces would be shorter than its offer's minimum rental
// is left out; one found in an earlier tier is not repeated.
func Rematch(in RematchInput) (RematchResult, error) {
	from := in.From.Truncate(time.Second)
	if from.Before(in.From) {
		from = from.Add(time.Second)
	}
	if in.Until.Sub(from) < time.Second {
		return RematchResult{}, Errorf(CodeInvalid, "Nothing of the piece is left to replace.")
	}
	req := ReplacementRequest(in.Request, in.Piece, from, in.Until)
	if err := ValidateRequest(&req); err != nil {
		return RematchResult{}, err
	}
	commits := make([]Commitment, 0, len(in.Commitments)+1)
	for _, c := range in.Commitments {
		if c.ID != in.Piece.ID || in.Piece.ID == 0 {
			commits = append(commits, c)
		}
	}
	offers := map[int64]Offer{}
	var same, provider []Candidate
	for _, c := range in.Candidates {
		offers[c.Offer.ID] = c.Offer
		switch {
		case c.Offer.ID == in.Piece.OfferID:
			same = append(same, c)
		case c.Offer.ProviderID == in.Piece.ProviderID:
			provider = append(provider, c)
		}
	}
	if o, ok := offers[in.Piece.OfferID]; ok && in.FailedNode >= 0 && in.FailedNode < o.Nodes {
		commits = append(commits, Commitment{OfferID: o.ID, Devices: o.DevicesPerNode, Start: from, End: req.Constraints.Deadline,
			Nodes: []NodeShare{{Node: in.FailedNode, Devices: o.DevicesPerNode}}})
	}
	var out RematchResult
	seen := map[string]bool{}
	for _, tier := range []struct {
		t     ReplacementTier
		cands []Candidate
	}{{TierSameOffer, same}, {TierSameProvider, provider}, {TierAnyone, in.Candidates}} {
		if len(tier.cands) == 0 {
			continue
		}
		res, err := Match(tier.cands, commits, req, from)
		if err != nil {
			return RematchResult{}, err
		}
		if tier.t == TierAnyone {
			out.Explanation = res.Explanation
		}
		for _, q := range res.Quotes {
			key := quoteShape(q)
			if seen[key] {
				continue
			}
			seen[key] = true
			opt, ok := replacementOption(tier.t, q, offers, commits, from, in.Until)
			if ok {
				out.Options = append(out.Options, opt)
			}
		}
	}
	return out, nil
}

// quoteShape names a quote by its offers and devices, to skip a quote a
// later tier finds again.
func quoteShape(q Quote) string {
	s := ""
	for _, p := range q.Pieces {
		s += fmt.Sprintf("%d:%d:%t;", p.OfferID, p.Devices, p.Interruptible)
	}
	return s
}

// replacementOption turns a quote into the pieces to book over [from,
// until), or reports that it cannot be booked as clamped.
func replacementOption(t ReplacementTier, q Quote, offers map[int64]Offer, commits []Commitment, from, until time.Time) (ReplacementOption, bool) {
	opt := ReplacementOption{Tier: t, Quote: q}
	held := append([]Commitment(nil), commits...)
	secs := int64(until.Sub(from) / time.Second)
	for _, qp := range q.Pieces {
		o := offers[qp.OfferID]
		if until.Sub(from) < time.Duration(o.MinRentalHours)*time.Hour {
			return ReplacementOption{}, false
		}
		c := Commitment{OfferID: o.ID, Devices: qp.Devices, Start: from, End: until, Gang: qp.Gang}
		placed, err := PlaceCommitments(o, held, []Commitment{c})
		if err != nil {
			return ReplacementOption{}, false
		}
		held = append(held, placed[0])
		whole := int64(qp.Hours) * 3600
		amount := int64(qp.Cost.Instance + qp.Cost.Storage + qp.Cost.Egress)
		opt.Pieces = append(opt.Pieces, ReservationPiece{
			OfferID: o.ID, ProviderID: o.ProviderID, Devices: qp.Devices, Start: from, End: until,
			Interruptible: qp.Interruptible, PriceCents: qp.PriceCents, Gang: qp.Gang,
			AmountCents:     Cents(amount * secs / whole),
			FreeCancelHours: o.FreeCancelHours, CancelFeeBP: o.CancelFeeBP, RejectMinutes: 0, Terms: TermsOf(o),
			Nodes: placed[0].Nodes,
		})
		opt.RefDeviceHoursMilli += int64(qp.Devices) * secs * o.Accelerator().RelativeThroughputPermille() / 3600
	}
	return opt, true
}

// ReplacementSplit is how a replacement is paid (ReplacementMoney).
type ReplacementSplit struct {
	// Remaining is what the buyer paid for the original piece's time from
	// the replacement's start: its amount pro rata, rounded down.
	Remaining Cents
	// Delivered is the rest of the original amount: what the original
	// piece settles for under its frozen terms, before ProviderShare.
	Delivered Cents
	// Cost is what the replacement's pieces cost together.
	Cost Cents
	// Refund is Remaining − Cost when the replacement is cheaper, given
	// back to the buyer.
	Refund Cents
	// ProviderShare is the part of a dearer replacement the failing
	// provider bears, out of what its piece settles for; BuyerShare the
	// part the buyer pays on top of what they paid.
	ProviderShare Cents
	BuyerShare    Cents
}

// OriginalAmount is what the original piece settles for after the
// replacement: what it delivered less the provider's share.
func (s ReplacementSplit) OriginalAmount() Cents { return s.Delivered - s.ProviderShare }

// ReplacementMoney applies the money rule to replacing orig from `from`
// with pieces costing cost that deliver refMilli thousandths of a
// reference device-hour, for a buyer accepting maxPremium per reference
// device-hour: the replacement is paid from Remaining; a cheaper one
// refunds the difference; a dearer one is borne by the failing provider
// up to its offer's SLA credit cap (CreditCapBP of the piece amount,
// rounded as Share) and never beyond what the piece delivered, then by
// the buyer up to maxPremium × the reference device-hours (rounded down);
// beyond that it is refused as a conflict saying by how much.
func ReplacementMoney(orig ReservationPiece, from time.Time, cost Cents, refMilli int64, maxPremium Cents) (ReplacementSplit, error) {
	whole := int64(orig.End.Sub(orig.Start) / time.Second)
	part := int64(orig.End.Sub(from) / time.Second)
	if whole <= 0 || part <= 0 || part > whole || cost < 0 || orig.AmountCents < 0 {
		return ReplacementSplit{}, Errorf(CodeInvalid, "The replacement must start inside the piece.")
	}
	s := ReplacementSplit{Cost: cost}
	s.Remaining = Cents(int64(orig.AmountCents) * part / whole)
	s.Delivered = orig.AmountCents - s.Remaining
	if cost <= s.Remaining {
		s.Refund = s.Remaining - cost
		return s, nil
	}
	extra := cost - s.Remaining
	s.ProviderShare = min(extra, Share(orig.AmountCents, orig.Terms.CreditCapBP), s.Delivered)
	s.BuyerShare = extra - s.ProviderShare
	if allowed := Cents(int64(maxPremium) * refMilli / 1000); s.BuyerShare > allowed {
		return ReplacementSplit{}, Errorf(CodeConflict, "The replacement costs %s more than the remaining time paid for; the provider bears %s and your maximum premium allows %s.",
			extra, s.ProviderShare, allowed)
	}
	return s, nil
}

// ChooseReplacement is the first option in search order that the money
// rule accepts, with its split; ok is false when none is (then the last
// refusal's reason, or that nothing fits, is in why).
func ChooseReplacement(orig ReservationPiece, from time.Time, opts []ReplacementOption, maxPremium Cents) (opt ReplacementOption, split ReplacementSplit, why string, ok bool) {
	why = "No offer meets the request for the remaining time."
	for _, o := range opts {
		s, err := ReplacementMoney(orig, from, o.Amount(), o.RefDeviceHoursMilli, maxPremium)
		if err == nil {
			return o, s, "", true
		}
		why = ErrorMessage(err)
	}
	return ReplacementOption{}, ReplacementSplit{}, why, false
}

// ReplacementKey is the idempotency key of one money step of replacement
// id: "repl_3_credit", "repl_3_refund", "repl_3_piece_41".
func ReplacementKey(id int64, step string) string {
	return "repl_" + strconv.FormatInt(id, 10) + "_" + step
}

// ReplacementEntries are the ledger entries that book a replacement on
// reservation r: each replacement piece's provider is paid from the
// failing provider's account (what the buyer paid for the remaining time,
// and the failing provider's share), in piece order, the buyer's share
// aside; a cheaper replacement credits the difference to the buyer (paid
// out by a refund, ReplacementRefundEntry). Moves between the same
// provider's pieces make no entry.
func ReplacementEntries(id int64, r Reservation, failing int64, pieces []ReservationPiece, s ReplacementSplit, at time.Time) []LedgerEntry {
	var out []LedgerEntry
	left := s.Cost - s.BuyerShare
	for _, p := range pieces {
		amount := min(left, p.AmountCents)
		left -= amount
		if amount <= 0 || p.ProviderID == failing {
			continue
		}
		out = append(out, LedgerEntry{ReservationID: r.ID, Kind: EntryReplacement, Debit: ProviderAccount(failing), Credit: ProviderAccount(p.ProviderID),
			Amount: amount, IdempotencyKey: ReplacementKey(id, "piece_"+strconv.FormatInt(p.ID, 10)), At: at})
	}
	if s.Refund > 0 {
		out = append(out, LedgerEntry{ReservationID: r.ID, Kind: EntryCredit, Debit: ProviderAccount(failing), Credit: BuyerAccount(r.BuyerID),
			Amount: s.Refund, IdempotencyKey: ReplacementKey(id, "credit"), At: at})
	}
	return out
}

// ReplacementRefundEntry records the refund of a cheaper replacement's
// difference on the buyer's payment.
func ReplacementRefundEntry(id int64, r Reservation, amount Cents, refundID string, at time.Time) LedgerEntry {
	return LedgerEntry{ReservationID: r.ID, Kind: EntryRefund, Debit: BuyerAccount(r.BuyerID), Credit: AccountPlatformCash,
		Amount: amount, StripeRef: refundID, IdempotencyKey: ReplacementKey(id, "refund"), At: at}
}

// ReplacementChargeEntries record the buyer's share of a dearer
// replacement id, paid with the processor's payment paymentIntentID: what
// ReplacementEntries leaves unpaid of each replacement piece — the cost
// less the buyer's share is spread in piece order — is charged to the
// buyer and owed to that piece's provider (charge: Dr cash, Cr the
// provider), one entry per piece under "repl_<id>_charge_<piece>". They
// sum to s.BuyerShare when s.Cost is the pieces' amount.
func ReplacementChargeEntries(id int64, r Reservation, pieces []ReservationPiece, s ReplacementSplit, paymentIntentID string, at time.Time) []LedgerEntry {
	var out []LedgerEntry
	left := s.Cost - s.BuyerShare
	for _, p := range pieces {
		covered := min(left, p.AmountCents)
		left -= covered
		if rest := p.AmountCents - covered; rest > 0 {
			out = append(out, LedgerEntry{ReservationID: r.ID, Kind: EntryCharge, Debit: AccountPlatformCash, Credit: ProviderAccount(p.ProviderID),
				Amount: rest, StripeRef: paymentIntentID, IdempotencyKey: ReplacementKey(id, "charge_"+strconv.FormatInt(p.ID, 10)), At: at})
		}
	}
	return out
}

// ReplacementUnbookedCharge records a buyer's share that was paid when
// the replacement could no longer be booked (capacity taken, the rental
// moved on meanwhile): the payment is the buyer's (charge: Dr cash, Cr the
// buyer) until ReplacementRefundEntry gives it back.
func ReplacementUnbookedCharge(id int64, r Reservation, amount Cents, paymentIntentID string, at time.Time) LedgerEntry {
	return LedgerEntry{ReservationID: r.ID, Kind: EntryCharge, Debit: AccountPlatformCash, Credit: BuyerAccount(r.BuyerID),
		Amount: amount, StripeRef: paymentIntentID, IdempotencyKey: ReplacementKey(id, "charge"), At: at}
}
