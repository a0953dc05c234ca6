package market

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"time"
)

// The spot market for interruptible capacity. A provider who allows
// interruption sets a floor price per device-hour (the offer's
// InterruptibleCentsPerDH); buyers bid a maximum price per device-hour for
// a number of devices over a window of whole hours; each hour of each
// offer is auctioned on its own (ClearSpot) at the hour's start less the
// offer's preemption notice, and every winner of the hour pays the one
// clearing price for it.

// Limits of a spot bid.
const (
	// SpotMaxWindowHours is the longest window a bid may cover: 7 days.
	SpotMaxWindowHours = 7 * 24
	// SpotMaxLiveBids is how many live bids a buyer may have at once.
	SpotMaxLiveBids = 20
	// SpotRateWindow is how far back the observed preemption rate looks,
	// and SpotRateMinHours how many spot hours run it needs before it
	// replaces DefaultInterruptionPPMPerHour.
	SpotRateWindow   = 30 * 24 * time.Hour
	SpotRateMinHours = 24
	// SpotBidMaxMultiple bounds a bid's maximum: at most this many times
	// the offer's on-demand price per device-hour. A maximum above the
	// on-demand price itself needs the buyer's explicit confirmation
	// (SpotBid.ConfirmAboveOnDemand).
	SpotBidMaxMultiple = 3
	// SpotCardRecency is how recently the buyer's default saved card must
	// have proved it works — a successful charge, or the verified setup
	// that saved it — for a new bid (SpotCardProblem).
	SpotCardRecency = 30 * 24 * time.Hour
)

// SpotBidState is where a bid stands.
type SpotBidState string

// Spot bid states.
const (
	SpotBidLive      SpotBidState = "live"      // takes part in every clearing of its window
	SpotBidCancelled SpotBidState = "cancelled" // by the buyer, or when a won hour's payment was declined
	SpotBidFinished  SpotBidState = "finished"  // its window's last hour has cleared or passed
)

// Label is the state as the buyer reads it.
func (s SpotBidState) Label() string {
	switch s {
	case SpotBidLive:
		return "Live"
	case SpotBidCancelled:
		return "Cancelled"
	case SpotBidFinished:
		return "Finished"
	}
	return string(s)
}

// SpotBid is a buyer's standing bid for interruptible devices of one offer,
// for each hour in [FirstHour, LastHour] (whole UTC hours, both included).
// It is all or nothing per hour: an hour gives it Devices or none.
type SpotBid struct {
	ID        int64
	BuyerID   int64
	OfferID   int64
	Devices   int
	MaxCents  Cents // the most the buyer pays per device-hour
	FirstHour time.Time
	LastHour  time.Time
	PlacedAt  time.Time
	State     SpotBidState
	// EndNote says why a bid stopped (cancelled by the buyer, a declined
	// payment); empty while live.
	EndNote string
	// ConfirmAboveOnDemand is the buyer's acceptance, when placing the
	// bid, of a maximum above the offer's on-demand price (not stored: it
	// is asked for once, at placement).
	ConfirmAboveOnDemand bool
}

// SpotBidCeiling is the highest maximum a bid on o may state:
// SpotBidMaxMultiple × its on-demand price per device-hour.
func SpotBidCeiling(o Offer) Cents {
	return o.PriceCentsPerDeviceHour * SpotBidMaxMultiple
}

// SpotAboveOnDemandText is what a buyer accepts to bid up to max per
// device-hour on an offer whose on-demand price is onDemand.
func SpotAboveOnDemandText(max, onDemand Cents) string {
	return fmt.Sprintf("I accept paying up to %s per device-hour, above the on-demand price %s.", max, onDemand)
}

// Wash reports whether the bid is the offer's own provider bidding on it:
// a wash trade, refused at placement and never taking part in a clearing.
func (b SpotBid) Wash(o Offer) bool {
	return b.BuyerID != 0 && b.BuyerID == o.ProviderID
}

