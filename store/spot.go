package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// The spot market's persistence (market/spot.go has the rules;
// migrations/0028_spot.sql the tables).

// Notification kinds of the spot market, to the buyer.
const (
	NotifySpotWon       = "spot_won"       // a bid won an hour
	NotifySpotPreempted = "spot_preempted" // a bid that held an hour lost the next
	NotifySpotCancelled = "spot_cancelled" // a bid stopped (a declined payment)
)

// ReportedBySpot marks the preemption incidents the spot clearing records
// (on the provider's behalf: reporter_id is the offer's provider). Like a
// provider's report it is acknowledged at once.
const ReportedBySpot = "spot"

const msgSpotBidNotFound = "That spot bid could not be found."

// SpotHourWon is one hour a bid won, with the reservation it became.
type SpotHourWon struct {
	Hour       time.Time
	Devices    int
	PriceCents market.Cents // the hour's clearing price per device-hour
	// AmountCents is what the hour costs: price × devices, or only the
	// minutes delivered when it cleared late (market.SpotHourDelivery).
	AmountCents   market.Cents
	ReservationID int64
	State         market.ReservationState // of the reservation: confirmed once paid
	Preempted     bool                    // the bid lost the next hour of its window
}

// SpotBidRecord is a buyer's bid with the offer's title and the hours it won.
type SpotBidRecord struct {
	Bid        market.SpotBid
	OfferTitle string
	Hours      []SpotHourWon
}

// SpotClearingRow is one offer-hour's published clearing, with when it
// cleared.
type SpotClearingRow struct {
	market.SpotHourClearing
	ClearedAt time.Time
}

// SpotBookSummary is an offer's spot book in brief: live bids and the last
// clearing (zero Hour when it has none).
type SpotBookSummary struct {
	LiveBids    int
	LiveDevices int
	Last        SpotClearingRow
}

// SpotIndicative is what an offer's next hour (market.SpotNextHour) would
// clear at if it were auctioned now, with the live bids and the capacity
// of now. It assumes every live bid's hold for the hour succeeds: at the
// clearing, a bid whose hold fails sits the hour out.
type SpotIndicative struct {
	Hour        time.Time
	FloorCents  market.Cents
	PriceCents  market.Cents // the clearing price; the floor when nothing would sell
	Capacity    int
	DevicesBid  int
	DevicesSold int
}

// SpotHourDue is an offer-hour whose clearing time has passed and which
// has not cleared.
type SpotHourDue struct {
	OfferID int64
	Hour    time.Time
}

// SpotAward is a won hour as the clearing booked it: the held one-hour
// reservation, and its charge to the buyer's saved card, recorded in the
// clearing's transaction for the workflow to make (Charge.ID is 0 when the
// buyer has no saved card left).
type SpotAward struct {
	BidID       int64
	Reservation market.Reservation
	Charge      market.ChargeIntent
}

// SpotResult is what ClearSpotHour did. Cleared is false when the hour had
// already cleared (another replica, or an earlier tick): nothing was done.
type SpotResult struct {
	Cleared   bool
	Clearing  SpotClearingRow
	Awards    []SpotAward
	Preempted []Incident // the preemption incidents recorded
}

const spotBidColumns = `b.id, b.buyer_id, b.offer_id, b.devices, b.max_cents, b.first_hour, b.last_hour, b.placed_at, b.state, b.end_note`

func scanSpotBid(s scanner) (market.SpotBid, error) {
	var b market.SpotBid
	var maxCents, first, last, placed int64
	var state string
	if err := s.Scan(&b.ID, &b.BuyerID, &b.OfferID, &b.Devices, &maxCents, &first, &last, &placed, &state, &b.EndNote); err != nil {
		return market.SpotBid{}, err
	}
	b.MaxCents = market.Cents(maxCents)
	b.FirstHour, b.LastHour, b.PlacedAt = fromUnix(first), fromUnix(last), fromUnix(placed)
	b.State = market.SpotBidState(state)
	return b, nil
}

const spotClearingColumns = `c.offer_id, c.hour, c.accelerator_id, c.floor_cents, c.price_cents, c.capacity, c.devices_bid, c.devices_sold, c.cleared_at`

func scanSpotClearing(s scanner) (SpotClearingRow, error) {
	var c SpotClearingRow
	var hour, floor, price, cleared int64
	if err := s.Scan(&c.OfferID, &hour, &c.AcceleratorID, &floor, &price, &c.Capacity, &c.DevicesBid, &c.DevicesSold, &cleared); err != nil {
		return SpotClearingRow{}, err
	}
	c.Hour, c.ClearedAt = fromUnix(hour), fromUnix(cleared)
	c.FloorCents, c.PriceCents = market.Cents(floor), market.Cents(price)
	return c, nil
}

