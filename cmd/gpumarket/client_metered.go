package main

import (
	"flag"
	"fmt"
	"net/http"
	"time"
)

// Metered rentals from the command line (docs/metered.md):
//
//	gpumarket metered start OFFER --devices N [--max-minutes M] [--json]
//	gpumarket metered stop RESERVATION [--json]
//	gpumarket metered balance [--json] (the same as gpumarket balance)

// cliMetered is the API's metered rental, as far as the client prints it.
type cliMetered struct {
	ReservationID int64      `json:"reservation_id"`
	OfferID       int64      `json:"offer_id"`
	Devices       int        `json:"devices"`
	PriceCents    int64      `json:"price_cents_per_device_hour"`
	State         string     `json:"state"`
	ClockStart    *time.Time `json:"clock_start"`
	StopAt        *time.Time `json:"stopped_at"`
	StopReason    string     `json:"stop_reason"`
	Minutes       int64      `json:"minutes_billed"`
	DrawnCents    int64      `json:"drawn_cents"`
	HeldUntil     time.Time  `json:"held_until"`
}

func cmdMetered(c *apiClient, args []string) error {
	if len(args) == 0 {
		return usageErr("usage: gpumarket metered start OFFER --devices N [--max-minutes M] | stop RESERVATION | balance [--json]")
	}
	switch args[0] {
	case "start":
		fs := flag.NewFlagSet("metered start", flag.ContinueOnError)
		devices := fs.Int("devices", 1, "devices to rent")
		maxMinutes := fs.Int("max-minutes", 0, "stop after this many minutes (0: no maximum)")
		asJSON := fs.Bool("json", false, "print the API's JSON")
		pos, err := parseFlags(fs, args[1:], "metered start [--devices N] [--max-minutes M] [--json] OFFER", 1, 1)
		if err != nil {
			return err
		}
		id, err := idArg(pos[0], "OFFER")
		if err != nil {
			return err
		}
		return c.meteredCall(fmt.Sprintf("/offers/%d/metered", id), map[string]int{"devices": *devices, "max_minutes": *maxMinutes}, *asJSON)
	case "stop":
		fs := flag.NewFlagSet("metered stop", flag.ContinueOnError)
		asJSON := fs.Bool("json", false, "print the API's JSON")
		pos, err := parseFlags(fs, args[1:], "metered stop [--json] RESERVATION", 1, 1)
		if err != nil {
			return err
		}
		id, err := idArg(pos[0], "RESERVATION")
		if err != nil {
			return err
		}
		return c.meteredCall(fmt.Sprintf("/reservations/%d/stop", id), nil, *asJSON)
	case "balance":
		fs := flag.NewFlagSet("metered balance", flag.ContinueOnError)
		asJSON := fs.Bool("json", false, "print the API's JSON")
		if _, err := parseFlags(fs, args[1:], "metered balance [--json]", 0, 0); err != nil {
			return err
		}
		return c.showBalance(*asJSON)
	}
	return usageErr("unknown metered command %q (want start, stop or balance)", args[0])
}

// meteredCall posts to a metered route and prints the rental.
func (c *apiClient) meteredCall(path string, body any, asJSON bool) error {
	var m cliMetered
	data, err := c.do(http.MethodPost, path, body, &m)
	if err != nil {
		return err
	}
	if asJSON {
		return c.printJSON(data)
	}
	fmt.Fprintf(c.stdout, "Metered rental #%d: %d device(s) of offer %d at %s per device-hour, %s.\n", m.ReservationID, m.Devices, m.OfferID, money(m.PriceCents), m.State)
	if m.ClockStart == nil {
		fmt.Fprintln(c.stdout, "The clock starts when the machine is usable (access handed over and the acceptance test passed).")
	}
	fmt.Fprintf(c.stdout, "Billed %d minute(s), %s. Stop it: gpumarket metered stop %d\n", m.Minutes, money(m.DrawnCents), m.ReservationID)
	return nil
}