// Covers reports whether hour is in the bid's window.
func (b SpotBid) Covers(hour time.Time) bool {
	return !hour.Before(b.FirstHour) && !hour.After(b.LastHour)
}

// ValidateSpotBid checks a bid a buyer places at now on offer o and returns
// an invalid *Error naming each bad field. It normalises the hours to UTC.
// The offer must sell interruptible capacity; the devices must fit it; the
// first hour must still be open for bidding (its clearing, the hour less
// the offer's notice, not yet past) and lie in the offer's availability;
// the window is at most SpotMaxWindowHours; a maximum below the floor,
// which could never win, is refused, and so is one above SpotBidCeiling; a
// maximum above the on-demand price needs ConfirmAboveOnDemand (the field
// "confirm_above_on_demand"). The offer's own provider cannot bid (a wash
// trade).
func ValidateSpotBid(b *SpotBid, o Offer, now time.Time) error {
	p := Problems{}
	if !o.Interruptible || o.InterruptibleCentsPerDH < 1 {
		p.Add("offer", "This offer does not sell interruptible capacity.")
		return p.Err()
	}
	if b.Wash(o) {
		p.Add("offer", "You cannot bid on your own offer.")
		return p.Err()
	}
	b.FirstHour, b.LastHour = b.FirstHour.UTC(), b.LastHour.UTC()
	switch {
	case b.Devices < 1:
		p.Add("devices", "Bid for at least one device.")
	case b.Devices > o.Devices():
		p.Add("devices", fmt.Sprintf("This offer has %d devices.", o.Devices()))
	}
	switch {
	case b.MaxCents < 1:
		p.Add("max_price", "Enter the most you pay per device-hour.")
	case b.MaxCents < o.InterruptibleCentsPerDH:
		p.Add("max_price", fmt.Sprintf("The provider's floor is %s per device-hour; a lower bid never wins.", o.InterruptibleCentsPerDH))
	case b.MaxCents > SpotBidCeiling(o):
		p.Add("max_price", fmt.Sprintf("Bid at most %s per device-hour: %d times the on-demand price, %s.",
			SpotBidCeiling(o), SpotBidMaxMultiple, o.PriceCentsPerDeviceHour))
	case b.MaxCents > o.PriceCentsPerDeviceHour && !b.ConfirmAboveOnDemand:
		p.Add("confirm_above_on_demand", fmt.Sprintf("Your maximum, %s per device-hour, is above the on-demand price, %s: tick to confirm, or bid lower.",
			b.MaxCents, o.PriceCentsPerDeviceHour))
	}
	switch {
	case b.FirstHour.IsZero():
		p.Add("first_hour", "Choose the first hour.")
	case !b.FirstHour.Equal(b.FirstHour.Truncate(time.Hour)):
		p.Add("first_hour", "Bids are for whole hours (HH:00 UTC).")
	case SpotClearsAt(b.FirstHour, o.PreemptNoticeMins).Before(now):
		p.Add("first_hour", fmt.Sprintf("Bidding for %s has closed; choose a later hour.", FormatTime(b.FirstHour)))
	case b.FirstHour.Before(o.AvailableFrom) || b.FirstHour.Add(time.Hour).After(o.AvailableUntil):
		p.Add("first_hour", "The offer is not available then.")
	}
	switch {
	case b.LastHour.IsZero():
		p.Add("last_hour", "Choose the last hour.")
	case !b.LastHour.Equal(b.LastHour.Truncate(time.Hour)):
		p.Add("last_hour", "Bids are for whole hours (HH:00 UTC).")
	case !b.FirstHour.IsZero() && b.LastHour.Before(b.FirstHour):
		p.Add("last_hour", "The last hour cannot be before the first.")
	case !b.FirstHour.IsZero() && b.LastHour.Sub(b.FirstHour) >= SpotMaxWindowHours*time.Hour:
		p.Add("last_hour", "A bid covers at most 7 days (168 hours).")
	case b.LastHour.Add(time.Hour).After(o.AvailableUntil):
		p.Add("last_hour", "The offer is not available until then.")
	}
	return p.Err()
}