// PlaceSpotBid stores a buyer's bid on a listed offer that sells
// interruptible capacity, checked by market.ValidateSpotBid at now; a
// buyer may have at most market.SpotMaxLiveBids live bids, may not bid
// on their own offer (a wash trade), and may not bid while
// market.SpotBidderBar bars them (unpaid holds, won spot hours among
// them, or lapses).
func (db *DB) PlaceSpotBid(ctx context.Context, b market.SpotBid, now time.Time) (market.SpotBid, error) {
	const op = "place spot bid"
	tx, err := db.begin(ctx)
	if err != nil {
		return market.SpotBid{}, fail(op, err, "")
	}
	defer tx.Rollback()
	if err := mayAct(ctx, tx, b.BuyerID); err != nil {
		return market.SpotBid{}, fail(op, err, "")
	}
	o, suspended, err := scanBookableOffer(tx.QueryRowContext(ctx, bookableOfferQuery, b.OfferID))
	if errors.Is(err, sql.ErrNoRows) {
		return market.SpotBid{}, notFound(msgOfferNotFound)
	}
	if err != nil {
		return market.SpotBid{}, fail(op, err, "")
	}
	if !o.Listed() || suspended {
		return market.SpotBid{}, conflict(msgOfferUnavailable)
	}
	if o.ProviderID == b.BuyerID {
		return market.SpotBid{}, conflict("You cannot bid on your own offer.")
	}
	full, err := getOffer(ctx, tx, b.OfferID)
	if err != nil {
		return market.SpotBid{}, fail(op, err, "")
	}
	if err := market.ValidateSpotBid(&b, full, now); err != nil {
		return market.SpotBid{}, err
	}
	var live int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM spot_bids WHERE buyer_id = ? AND state = ?`,
		b.BuyerID, string(market.SpotBidLive)).Scan(&live); err != nil {
		return market.SpotBid{}, fail(op, err, "")
	}
	if live >= market.SpotMaxLiveBids {
		return market.SpotBid{}, conflict(fmt.Sprintf("You already have %d live spot bids. Cancel one before placing another.", live))
	}
	if msg, err := spotBidderBar(ctx, tx, b.BuyerID, now); err != nil {
		return market.SpotBid{}, fail(op, err, "")
	} else if msg != "" {
		return market.SpotBid{}, conflict(msg)
	}
	b.PlacedAt, b.State, b.EndNote = truncate(now), market.SpotBidLive, ""
	if err := tx.QueryRowContext(ctx, `INSERT INTO spot_bids (buyer_id, offer_id, devices, max_cents, first_hour, last_hour, placed_at, state, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id`,
		b.BuyerID, b.OfferID, b.Devices, int64(b.MaxCents), unix(b.FirstHour), unix(b.LastHour), unix(now), string(b.State), unix(now)).Scan(&b.ID); err != nil {
		return market.SpotBid{}, fail(op, err, "")
	}
	return b, fail(op, tx.Commit(), "")
}

// spotBidderBar is market.SpotBidderBar for the buyer at now, inside tx.
func spotBidderBar(ctx context.Context, tx querier, buyerID int64, now time.Time) (string, error) {
	held, err := countHeld(ctx, tx, buyerID, now)
	if err != nil {
		return "", err
	}
	lapses, err := buyerLapses(ctx, tx, buyerID)
	if err != nil {
		return "", err
	}
	return market.SpotBidderBar(held, lapses, now), nil
}

// buyerLapses returns when the buyer's unpaid holds lapsed, for the lapse
// rule (market.StandingOrdersBlockedUntil): each standing-order fill's
// and each won spot hour's reservation that expired unpaid, at its hold's
// expiry.
func buyerLapses(ctx context.Context, q querier, buyerID int64) ([]time.Time, error) {
	lapses, err := standingOrderLapses(ctx, q, buyerID)
	if err != nil {
		return nil, err
	}
	rows, err := q.QueryContext(ctx, `SELECT r.hold_expires_at FROM spot_allocations a
		JOIN spot_bids b ON b.id = a.bid_id JOIN reservations r ON r.id = a.reservation_id
		WHERE b.buyer_id = ? AND r.state = ?`, buyerID, string(market.ReservationExpired))
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var at int64
		if err := rows.Scan(&at); err != nil {
			rows.Close()
			return nil, err
		}
		lapses = append(lapses, fromUnix(at))
	}
	return lapses, closeRows(rows)
}

// CancelSpotBid stops a live bid of the buyer: it takes part in no further
// clearing. Hours it already won stay booked (and paid). Another buyer's
// bid is not found; a bid no longer live is a conflict.
func (db *DB) CancelSpotBid(ctx context.Context, buyerID, bidID int64, now time.Time) (market.SpotBid, error) {
	return db.endSpotBid(ctx, "cancel spot bid", buyerID, bidID, "Cancelled by you.", false, now)
}

// FindSpotBidOfReservation returns the spot bid whose won hour reservation
// is, or a market CodeNotFound error when it is not a won spot hour.
func (db *DB) FindSpotBidOfReservation(ctx context.Context, reservationID int64) (int64, error) {
	var bidID int64
	err := db.reader.QueryRowContext(ctx, `SELECT bid_id FROM spot_allocations WHERE reservation_id = ?`, reservationID).Scan(&bidID)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, notFound("That reservation is not a won spot hour.")
	}
	return bidID, fail("find spot bid of reservation", err, "")
}

// StopSpotBidDeclined stops a bid of the buyer whose won hour could not be
// paid, with the reason, and tells the buyer; a bid whose window ended
// with that hour (finished in the clearing) is marked cancelled too, so
// its record says why its last hour was not run.
func (db *DB) StopSpotBidDeclined(ctx context.Context, buyerID, bidID int64, reason string, now time.Time) (market.SpotBid, error) {
	b, err := db.endSpotBid(ctx, "stop spot bid", buyerID, bidID, "Stopped: "+reason+".", true, now)
	if err != nil {
		return b, err
	}
	return b, db.Notify(ctx, Notification{UserID: buyerID, Kind: NotifySpotCancelled, CreatedAt: now, URL: "/spot",
		Notice: market.Notice{Kind: market.NoticeSpotStopped, Params: market.NoticeParams{Bid: bidID, Text: reason}}})
}

func (db *DB) endSpotBid(ctx context.Context, op string, buyerID, bidID int64, note string, finishedToo bool, now time.Time) (market.SpotBid, error) {
	tx, err := db.begin(ctx)
	if err != nil {
		return market.SpotBid{}, fail(op, err, "")
	}
	defer tx.Rollback()
	b, err := scanSpotBid(tx.QueryRowContext(ctx, `SELECT `+spotBidColumns+` FROM spot_bids b WHERE b.id = ?`, bidID))
	if errors.Is(err, sql.ErrNoRows) || (err == nil && b.BuyerID != buyerID) {
		return market.SpotBid{}, notFound(msgSpotBidNotFound)
	}
	if err != nil {
		return market.SpotBid{}, fail(op, err, "")
	}
	if b.State != market.SpotBidLive && !(finishedToo && b.State == market.SpotBidFinished) {
		return market.SpotBid{}, conflict(fmt.Sprintf("This bid is already %s.", b.State.Label()))
	}
	b.State, b.EndNote = market.SpotBidCancelled, note
	if _, err := tx.ExecContext(ctx, `UPDATE spot_bids SET state = ?, end_note = ?, updated_at = ? WHERE id = ?`,
		string(b.State), b.EndNote, unix(now), b.ID); err != nil {
		return market.SpotBid{}, fail(op, err, "")
	}
	return b, fail(op, tx.Commit(), "")
}

// ListBuyerSpotBids returns the buyer's bids, newest first, each with the
// offer's title and the hours it won.
func (db *DB) ListBuyerSpotBids(ctx context.Context, buyerID int64) ([]SpotBidRecord, error) {
	const op = "list buyer spot bids"
	tx, err := db.read(ctx)
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer tx.Rollback()
	var out []SpotBidRecord
	index := map[int64]int{}
	rows, err := tx.QueryContext(ctx, `SELECT `+spotBidColumns+`, o.title FROM spot_bids b JOIN offers o ON o.id = b.offer_id
		WHERE b.buyer_id = ? ORDER BY b.id DESC`, buyerID)
	if err != nil {
		return nil, fail(op, err, "")
	}
	for rows.Next() {
		var r SpotBidRecord
		b, err := scanSpotBid(rowScanner{rows, &r.OfferTitle})
		if err != nil {
			rows.Close()
			return nil, fail(op, err, "")
		}
		r.Bid = b
		index[b.ID] = len(out)
		out = append(out, r)
	}
	if err := closeRows(rows); err != nil {
		return nil, fail(op, err, "")
	}
	rows, err = tx.QueryContext(ctx, `SELECT a.bid_id, a.hour, a.devices, a.price_cents, r.amount_cents, a.reservation_id, r.state, a.preempted
		FROM spot_allocations a JOIN spot_bids b ON b.id = a.bid_id JOIN reservations r ON r.id = a.reservation_id
		WHERE b.buyer_id = ? ORDER BY a.bid_id, a.hour`, buyerID)
	if err != nil {
		return nil, fail(op, err, "")
	}
	for rows.Next() {
		var bidID, hour, price, amount int64
		var h SpotHourWon
		var state string
		if err := rows.Scan(&bidID, &hour, &h.Devices, &price, &amount, &h.ReservationID, &state, &h.Preempted); err != nil {
			rows.Close()
			return nil, fail(op, err, "")
		}
		h.Hour, h.PriceCents, h.AmountCents, h.State = fromUnix(hour), market.Cents(price), market.Cents(amount), market.ReservationState(state)
		if i, ok := index[bidID]; ok {
			out[i].Hours = append(out[i].Hours, h)
		}
	}
	return out, fail(op, closeRows(rows), "")
}

// rowScanner scans a row into its destinations followed by extra ones.
type rowScanner struct {
	rows  *sql.Rows
	extra any
}

func (r rowScanner) Scan(dest ...any) error { return r.rows.Scan(append(dest, r.extra)...) }

// SpotBook returns an offer's spot book in brief.
func (db *DB) SpotBook(ctx context.Context, offerID int64) (SpotBookSummary, error) {
	const op = "spot book"
	tx, err := db.read(ctx)
	if err != nil {
		return SpotBookSummary{}, fail(op, err, "")
	}
	defer tx.Rollback()
	var s SpotBookSummary
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*), COALESCE(SUM(devices), 0) FROM spot_bids WHERE offer_id = ? AND state = ?`,
		offerID, string(market.SpotBidLive)).Scan(&s.LiveBids, &s.LiveDevices); err != nil {
		return SpotBookSummary{}, fail(op, err, "")
	}
	c, err := scanSpotClearing(tx.QueryRowContext(ctx, `SELECT `+spotClearingColumns+` FROM spot_clearings c
		WHERE c.offer_id = ? ORDER BY c.hour DESC LIMIT 1`, offerID))
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return SpotBookSummary{}, fail(op, err, "")
	}
	s.Last = c
	return s, nil
}

