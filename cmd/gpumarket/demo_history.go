package main

import (
	"context"
	"crypto/rand"
	"fmt"
	mrand "math/rand/v2"
	"time"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
)

// Demo history: enough past trading on the demo offers that the market
// page shows real-looking index charts on a fresh database.
const (
	demoHistoryDays = 90
	demoHistorySeed = 20260101 // fixed: the same history for the same "now"
)

// seedDemoHistory books demoHistoryDays of past, settled reservations on
// the listed demo offers for a few synthetic buyers (who cannot log in),
// plus a handful of measured-work reports. Prices drift around each
// offer's list price (newer accelerators a little dearer in the past, a
// weekly rhythm, noise); volumes vary by day and model. No offer ever has
// more devices booked at once than it has (the history feeds the public
// price index), and pieces last at least the offer's minimum rental. Every
// piece ends before now, so none holds capacity.
func seedDemoHistory(ctx context.Context, db *store.DB, now time.Time) error {
	listings, err := db.ListAllListedOffers(ctx, now)
	if err != nil {
		return err
	}
	var buyers []int64
	for i, name := range []string{"Synthetic Lab A", "Synthetic Lab B", "Synthetic Startup C"} {
		secret := make([]byte, 32)
		if _, err := rand.Read(secret); err != nil {
			return err
		}
		u, err := db.CreateUser(ctx, market.User{Email: fmt.Sprintf("history%d@demo.gpumarket.test", i+1), DisplayName: name, IsBuyer: true},
			secret, now) // a random "hash" no password matches
		if err != nil {
			return fmt.Errorf("create history buyer: %w", err)
		}
		buyers = append(buyers, u.ID)
	}
	rng := mrand.New(mrand.NewPCG(demoHistorySeed, uint64(len(listings))))
	today := market.Day(now)
	var rs []market.Reservation
	committed := map[int64][]market.Commitment{} // by offer, for the capacity check
	for d := demoHistoryDays; d >= 1; d-- {
		day := today.AddDate(0, 0, -d)
		for _, l := range listings {
			o := l.Offer
			a := o.Accelerator()
			// Busier for popular models and on weekdays.
			rate := 0.55
			if a.Family == "H100" || a.Family == "A100" || a.Family == "RTX 4090" || a.Family == "L40S" {
				rate = 0.9
			}
			if wd := day.Weekday(); wd == time.Saturday || wd == time.Sunday {
				rate *= 0.6
			}
			n := 0
			for k := 0; k < 3; k++ {
				if rng.Float64() < rate*0.6 {
					n++
				}
			}
			for k := 0; k < n; k++ {
				intr := o.Interruptible && rng.IntN(3) == 0
				list := o.PriceCentsPerDeviceHour
				if intr {
					list = o.InterruptibleCentsPerDH
				}
				// Older trades were dearer for recent models (prices fall
				// as supply arrives), weekly rhythm, ±6% noise.
				age := float64(d) / demoHistoryDays
				drift := 1.0
				if a.ReleaseYear >= 2023 {
					drift += 0.14 * age
				} else {
					drift += 0.04 * age
				}
				weekly := 1.0
				if wd := day.Weekday(); wd >= time.Monday && wd <= time.Thursday {
					weekly = 1.025
				}
				price := market.Cents(float64(list)*drift*weekly*(0.94+0.12*rng.Float64()) + 0.5)
				price = max(price, 1)
				booked := day.Add(time.Duration(rng.IntN(24*60)) * time.Minute)
				start := booked.Add(time.Duration(1+rng.IntN(36)) * time.Hour).Truncate(time.Hour)
				hours := max([]int{2, 4, 8, 12, 24, 24, 48, 72}[rng.IntN(8)], o.MinRentalHours)
				end := start.Add(time.Duration(hours) * time.Hour)
				if !end.Before(now) {
					continue
				}
				devices := o.DevicesPerNode
				if rng.IntN(2) == 0 {
					devices = 1 + rng.IntN(o.Devices())
				}
				// Book only what is still free over the whole piece.
				free := o.Devices() - peakDevices(committed[o.ID], start, end)
				if free < 1 {
					continue
				}
				devices = min(devices, free)
				committed[o.ID] = append(committed[o.ID], market.Commitment{OfferID: o.ID, Devices: devices, Start: start, End: end})
				state := market.ReservationSettled
				if now.Sub(end) < 72*time.Hour {
					state = market.ReservationCompleted
				}
				amount := price * market.Cents(devices*hours)
				rs = append(rs, market.Reservation{
					BuyerID: buyers[rng.IntN(len(buyers))], State: state, RequestJSON: `{"version":1,"note":"demo history"}`,
					Pieces:    []market.ReservationPiece{{OfferID: o.ID, Devices: devices, Start: start, End: end, Interruptible: intr, PriceCents: price, AmountCents: amount}},
					CreatedAt: booked, UpdatedAt: end,
				})
			}
		}
	}
	if err := db.ImportPastReservations(ctx, rs, now); err != nil {
		return fmt.Errorf("demo history: %w", err)
	}
	return seedDemoWorkReports(ctx, db, buyers, rng)
}