// SpotClearsAt is when hour is auctioned on an offer with noticeMins of
// preemption notice: the hour's start less the notice, so that a bid that
// loses the hour after running the one before hears of it the notice ahead.
func SpotClearsAt(hour time.Time, noticeMins int) time.Time {
	return hour.Add(-time.Duration(noticeMins) * time.Minute)
}

// SpotNextHour is the first hour of an offer with noticeMins of preemption
// notice still open for bidding at now: the next one to be auctioned.
func SpotNextHour(now time.Time, noticeMins int) time.Time {
	return SpotClearsAt(now, -noticeMins).UTC().Truncate(time.Hour).Add(time.Hour)
}

// SpotWin is one winning bid of a clearing.
type SpotWin struct {
	BidID   int64
	Devices int
}

// SpotClearing is the result of one offer-hour's auction.
type SpotClearing struct {
	PriceCents  Cents // what every winner pays per device-hour; 0 when nobody won
	Capacity    int   // devices on sale
	DevicesBid  int   // devices asked for by bids at or above the floor
	DevicesSold int
	Wins        []SpotWin // in rank order
}

// Won reports whether the bid won the clearing.
func (c SpotClearing) Won(bidID int64) bool {
	for _, w := range c.Wins {
		if w.BidID == bidID {
			return true
		}
	}
	return false
}