// SpotIndicative returns the indicative clearing of the offer's next hour
// at now: market.ClearSpot of the inputs ClearSpotHour would take now, in
// one read transaction.
func (db *DB) SpotIndicative(ctx context.Context, offerID int64, now time.Time) (SpotIndicative, error) {
	const op = "spot indicative"
	tx, err := db.read(ctx)
	if err != nil {
		return SpotIndicative{}, fail(op, err, "")
	}
	defer tx.Rollback()
	full, err := getOffer(ctx, tx, offerID)
	if err != nil {
		return SpotIndicative{}, fail(op, err, "")
	}
	o, suspended, err := scanBookableOffer(tx.QueryRowContext(ctx, bookableOfferQuery, offerID))
	if err != nil {
		return SpotIndicative{}, fail(op, err, "")
	}
	hour := market.SpotNextHour(now, full.PreemptNoticeMins)
	capacity, bids, _, err := spotHourAuction(ctx, tx, full, o, suspended, hour, now)
	if err != nil {
		return SpotIndicative{}, fail(op, err, "")
	}
	floor := full.InterruptibleCentsPerDH
	c := market.ClearSpot(floor, capacity, bids)
	out := SpotIndicative{Hour: hour, FloorCents: floor, PriceCents: c.PriceCents, Capacity: c.Capacity, DevicesBid: c.DevicesBid, DevicesSold: c.DevicesSold}
	if c.DevicesSold == 0 {
		out.PriceCents = floor
	}
	return out, nil
}

