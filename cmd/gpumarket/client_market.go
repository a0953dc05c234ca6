package main

import (
	"flag"
	"fmt"
	"net/http"
	"text/tabwriter"
	"time"
)

// The exchange (standing orders, spot bids, resale) and the provider's
// subcommands (offers, hosts). Each is a group: `gpumarket orders list`,
// `gpumarket bids place …`, `gpumarket hosts token create …`.

// group runs the named action of a subcommand group.
func group(c *apiClient, name string, args []string, actions map[string]func(*apiClient, []string) error, usage string) error {
	if len(args) == 0 {
		return usageErr("usage: gpumarket %s", usage)
	}
	f, ok := actions[args[0]]
	if !ok {
		return usageErr("unknown action %q\nusage: gpumarket %s", args[0], usage)
	}
	return f(c, args[1:])
}

// simple runs an action of one optional id: METHOD path, and prints the
// JSON answer (these answers are small; --json is the only output).
func simple(c *apiClient, args []string, usage, method, pathFormat string, nIDs int, done string) error {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print the API's JSON")
	pos, err := parseFlags(fs, args, usage, nIDs, nIDs)
	if err != nil {
		return err
	}
	path := pathFormat
	if nIDs == 1 {
		id, err := idArg(pos[0], "ID")
		if err != nil {
			return err
		}
		path = fmt.Sprintf(pathFormat, id)
	}
	data, err := c.do(method, path, nil, nil)
	if err != nil {
		return err
	}
	if *asJSON || done == "" {
		return c.printJSON(data)
	}
	fmt.Fprintln(c.stdout, fmt.Sprintf(done, pos[0]))
	return nil
}

func cmdOrders(c *apiClient, args []string) error {
	const usage = "orders list | orders place (--file request.json | --devices N --hours H …) --limit-cents C [--limit-kind price|budget] --fill-by TIME [--on-fill hold|pay] | orders cancel ID"
	return group(c, "orders", args, map[string]func(*apiClient, []string) error{
		"list": func(c *apiClient, a []string) error {
			return simple(c, a, "orders list", http.MethodGet, "/orders", 0, "")
		},
		"cancel": func(c *apiClient, a []string) error {
			return simple(c, a, "orders cancel ID", http.MethodPost, "/orders/%d/cancel", 1, "Standing order %s cancelled.")
		},
		"place": func(c *apiClient, a []string) error {
			fs := flag.NewFlagSet("orders place", flag.ContinueOnError)
			rf := addRequestFlags(fs)
			kind := fs.String("limit-kind", "price", "price (per device-hour) or budget (the whole booking)")
			limit := fs.Int64("limit-cents", 0, "the limit, cents")
			fillBy := fs.String("fill-by", "", "fill by then (RFC 3339) or expire")
			onFill := fs.String("on-fill", "hold", "hold (pay yourself) or pay (with the saved card)")
			if _, err := parseFlags(fs, a, usage, 0, 0); err != nil {
				return err
			}
			t, err := time.Parse(time.RFC3339, *fillBy)
			if err != nil {
				return usageErr("--fill-by must be an RFC 3339 time, e.g. 2026-12-08T10:00:00Z")
			}
			req, err := rf.request(c)
			if err != nil {
				return err
			}
			data, err := c.do(http.MethodPost, "/orders", map[string]any{"request": req, "limit_kind": *kind, "limit_cents": *limit, "fill_by": t, "on_fill": *onFill}, nil)
			if err != nil {
				return err
			}
			return c.printJSON(data)
		},
	}, usage)
}