// peakDevices is the most devices that the commitments cs hold at once
// within [start, end). Intervals are half-open, so the peak is reached at
// start or at the start of a commitment inside the interval; the history
// has a few hundred pieces per offer, so checking each is quick enough.
func peakDevices(cs []market.Commitment, start, end time.Time) int {
	instants := []time.Time{start}
	for _, c := range cs {
		if c.Start.After(start) && c.Start.Before(end) {
			instants = append(instants, c.Start)
		}
	}
	peak := 0
	for _, at := range instants {
		used := 0
		for _, c := range cs {
			if !at.Before(c.Start) && at.Before(c.End) {
				used += c.Devices
			}
		}
		peak = max(peak, used)
	}
	return peak
}

// seedDemoWorkReports adds measured-work reports on some of the history's
// reservations: tokens/s for inference-class models, training steps for
// the others.
func seedDemoWorkReports(ctx context.Context, db *store.DB, buyers []int64, rng *mrand.Rand) error {
	for _, b := range buyers {
		rs, err := db.ListBuyerReservations(ctx, b)
		if err != nil {
			return err
		}
		for i, r := range rs {
			if i%9 != 0 || len(r.Pieces) == 0 {
				continue
			}
			p := r.Pieces[0]
			l, err := db.FindOfferByID(ctx, p.OfferID)
			if err != nil {
				return err
			}
			a := l.Offer.Accelerator()
			minutes := int(p.End.Sub(p.Start) / time.Minute)
			rep := market.WorkReport{ReservationID: r.ID, OfferID: p.OfferID, ReporterID: b, ObservedMinutes: minutes,
				LostMinutes: rng.IntN(minutes/10 + 1)}
			// Throughput roughly in proportion to the model's BF16 figure.
			switch a.Family {
			case "L4", "L40S", "RTX 4090", "RTX 3090", "A10", "T4":
				rep.Metric, rep.LatencyPercentile, rep.Workload = market.MetricTokensPerSec, 95, "Llama 3.1 8B, vLLM, batch 32"
				rep.Value = int64(p.Devices) * int64(a.BF16TFLOPS) * int64(9+rng.IntN(4))
			default:
				rep.Metric, rep.Workload = market.MetricStepsPerHour, "Llama 3.1 8B fine-tune, seq 4096"
				rep.Value = int64(p.Devices) * int64(a.BF16TFLOPS) * int64(5+rng.IntN(3))
			}
			if _, err := db.CreateWorkReport(ctx, rep, r.UpdatedAt); err != nil {
				return fmt.Errorf("demo work report: %w", err)
			}
		}
	}
	return nil
}