// ClearSpot auctions capacity devices of one offer for one hour among bids,
// with the provider's floor price per device-hour. The rule:
//
//  1. Bids whose maximum is below the floor never win (they are not
//     eligible).
//  2. The eligible bids are ranked by maximum price, highest first, then by
//     placement time, earliest first, then by id.
//  3. Walking the ranking, each bid gets all its devices if they fit in the
//     capacity still unsold, and none otherwise (bids are all or nothing); a
//     bid that does not fit is skipped, and later, smaller bids may still
//     fit.
//  4. Uniform price: if every eligible bid won, the price is the floor;
//     otherwise it is the lowest maximum among the winners (which is never
//     below the floor). Every winner pays that one price per device-hour.
//
// So no winner pays above its maximum and the provider never receives less
// than the floor. Under rule 4 the marginal winner — the lowest winning
// bid when some eligible bid lost — pays exactly its own maximum; every
// other winner pays at most its maximum. When nobody wins the price is 0.
func ClearSpot(floor Cents, capacity int, bids []SpotBid) SpotClearing {
	c := SpotClearing{Capacity: max(capacity, 0)}
	eligible := make([]SpotBid, 0, len(bids))
	for _, b := range bids {
		if b.MaxCents >= floor && b.Devices > 0 {
			eligible = append(eligible, b)
			c.DevicesBid += b.Devices
		}
	}
	slices.SortFunc(eligible, func(a, b SpotBid) int { // ids are unique: a total order
		if c := cmp.Compare(b.MaxCents, a.MaxCents); c != 0 {
			return c
		}
		if c := a.PlacedAt.Compare(b.PlacedAt); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	left := c.Capacity
	lowest := Cents(0)
	for _, b := range eligible {
		if b.Devices > left {
			continue
		}
		left -= b.Devices
		c.DevicesSold += b.Devices
		c.Wins = append(c.Wins, SpotWin{BidID: b.ID, Devices: b.Devices})
		lowest = b.MaxCents
	}
	switch {
	case len(c.Wins) == 0:
	case len(c.Wins) == len(eligible):
		c.PriceCents = floor
	default:
		c.PriceCents = max(lowest, floor)
	}
	return c
}

// SpotCapacity is how many devices of offer o are free for the whole of
// [hour, hour+1h) beside the commitments: on each node, its devices less
// the most committed to it at any instant of the hour, summed over the
// nodes. A spot piece is not a gang, so it may be split over nodes; what
// is free throughout the hour on each node is exactly what the booking
// (PlaceCommitments) can place there.
func SpotCapacity(o Offer, commitments []Commitment, hour time.Time) int {
	end := hour.Add(time.Hour)
	free := 0
	for node := 0; node < o.Nodes; node++ {
		type edge struct {
			at time.Time
			d  int
		}
		var edges []edge
		for _, c := range commitments {
			if c.OfferID != o.ID || !c.Start.Before(end) || !c.End.After(hour) {
				continue
			}
			for _, s := range c.Nodes {
				if s.Node == node {
					edges = append(edges, edge{maxTime(c.Start, hour), s.Devices}, edge{minTime(c.End, end), -s.Devices})
				}
			}
		}
		sort.Slice(edges, func(i, j int) bool {
			if !edges[i].at.Equal(edges[j].at) {
				return edges[i].at.Before(edges[j].at)
			}
			return edges[i].d < edges[j].d // half-open: an end frees before a start takes
		})
		used, most := 0, 0
		for _, e := range edges {
			used += e.d
			most = max(most, used)
		}
		free += max(o.DevicesPerNode-most, 0)
	}
	return free
}

// SpotPreemptions are the previous hour's winning bids (prev, by bid id)
// that still want this hour and did not win it: each is preempted at the
// hour.
func (c SpotClearing) SpotPreemptions(prev []int64) []int64 {
	var out []int64
	for _, id := range prev {
		if !c.Won(id) {
			out = append(out, id)
		}
	}
	return out
}

// SpotPreemption is the incident a preempted spot hour records on the
// previous hour's piece: zero length at the hour (the hour before ran and
// is charged in full), acknowledged, and earning no SLA credit (a
// preemption is the interruptible contract, not a breach).
func SpotPreemption(pieceID int64, devices int, hour time.Time, noticeMins int, price Cents) Incident {
	return Incident{PieceID: pieceID, Kind: IncidentPreemption, Start: hour, End: hour, DevicesAffected: devices,
		Note: SpotPreemptionNote(hour, noticeMins, price), Acknowledged: true}
}

// SpotPreemptionNote is the evidence note of the preemption incident
// recorded when a bid that held hour-1h does not win hour.
func SpotPreemptionNote(hour time.Time, noticeMins int, price Cents) string {
	return fmt.Sprintf("Spot market: outbid or capacity taken for the hour from %s (clearing price %s per device-hour); preempted at %s with %d minutes' notice. The hour before ran in full and is charged in full.",
		FormatTime(hour), price, hour.UTC().Format("15:04 UTC"), noticeMins)
}

// SpotInterruptionPPM is an offer's observed preemption rate for the
// matcher (Candidate.InterruptionPPMPerHour): preemptions per spot hour
// run, in parts per million per hour, over the last SpotRateWindow. With
// fewer than SpotRateMinHours hours run it is 0 (unknown: the matcher
// takes DefaultInterruptionPPMPerHour); a record without preemptions is 1
// ppm, since 0 would read as unknown.
func SpotInterruptionPPM(hoursRun, preemptions int) int {
	if hoursRun < SpotRateMinHours {
		return 0
	}
	return max(int(MulDivRound(int64(min(preemptions, hoursRun)), 1_000_000, int64(hoursRun))), 1)
}

// SpotQuoteWindow is how far back an offer's latest spot clearing still
// prices its interruptible capacity in quotes (SpotQuotePrice).
const SpotQuoteWindow = 24 * time.Hour

// SpotQuotePrice is the price per device-hour at which a quote books a
// block of an offer's interruptible capacity: the offer's latest spot
// clearing price with devices sold within SpotQuoteWindow (0 for none),
// never below the provider's floor and never above the offer's on-demand
// price. So a quote is no way around the auction: while bidders pay more
// than the floor for the offer's hours, a block booked through a quote
// pays what they pay.
func SpotQuotePrice(floor, onDemand, lastClearing Cents) Cents {
	return min(max(floor, lastClearing), onDemand)
}

// SpotDelivery is what a won spot hour becomes: the piece's interval
// [Start, End) and its amount.
type SpotDelivery struct {
	Start, End  time.Time
	Minutes     int   // whole minutes in [Start, End); 0: nothing left to sell
	AmountCents Cents // what the winner pays for them
}

// SpotHourDelivery is the delivery of hour (a whole UTC hour) won by a bid
// of devices at price per device-hour, in a clearing made at clearedAt.
// The rule: an hour cleared on time (at or before its start) is delivered
// and charged in full, price × devices. An hour cleared late starts at the
// clearing time rounded up to the next whole minute (a clearing at 02:40:00
// starts at 02:40, one at 02:40:01 at 02:41) and is charged only for the
// minutes that remain: price × devices × minutes / 60, rounded once, half
// away from zero (MulDivRound, the one rounding rule for money), and at
// least 1¢ when any minute remains. E.g. 130¢ × 3 devices cleared at
// 02:40:20: 19 minutes from 02:41, 7,410 / 60 = 123.5, charged 124¢. A
// clearing in the hour's last minute leaves 0 minutes: nothing is sold.
// The arithmetic is checked: a product that does not fit is an internal
// error, never a wrapped amount.
func SpotHourDelivery(hour, clearedAt time.Time, price Cents, devices int) (SpotDelivery, error) {
	hour = hour.UTC()
	d := SpotDelivery{Start: hour, End: hour.Add(time.Hour)}
	if at := clearedAt.UTC(); at.After(hour) {
		d.Start = at.Truncate(time.Minute)
		if d.Start.Before(at) {
			d.Start = d.Start.Add(time.Minute)
		}
	}
	if !d.Start.Before(d.End) {
		return SpotDelivery{Start: d.End, End: d.End}, nil
	}
	d.Minutes = int(d.End.Sub(d.Start) / time.Minute)
	perHour, ok := MulChecked(int64(price), int64(devices))
	if !ok {
		return SpotDelivery{}, Errorf(CodeInternal, "spot hour amount overflows: %d¢ × %d devices", int64(price), devices)
	}
	if d.Minutes == 60 {
		d.AmountCents = Cents(perHour)
		return d, nil
	}
	d.AmountCents = Cents(max(MulDivRound(perHour, int64(d.Minutes), 60), 1))
	return d, nil
}

// SpotBidderBar is why a buyer may not place a spot bid at now, nor take
// part in a clearing (their bids stay live and are skipped until it
// passes), or "" when nothing bars them. Won spot hours count like any
// booking: each is a held reservation until paid, so a buyer with held
// MaxUnpaidHolds unexpired holds is barred; and lapses (spot hours won
// and never paid, like standing-order fills) follow the lapse rule of
// StandingOrdersBlockedUntil.
func SpotBidderBar(held int, lapses []time.Time, now time.Time) string {
	if held >= MaxUnpaidHolds {
		return fmt.Sprintf("You already have %d unpaid reservations (won spot hours count). Pay for or cancel one before bidding.", held)
	}
	if until, blocked := StandingOrdersBlockedUntil(lapses, now); blocked {
		return fmt.Sprintf("%d of your won spot hours or filled orders lapsed unpaid within %d days, so you cannot bid until %s.",
			LapsesBeforeBlock, int(LapseWindow/(24*time.Hour)), FormatTime(until))
	}
	return ""
}

// SpotCardProblem says why the buyer's default saved card m cannot back a
// new bid at now, or "" when it can: it must have succeeded in a charge,
// or been saved (a verified setup), within SpotCardRecency before now.
func SpotCardProblem(m PaymentMethod, now time.Time) string {
	if now.Sub(m.LastVerified()) <= SpotCardRecency {
		return ""
	}
	return fmt.Sprintf("Your saved card, %s, has not been charged or verified in the last %d days. Add a card again on your account page (it is verified when saved) before bidding.",
		m.Label, int(SpotCardRecency/(24*time.Hour)))
}