func cmdBids(c *apiClient, args []string) error {
	const usage = "bids list | bids place --offer ID --devices N --max-cents C --first-hour TIME --last-hour TIME [--confirm-above-on-demand] | bids cancel ID"
	return group(c, "bids", args, map[string]func(*apiClient, []string) error{
		"list": func(c *apiClient, a []string) error {
			return simple(c, a, "bids list", http.MethodGet, "/spot/bids", 0, "")
		},
		"cancel": func(c *apiClient, a []string) error {
			return simple(c, a, "bids cancel ID", http.MethodPost, "/spot/bids/%d/cancel", 1, "Spot bid %s cancelled.")
		},
		"place": func(c *apiClient, a []string) error {
			fs := flag.NewFlagSet("bids place", flag.ContinueOnError)
			offer := fs.Int64("offer", 0, "the offer")
			devices := fs.Int("devices", 0, "devices")
			maxCents := fs.Int64("max-cents", 0, "the most per device-hour, cents")
			first := fs.String("first-hour", "", "the first whole UTC hour, RFC 3339")
			last := fs.String("last-hour", "", "the start of the last hour, RFC 3339")
			above := fs.Bool("confirm-above-on-demand", false, "bid above the on-demand price")
			if _, err := parseFlags(fs, a, usage, 0, 0); err != nil {
				return err
			}
			ft, err1 := time.Parse(time.RFC3339, *first)
			lt, err2 := time.Parse(time.RFC3339, *last)
			if err1 != nil || err2 != nil {
				return usageErr("--first-hour and --last-hour must be RFC 3339 times")
			}
			data, err := c.do(http.MethodPost, "/spot/bids", map[string]any{"offer_id": *offer, "devices": *devices, "max_cents_per_device_hour": *maxCents,
				"first_hour": ft, "last_hour": lt, "confirm_above_on_demand": *above}, nil)
			if err != nil {
				return err
			}
			return c.printJSON(data)
		},
	}, usage)
}

func cmdResale(c *apiClient, args []string) error {
	const usage = "resale list | resale sell RESERVATION --from TIME --price-cents C | resale withdraw LISTING | resale buy LISTING"
	return group(c, "resale", args, map[string]func(*apiClient, []string) error{
		"list": func(c *apiClient, a []string) error {
			return simple(c, a, "resale list", http.MethodGet, "/resale", 0, "")
		},
		"withdraw": func(c *apiClient, a []string) error {
			return simple(c, a, "resale withdraw LISTING", http.MethodPost, "/resale/%d/withdraw", 1, "Listing %s withdrawn.")
		},
		"buy": func(c *apiClient, a []string) error {
			return simple(c, a, "resale buy LISTING", http.MethodPost, "/resale/%d/buy", 1, "")
		},
		"sell": func(c *apiClient, a []string) error {
			fs := flag.NewFlagSet("resale sell", flag.ContinueOnError)
			from := fs.String("from", "", "the whole hour to sell from, RFC 3339")
			price := fs.Int64("price-cents", 0, "the price of all of it, cents")
			pos, err := parseFlags(fs, a, usage, 1, 1)
			if err != nil {
				return err
			}
			id, err := idArg(pos[0], "RESERVATION")
			if err != nil {
				return err
			}
			t, err := time.Parse(time.RFC3339, *from)
			if err != nil {
				return usageErr("--from must be an RFC 3339 time")
			}
			data, err := c.do(http.MethodPost, fmt.Sprintf("/reservations/%d/resale", id), map[string]any{"from": t, "price_cents": *price}, nil)
			if err != nil {
				return err
			}
			return c.printJSON(data)
		},
	}, usage)
}

func cmdOffers(c *apiClient, args []string) error {
	const usage = "offers list [--json] | offers pause ID | offers resume ID"
	state := func(s, done string) func(*apiClient, []string) error {
		return func(c *apiClient, a []string) error {
			pos, err := parseFlags(flag.NewFlagSet("offers", flag.ContinueOnError), a, "offers "+s+" ID", 1, 1)
			if err != nil {
				return err
			}
			id, err := idArg(pos[0], "ID")
			if err != nil {
				return err
			}
			if _, err := c.do(http.MethodPost, fmt.Sprintf("/provider/offers/%d/state", id), map[string]string{"state": map[string]string{"pause": "paused", "resume": "active"}[s]}, nil); err != nil {
				return err
			}
			fmt.Fprintf(c.stdout, "Offer %d %s.\n", id, done)
			return nil
		}
	}
	return group(c, "offers", args, map[string]func(*apiClient, []string) error{
		"pause":  state("pause", "paused"),
		"resume": state("resume", "active again"),
		"list": func(c *apiClient, a []string) error {
			fs := flag.NewFlagSet("offers list", flag.ContinueOnError)
			asJSON := fs.Bool("json", false, "print the API's JSON")
			if _, err := parseFlags(fs, a, "offers list [--json]", 0, 0); err != nil {
				return err
			}
			var out cliOfferList
			data, err := c.do(http.MethodGet, "/provider/offers", nil, &out)
			if err != nil {
				return err
			}
			if *asJSON {
				return c.printJSON(data)
			}
			tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tSTATE\tREVIEW\tACCELERATOR\tDEVICES\tREGION\t$/DEVICE-HR\tTITLE")
			for _, o := range out.Offers {
				k := o.Contract
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d×%d\t%s\t%s\t%s\n", o.ID, o.State, o.Review, k.Accelerator, k.Nodes, k.DevicesPerNode, k.Region, money(k.PriceCents), k.Title)
			}
			return tw.Flush()
		},
	}, usage)
}

