package market

// Priors used when a provider's record is unknown.
const (
	// DefaultReliabilityBP is the reliability assumed for a provider with no
	// record: 95.00 % of device-days complete without a host failure.
	DefaultReliabilityBP = 9500
	// DefaultInterruptionPPMPerHour is the interruption rate assumed for
	// interruptible capacity with no record: 1 % chance per hour.
	DefaultInterruptionPPMPerHour = 10_000
	// hoursPerMonth prices storage stated per GB-month: 730 h = 8,760 h / 12.
	hoursPerMonth = 730
)

// CostBreakdown itemises the effective cost of a piece or a quote, in cents.
//
// Rounding rule: every line item is computed exactly in integers and
// rounded once, half away from zero, with MulDivRound; Total is the exact
// sum of the rounded items, so the items always add up.
type CostBreakdown struct {
	// Instance is devices × hours × the booked price (on demand, or the
	// interruptible price when the request allows interruption and the
	// offer sells it).
	Instance Cents
	// Storage keeps the dataset on the piece for its duration.
	Storage Cents
	// Egress moves the dataset from its region to the piece's region.
	Egress Cents
	// Orchestration is the devices' paid time while nodes are provisioned.
	Orchestration Cents
	// FailedWork is the expected work lost to interruptions and host
	// failures: expected events × (half a checkpoint interval + restart
	// time) × devices × price.
	FailedWork Cents
	// Restart is the expected cost of provisioning again after each event.
	Restart Cents
	Total   Cents
}

// Charged is what the buyer pays at booking: instance time, storage and
// egress. The rest of the effective cost (orchestration, expected failed
// work and restarts) ranks quotes and is never charged.
func (c CostBreakdown) Charged() Cents { return c.Instance + c.Storage + c.Egress }

func (c *CostBreakdown) add(o CostBreakdown) {
	c.Instance += o.Instance
	c.Storage += o.Storage
	c.Egress += o.Egress
	c.Orchestration += o.Orchestration
	c.FailedWork += o.FailedWork
	c.Restart += o.Restart
	c.Total += o.Total
}

// expectedEventsDenom is the denominator of eventsNum below: events are
// counted in millionths, and host failures accrue per 24-hour device-day.
const expectedEventsDenom = 24 * 1_000_000

// pieceCost prices devices of slot s for hours, booked interruptible or not.
//
// Expected events over the piece, in millionths (numerator over 24):
//
//	host failures:  (10000 − reliabilityBP) × 100 × hours       (per 24 h)
//	interruptions:  24 × interruptionPPMPerHour × hours          (interruptible only)
func pieceCost(s *slot, q *query, devices, hours int64, intr bool) CostBreakdown {
	price := int64(s.price)
	if intr {
		price = int64(s.intrPrice)
	}
	var c CostBreakdown
	dp := devices * price
	c.Instance = Cents(dp * hours)
	// Every factor below is ≥ 0. When both factors of a product are under
	// 2³¹ (nearly always) it fits in 63 bits and divRound, inlined with a
	// constant divisor, divides by multiplication; else MulDivRound. Both
	// round half up, the documented rule.
	if q.datasetGB > 0 {
		a, b := q.datasetGB*int64(s.storageC), hours
		if uint64(a|b) < 1<<31 {
			c.Storage = Cents(divRound(a*b, hoursPerMonth))
		} else {
			c.Storage = Cents(MulDivRound(a, b, hoursPerMonth))
		}
		if q.dataRegion >= 0 && int(s.region) != q.dataRegion {
			c.Egress = Cents(q.datasetGB * int64(s.egressC))
		}
	}
	if pm := int64(s.provMins); uint64(dp|pm) < 1<<31 {
		c.Orchestration = Cents(divRound(dp*pm, 60))
	} else {
		c.Orchestration = Cents(MulDivRound(dp, pm, 60))
	}
	events := int64(10000-int64(s.reliability)) * 100 * hours
	if intr {
		events += 24 * int64(s.interruptPPM) * hours
	}
	if events > 0 {
		// lost minutes per event = checkpoint/2 + restart, counted in half-minutes.
		lostHalfMins := q.checkpointMins + 2*q.restartMins
		const den = expectedEventsDenom * 120
		if a, b := events*lostHalfMins, events*2*int64(s.provMins); uint64(dp|a|b) < 1<<31 {
			c.FailedWork = Cents(divRound(dp*a, den))
			c.Restart = Cents(divRound(dp*b, den))
		} else {
			c.FailedWork = Cents(MulDivRound(dp, a, den))
			c.Restart = Cents(MulDivRound(dp, b, den))
		}
	}
	c.Total = c.Instance + c.Storage + c.Egress + c.Orchestration + c.FailedWork + c.Restart
	return c
}

// pieceEmissions estimates grams of CO2e: board power × devices × hours ×
// the offer's carbon intensity.
func pieceEmissions(s *slot, devices, hours int64) int64 {
	a, b := int64(accelerators[s.acc].TDPWatts)*devices*hours, int64(s.carbon)
	if uint64(a|b) < 1<<31 {
		return divRound(a*b, 1000)
	}
	return MulDivRound(a, b, 1000)
}

// EstimateCost prices devices of a candidate for hours as the matcher
// would for req (booked interruptible when req allows it and the offer
// sells it). It is the cost model of every quote, exposed for pages that
// show a price before matching.
func EstimateCost(c Candidate, req Request, devices, hours int) (CostBreakdown, error) {
	s, err := makeSlot(c)
	if err != nil {
		return CostBreakdown{}, err
	}
	q, err := compile(req, c.Offer.AvailableFrom)
	if err != nil {
		return CostBreakdown{}, err
	}
	defer putQuery(q)
	return pieceCost(&s, q, int64(devices), int64(hours), q.allowIntr && s.flags&flagInterruptible != 0), nil
}

// divRound is p / c rounded half up, for p ≥ 0 and c > 0.
func divRound(p, c int64) int64 {
	q := uint64(p) / uint64(c)
	if r := uint64(p) - q*uint64(c); r >= uint64(c)-r {
		q++
	}
	return int64(q)
}