// ListSpotClearings returns every clearing of an hour in [from, to), by
// hour then offer: the published spot series.
func (db *DB) ListSpotClearings(ctx context.Context, from, to time.Time) ([]SpotClearingRow, error) {
	const op = "list spot clearings"
	tx, err := db.read(ctx)
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer tx.Rollback()
	cs, err := collect(ctx, tx, scanSpotClearing, `SELECT `+spotClearingColumns+` FROM spot_clearings c
		WHERE c.hour >= ? AND c.hour < ? ORDER BY c.hour, c.offer_id`, unix(from), unix(to))
	return cs, fail(op, err, "")
}

// SpotHoursDue returns the offer-hours to clear at now: for each offer
// with live bids, each whole hour H covered by one of them whose clearing
// time (market.SpotClearsAt) has passed, that has not ended (an hour missed
// entirely, the background work being down, is not sold after the fact),
// and that has no clearing yet; earliest first.
func (db *DB) SpotHoursDue(ctx context.Context, now time.Time) ([]SpotHourDue, error) {
	const op = "spot hours due"
	tx, err := db.read(ctx)
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer tx.Rollback()
	type window struct {
		offerID     int64
		notice      int
		first, last int64
	}
	rows, err := tx.QueryContext(ctx, `SELECT b.offer_id, o.preempt_notice_mins, MIN(b.first_hour), MAX(b.last_hour)
		FROM spot_bids b JOIN offers o ON o.id = b.offer_id WHERE b.state = ? GROUP BY b.offer_id, o.preempt_notice_mins ORDER BY b.offer_id`,
		string(market.SpotBidLive))
	if err != nil {
		return nil, fail(op, err, "")
	}
	var ws []window
	for rows.Next() {
		var w window
		if err := rows.Scan(&w.offerID, &w.notice, &w.first, &w.last); err != nil {
			rows.Close()
			return nil, fail(op, err, "")
		}
		ws = append(ws, w)
	}
	if err := closeRows(rows); err != nil {
		return nil, fail(op, err, "")
	}
	var due []SpotHourDue
	for _, w := range ws {
		// Hours not ended (H > now-1h) whose clearing has passed (H <= now+notice).
		lo := now.Add(-time.Hour).Truncate(time.Hour).Add(time.Hour)
		if first := fromUnix(w.first); first.After(lo) {
			lo = first
		}
		hi := fromUnix(w.last)
		for h := lo; !h.After(hi) && !market.SpotClearsAt(h, w.notice).After(now); h = h.Add(time.Hour) {
			var covered, cleared int
			if err := tx.QueryRowContext(ctx, `SELECT
				(SELECT COUNT(*) FROM spot_bids WHERE offer_id = ? AND state = ? AND first_hour <= ? AND last_hour >= ?),
				(SELECT COUNT(*) FROM spot_clearings WHERE offer_id = ? AND hour = ?)`,
				w.offerID, string(market.SpotBidLive), unix(h), unix(h), w.offerID, unix(h)).Scan(&covered, &cleared); err != nil {
				return nil, fail(op, err, "")
			}
			if covered > 0 && cleared == 0 {
				due = append(due, SpotHourDue{OfferID: w.offerID, Hour: h})
			}
		}
	}
	return due, nil
}