func cmdHosts(c *apiClient, args []string) error {
	const usage = "hosts status [--json] | hosts token create --offer ID --node N"
	return group(c, "hosts", args, map[string]func(*apiClient, []string) error{
		"status": func(c *apiClient, a []string) error {
			fs := flag.NewFlagSet("hosts status", flag.ContinueOnError)
			asJSON := fs.Bool("json", false, "print the API's JSON")
			if _, err := parseFlags(fs, a, "hosts status [--json]", 0, 0); err != nil {
				return err
			}
			var out struct {
				Offers []struct {
					OfferID int64  `json:"offer_id"`
					Title   string `json:"title"`
					Nodes   []struct {
						Node           int        `json:"node"`
						TokenPrefix    string     `json:"token_prefix"`
						Online         bool       `json:"online"`
						LastHeartbeat  *time.Time `json:"last_heartbeat"`
						Devices        int        `json:"devices"`
						HealthyDevices int        `json:"healthy_devices"`
						Rentals        int        `json:"rentals"`
					} `json:"nodes"`
				} `json:"offers"`
			}
			data, err := c.do(http.MethodGet, "/provider/hosts", nil, &out)
			if err != nil {
				return err
			}
			if *asJSON {
				return c.printJSON(data)
			}
			tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "OFFER\tNODE\tTOKEN\tONLINE\tLAST HEARTBEAT\tHEALTHY\tRENTALS")
			for _, o := range out.Offers {
				for _, n := range o.Nodes {
					last := "never"
					if n.LastHeartbeat != nil {
						last = when(*n.LastHeartbeat)
					}
					tok := n.TokenPrefix
					if tok == "" {
						tok = "none"
					}
					online := "no"
					if n.Online {
						online = "yes"
					}
					fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%s\t%d/%d\t%d\n", o.OfferID, n.Node, tok, online, last, n.HealthyDevices, n.Devices, n.Rentals)
				}
			}
			return tw.Flush()
		},
		"token": func(c *apiClient, a []string) error {
			if len(a) == 0 || a[0] != "create" {
				return usageErr("usage: gpumarket hosts token create --offer ID --node N")
			}
			fs := flag.NewFlagSet("hosts token create", flag.ContinueOnError)
			offer := fs.Int64("offer", 0, "the offer")
			node := fs.Int("node", -1, "the node, counted from 0")
			if _, err := parseFlags(fs, a[1:], "hosts token create --offer ID --node N", 0, 0); err != nil {
				return err
			}
			if *offer <= 0 || *node < 0 {
				return usageErr("usage: gpumarket hosts token create --offer ID --node N")
			}
			var out struct {
				Token string `json:"token"`
				Node  int    `json:"node"`
			}
			if _, err := c.do(http.MethodPost, "/provider/hosts/tokens", map[string]any{"offer_id": *offer, "node": *node}, &out); err != nil {
				return err
			}
			// The token alone on stdout, for a script to capture; the
			// advice on stderr.
			fmt.Fprintln(c.stdout, out.Token)
			fmt.Fprintf(c.stderr, "host token for node %d of offer %d: shown only once; the node's previous token is revoked\n", out.Node, *offer)
			return nil
		},
	}, usage)
}