// FinishSpotBids marks finished the live bids whose window's last hour
// has ended by now, and returns how many.
func (db *DB) FinishSpotBids(ctx context.Context, now time.Time) (int64, error) {
	const op = "finish spot bids"
	tx, err := db.begin(ctx)
	if err != nil {
		return 0, fail(op, err, "")
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, `UPDATE spot_bids SET state = ?, updated_at = ? WHERE state = ? AND last_hour + 3600 <= ?`,
		string(market.SpotBidFinished), unix(now), string(market.SpotBidLive), unix(now))
	if err != nil {
		return 0, fail(op, err, "")
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fail(op, err, "")
	}
	return n, fail(op, tx.Commit(), "")
}

// ClearSpotHour auctions hour of the offer (market.ClearSpot) in one write
// transaction, at most once: the clearing row is unique per offer and
// hour, and a second call finds it and does nothing (Cleared false). The
// capacity on sale is market.SpotCapacity of the commitments holding
// capacity at now during the hour (none when the offer is not listed, its
// provider suspended, or the hour outside its availability); the live bids
// whose window covers the hour take part, except bids by the offer's own
// provider (wash trades, market.SpotBid.Wash) and bids of buyers that
// market.SpotBidderBar bars at now (too many unpaid holds, or lapses):
// those stay live and are skipped. An hour cleared late (now after its
// start) is delivered and charged only from now rounded up to the minute
// (market.SpotHourDelivery); cleared in its last minute, nothing is on
// sale. Each winner's hour is booked as an interruptible piece at the
// clearing price through the
// booking's own capacity check and placement (placeOnOffer; spot rents by
// the hour, whatever the offer's minimum rental), held until now+hold for
// the workflow to pay at once. A live bid that won the hour before, whose
// window goes on, and that does not win this one is preempted: a
// preemption incident (market.IncidentPreemption, acknowledged, zero
// length at the hour: the hour before ran and is charged in full, and
// preemption earns no SLA credit) on that hour's piece, and the buyer is
// told. Bids whose window ends with the hour finish.
func (db *DB) ClearSpotHour(ctx context.Context, offerID int64, hour, now time.Time, hold time.Duration) (SpotResult, error) {
	const op = "clear spot hour"
	hour = hour.UTC().Truncate(time.Hour)
	tx, err := db.begin(ctx)
	if err != nil {
		return SpotResult{}, fail(op, err, "")
	}
	defer tx.Rollback()
	var done int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM spot_clearings WHERE offer_id = ? AND hour = ?`, offerID, unix(hour)).Scan(&done); err != nil {
		return SpotResult{}, fail(op, err, "")
	}
	if done > 0 {
		return SpotResult{}, nil
	}
	full, err := getOffer(ctx, tx, offerID)
	if err != nil {
		return SpotResult{}, fail(op, err, "")
	}
	o, suspended, err := scanBookableOffer(tx.QueryRowContext(ctx, bookableOfferQuery, offerID))
	if err != nil {
		return SpotResult{}, fail(op, err, "")
	}
	capacity, bids, auths, err := spotHourAuction(ctx, tx, full, o, suspended, hour, now)
	if err != nil {
		return SpotResult{}, fail(op, err, "")
	}
	floor := full.InterruptibleCentsPerDH
	c := market.ClearSpot(floor, capacity, bids)
	res := SpotResult{Cleared: true, Clearing: SpotClearingRow{SpotHourClearing: market.SpotHourClearing{OfferID: offerID, Hour: hour,
		AcceleratorID: full.AcceleratorID, FloorCents: floor, PriceCents: c.PriceCents, Capacity: c.Capacity, DevicesBid: c.DevicesBid,
		DevicesSold: c.DevicesSold}, ClearedAt: truncate(now)}}
	var clearingID int64
	if err := tx.QueryRowContext(ctx, `INSERT INTO spot_clearings (offer_id, hour, accelerator_id, floor_cents, price_cents, capacity,
		devices_bid, devices_sold, cleared_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id`,
		offerID, unix(hour), full.AcceleratorID, int64(floor), int64(c.PriceCents), c.Capacity, c.DevicesBid, c.DevicesSold, unix(now)).Scan(&clearingID); err != nil {
		return SpotResult{}, fail(op, err, "")
	}

	// Spot rents by the hour, or what is left of it when cleared late: the
	// offer's rental limits are for on-demand bookings.
	spotOffer := o
	spotOffer.MinRentalHours, spotOffer.MaxRentalHours = 0, 0
	byID := map[int64]market.SpotBid{}
	for _, b := range bids {
		byID[b.ID] = b
	}
	for _, w := range c.Wins {
		b := byID[w.BidID]
		d, err := market.SpotHourDelivery(hour, now, c.PriceCents, w.Devices)
		if err != nil {
			return SpotResult{}, fail(op, err, "")
		}
		piece := market.ReservationPiece{OfferID: offerID, Devices: w.Devices, Start: d.Start, End: d.End, Interruptible: true,
			PriceCents: c.PriceCents, AmountCents: d.AmountCents}
		r, _, _ := newHold(b.BuyerID, []market.ReservationPiece{piece}, now, hold)
		r.RequestJSON = "{}"
		if err := placeOnOffer(ctx, tx, spotOffer, r.Pieces, []int{0}, now); err != nil {
			return SpotResult{}, fail(op, err, "")
		}
		if r.ID, err = insertReservation(ctx, tx, r); err != nil {
			return SpotResult{}, fail(op, err, "")
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO spot_allocations (clearing_id, bid_id, offer_id, hour, reservation_id, devices, price_cents)
			VALUES (?, ?, ?, ?, ?, ?, ?)`, clearingID, b.ID, offerID, unix(hour), r.ID, w.Devices, int64(c.PriceCents)); err != nil {
			return SpotResult{}, fail(op, err, "")
		}
		if err := insertNotification(ctx, tx, Notification{UserID: b.BuyerID, Kind: NotifySpotWon, CreatedAt: now, URL: "/spot",
			Notice: market.Notice{Kind: market.NoticeSpotWon, Params: market.NoticeParams{Bid: b.ID, Devices: w.Devices, Start: d.Start, End: d.End,
				Price: c.PriceCents, Max: b.MaxCents, Reservation: r.ID, Amount: d.AmountCents}}}); err != nil {
			return SpotResult{}, fail(op, err, "")
		}
		// The charge is recorded with the hold it pays, so a crash
		// before it is made leaves it for the retrier, not lost.
		want := market.ChargeIntent{Purpose: market.PurposeReservation, BuyerID: b.BuyerID, ReservationID: r.ID, Amount: r.AmountCents}
		if a, held := auths[b.ID]; held {
			// The charge captures the hold: the amount is at most the
			// bid's maximum for a whole hour.
			want.PaymentMethodID, want.PaymentIntentID, want.Authorized = a.PaymentMethodID, a.PaymentIntentID, true
			if _, err := tx.ExecContext(ctx, `UPDATE spot_authorizations SET state = ?, updated_at = ? WHERE id = ?`,
				string(market.SpotAuthAwarded), unix(now), a.ID); err != nil {
				return SpotResult{}, fail(op, err, "")
			}
		}
		ci, err := insertChargeIntent(ctx, tx, want, now)
		if err != nil && market.ErrorCode(err) != market.CodeNotFound {
			return SpotResult{}, fail(op, err, "")
		}
		res.Awards = append(res.Awards, SpotAward{BidID: b.ID, Reservation: r, Charge: ci})
	}

	// Preemptions: live bids that held the hour before, still want this one, and lost it.
	type held struct {
		allocID, bidID, resID, pieceID, providerID, buyerID int64
		devices                                             int
	}
	var prev []held
	rows, err := tx.QueryContext(ctx, `SELECT a.id, a.bid_id, a.reservation_id, p.id, p.provider_id, r.buyer_id, a.devices
		FROM spot_allocations a JOIN spot_bids b ON b.id = a.bid_id
		JOIN reservations r ON r.id = a.reservation_id JOIN reservation_pieces p ON p.reservation_id = r.id
		WHERE a.offer_id = ? AND a.hour = ? AND b.state = ? AND b.last_hour >= ? AND r.state IN (?, ?, ?, ?)
		ORDER BY a.id`, offerID, unix(hour.Add(-time.Hour)), string(market.SpotBidLive), unix(hour),
		string(market.ReservationConfirmed), string(market.ReservationActive), string(market.ReservationCompleted), string(market.ReservationSettled))
	if err != nil {
		return SpotResult{}, fail(op, err, "")
	}
	for rows.Next() {
		var h held
		if err := rows.Scan(&h.allocID, &h.bidID, &h.resID, &h.pieceID, &h.providerID, &h.buyerID, &h.devices); err != nil {
			rows.Close()
			return SpotResult{}, fail(op, err, "")
		}
		prev = append(prev, h)
	}
	if err := closeRows(rows); err != nil {
		return SpotResult{}, fail(op, err, "")
	}
	prevBids := make([]int64, len(prev))
	byBid := make(map[int64]held, len(prev))
	for i, h := range prev {
		prevBids[i], byBid[h.bidID] = h.bidID, h
	}
	for _, bidID := range c.SpotPreemptions(prevBids) {
		h := byBid[bidID]
		inc := Incident{Incident: market.SpotPreemption(h.pieceID, h.devices, hour, full.PreemptNoticeMins, c.PriceCents),
			ReservationID: h.resID, ReportedBy: ReportedBySpot, ReporterID: h.providerID, AcknowledgedAt: truncate(now), CreatedAt: truncate(now)}
		if err := tx.QueryRowContext(ctx, `INSERT INTO incidents (reservation_id, piece_id, kind, start_at, end_at, devices_affected,
			degradation_bp, note, reported_by, reporter_id, acknowledged, acknowledged_at, created_at)
			VALUES (?, ?, ?, ?, ?, ?, 0, ?, ?, ?, 1, ?, ?) RETURNING id`,
			inc.ReservationID, inc.PieceID, string(inc.Kind), unix(inc.Start), unix(inc.End), inc.DevicesAffected,
			inc.Note, inc.ReportedBy, inc.ReporterID, unix(now), unix(now)).Scan(&inc.ID); err != nil {
			return SpotResult{}, fail(op, err, "")
		}
		if _, err := tx.ExecContext(ctx, `UPDATE spot_allocations SET preempted = 1, incident_id = ? WHERE id = ?`, inc.ID, h.allocID); err != nil {
			return SpotResult{}, fail(op, err, "")
		}
		if err := insertNotification(ctx, tx, Notification{UserID: h.buyerID, Kind: NotifySpotPreempted, CreatedAt: now, URL: "/spot",
			Notice: market.Notice{Kind: market.NoticeSpotPreempted, Params: market.NoticeParams{Bid: h.bidID, Start: hour, Minutes: full.PreemptNoticeMins,
				Price: c.PriceCents}}}); err != nil {
			return SpotResult{}, fail(op, err, "")
		}
		res.Preempted = append(res.Preempted, inc)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE spot_bids SET state = ?, updated_at = ? WHERE offer_id = ? AND state = ? AND last_hour <= ?`,
		string(market.SpotBidFinished), unix(now), offerID, string(market.SpotBidLive), unix(hour)); err != nil {
		return SpotResult{}, fail(op, err, "")
	}
	if err := tx.Commit(); err != nil {
		return SpotResult{}, fail(op, err, "")
	}
	return res, nil
}

// spotHourAuction reads what market.ClearSpot takes for hour of the offer
// full (o as bookableOfferQuery reads it, suspended its provider) at now,
// as ClearSpotHour describes: the capacity on sale and the
// live bids covering the hour that take part (no wash trades, no barred
// buyers, none whose hold for the hour failed), with the holds for the
// hour by bid.
func spotHourAuction(ctx context.Context, tx querier, full, o market.Offer, suspended bool, hour, now time.Time) (capacity int, bids []market.SpotBid, auths map[int64]market.SpotAuthorization, err error) {
	end := hour.Add(time.Hour)
	window, err := market.SpotHourDelivery(hour, now, 0, 0)
	if err != nil {
		return 0, nil, nil, err
	}
	if window.Minutes > 0 && o.Listed() && !suspended && full.Interruptible && !hour.Before(o.AvailableFrom) && !end.After(o.AvailableUntil) {
		existing, err := queryCommitments(ctx, tx, now, bookingCommitmentsWhere, full.ID, unix(hour), unix(end))
		if err != nil {
			return 0, nil, nil, err
		}
		capacity = market.SpotCapacity(o, existing, hour)
	}
	live, err := collect(ctx, tx, scanSpotBid, `SELECT `+spotBidColumns+` FROM spot_bids b
		WHERE b.offer_id = ? AND b.state = ? AND b.first_hour <= ? AND b.last_hour >= ? ORDER BY b.id`,
		full.ID, string(market.SpotBidLive), unix(hour), unix(hour))
	if err != nil {
		return 0, nil, nil, err
	}
	// A bid whose hold for the hour was declined or never answered sits
	// the hour out (market.SpotAuthorization): it cannot win, nor set the
	// price the others pay.
	auths, err = spotAuthsForHour(ctx, tx, full.ID, hour)
	if err != nil {
		return 0, nil, nil, err
	}
	bids = make([]market.SpotBid, 0, len(live))
	barred := map[int64]bool{}
	for _, b := range live {
		if b.Wash(full) {
			continue
		}
		if a, held := auths[b.ID]; held && a.State != market.SpotAuthAuthorized {
			continue
		}
		bar, seen := barred[b.BuyerID]
		if !seen {
			msg, err := spotBidderBar(ctx, tx, b.BuyerID, now)
			if err != nil {
				return 0, nil, nil, err
			}
			bar = msg != ""
			barred[b.BuyerID] = bar
		}
		if !bar {
			bids = append(bids, b)
		}
	}
	return capacity, bids, auths, nil
}

// SpotInterruptionRates returns, for every offer with spot hours run in
// the SpotRateWindow before now, its observed preemption rate
// (market.SpotInterruptionPPM; 0 for unknown), for the matcher's index.
// An hour run is a won hour that was paid (its reservation confirmed or
// later, not cancelled) and has ended.
func (db *DB) SpotInterruptionRates(ctx context.Context, now time.Time) (map[int64]int, error) {
	return db.spotRates(ctx, now, 0)
}

// SpotInterruptionRate is SpotInterruptionRates for one offer.
func (db *DB) SpotInterruptionRate(ctx context.Context, offerID int64, now time.Time) (int, error) {
	m, err := db.spotRates(ctx, now, offerID)
	return m[offerID], err
}

func (db *DB) spotRates(ctx context.Context, now time.Time, offerID int64) (map[int64]int, error) {
	const op = "spot interruption rates"
	tx, err := db.read(ctx)
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx, `SELECT a.offer_id, COUNT(*), COALESCE(SUM(a.preempted), 0)
		FROM spot_allocations a JOIN reservations r ON r.id = a.reservation_id
		WHERE a.hour >= ? AND a.hour + 3600 <= ? AND r.state IN (?, ?, ?) AND (? = 0 OR a.offer_id = ?)
		GROUP BY a.offer_id`, unix(now.Add(-market.SpotRateWindow)), unix(now),
		string(market.ReservationActive), string(market.ReservationCompleted), string(market.ReservationSettled), offerID, offerID)
	if err != nil {
		return nil, fail(op, err, "")
	}
	out := map[int64]int{}
	for rows.Next() {
		var id int64
		var run, pre int
		if err := rows.Scan(&id, &run, &pre); err != nil {
			rows.Close()
			return nil, fail(op, err, "")
		}
		if ppm := market.SpotInterruptionPPM(run, pre); ppm > 0 {
			out[id] = ppm
		}
	}
	return out, fail(op, closeRows(rows), "")
}

// SpotQuotePrices is, per offer, the clearing price of its latest spot
// hour that sold devices, every one of them paid for, among the hours from
// SpotQuoteWindow before now on (cleared hours ahead included), for pricing
// interruptible capacity in quotes (market.SpotQuotePrice). A clearing
// with a won hour not paid (its charge in flight, declined, or lapsed)
// prices nothing: a bidder who never pays cannot set the price quotes
// use. offerID 0 means every offer.
func (db *DB) SpotQuotePrices(ctx context.Context, now time.Time, offerID int64) (map[int64]market.Cents, error) {
	const op = "spot quote prices"
	tx, err := db.read(ctx)
	if err != nil {
		return nil, fail(op, err, "")
	}
	defer tx.Rollback()
	// Only a clearing whose every won hour was paid prices quotes: a
	// winner who never paid must not leave its price standing.
	paid := market.PaidStates()
	unpaid := `EXISTS (SELECT 1 FROM spot_allocations a JOIN reservations r ON r.id = a.reservation_id
		WHERE a.clearing_id = %[1]s.id AND r.state NOT IN (?, ?, ?, ?))`
	args := []any{unix(now.Add(-market.SpotQuoteWindow)), offerID, offerID}
	for range 2 {
		for _, st := range paid {
			args = append(args, string(st))
		}
	}
	rows, err := tx.QueryContext(ctx, `SELECT c.offer_id, c.price_cents FROM spot_clearings c
		WHERE c.devices_sold > 0 AND c.hour >= ? AND (? = 0 OR c.offer_id = ?) AND NOT `+fmt.Sprintf(unpaid, "c")+`
		AND c.hour = (SELECT MAX(l.hour) FROM spot_clearings l WHERE l.offer_id = c.offer_id AND l.devices_sold > 0
			AND NOT `+fmt.Sprintf(unpaid, "l")+`)`, args...)
	if err != nil {
		return nil, fail(op, err, "")
	}
	out := map[int64]market.Cents{}
	for rows.Next() {
		var id, price int64
		if err := rows.Scan(&id, &price); err != nil {
			rows.Close()
			return nil, fail(op, err, "")
		}
		out[id] = market.Cents(price)
	}
	return out, fail(op, closeRows(rows), "")
}
