package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// The buyer's subcommands: search, quote, book, pay, list, show, extend,
// cancel, reject and ssh.

type cliOffer struct {
	ID       int64  `json:"id"`
	Provider string `json:"provider"`
	State    string `json:"state"`
	Review   string `json:"review"`
	Contract struct {
		Title          string `json:"title"`
		Accelerator    string `json:"accelerator"`
		MemoryGB       int    `json:"memory_gb"`
		DevicesPerNode int    `json:"devices_per_node"`
		Nodes          int    `json:"nodes"`
		Region         string `json:"region"`
		PriceCents     int64  `json:"price_cents"`
		Interruptible  bool   `json:"interruptible"`
		UptimeBP       int    `json:"uptime_bp"`
	} `json:"contract"`
}

type cliOfferList struct {
	Offers []cliOffer `json:"offers"`
	Total  int        `json:"total"`
}

func cmdSearch(c *apiClient, args []string) error {
	fs := flag.NewFlagSet("search", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print the API's JSON")
	limit := fs.Int("limit", 20, "how many offers")
	sort := fs.String("sort", "", "price, reliability, …")
	pos, err := parseFlags(fs, args, "search [--json] [--limit N] [--sort S] 'QUERY' (the catalogue's query language, e.g. 'devices>=8 family=H100 price<2.50')", 0, -1)
	if err != nil {
		return err
	}
	q := url.Values{"limit": {strconv.Itoa(*limit)}}
	if len(pos) > 0 {
		q.Set("q", strings.Join(pos, " "))
	}
	if *sort != "" {
		q.Set("sort", *sort)
	}
	var out cliOfferList
	data, err := c.do(http.MethodGet, queryPath("/offers", q), nil, &out)
	if err != nil {
		return err
	}
	if *asJSON {
		return c.printJSON(data)
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tACCELERATOR\tDEVICES\tREGION\t$/DEVICE-HR\tUPTIME\tPROVIDER\tTITLE")
	for _, o := range out.Offers {
		k := o.Contract
		fmt.Fprintf(tw, "%d\t%s\t%d×%d\t%s\t%s\t%d.%02d%%\t%s\t%s\n", o.ID, k.Accelerator, k.Nodes, k.DevicesPerNode, k.Region,
			money(k.PriceCents), k.UptimeBP/100, k.UptimeBP%100, o.Provider, k.Title)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "%d of %d matching offers\n", len(out.Offers), out.Total)
	return nil
}

// requestFlags builds a portable request from flags, or reads one from a
// file ("-" for stdin).
type requestFlags struct {
	file, kind, families, accelerators, regions, start, deadline string
	devices, hours, limit, checkpoint, restart                   int
	maxPrice                                                     int64
}

func addRequestFlags(fs *flag.FlagSet) *requestFlags {
	r := &requestFlags{}
	fs.StringVar(&r.file, "file", "", "the request JSON file (the builder's \"Download as JSON\"; - for stdin) instead of the flags below")
	fs.StringVar(&r.kind, "kind", "training", "training, inference or batch")
	fs.IntVar(&r.devices, "devices", 0, "devices")
	fs.IntVar(&r.hours, "hours", 0, "hours")
	fs.IntVar(&r.checkpoint, "checkpoint-mins", 0, "minutes between checkpoints (training)")
	fs.IntVar(&r.restart, "restart-mins", 0, "minutes to restart from a checkpoint (training)")
	fs.StringVar(&r.families, "family", "", "accelerator families, comma-separated (H100,A100)")
	fs.StringVar(&r.accelerators, "model", "", "accelerator ids, comma-separated")
	fs.StringVar(&r.regions, "region", "", "region ids, comma-separated")
	fs.StringVar(&r.start, "start", "", "earliest start, RFC 3339 (default: as soon as possible)")
	fs.StringVar(&r.deadline, "deadline", "", "finish by, RFC 3339")
	fs.Int64Var(&r.maxPrice, "max-price-cents", 0, "most per device-hour, cents")
	fs.IntVar(&r.limit, "limit", 0, "how many quotes")
	return r
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// request returns the request JSON: the file as it is, or one built
// from the flags.
func (r *requestFlags) request(c *apiClient) (json.RawMessage, error) {
	if r.file != "" {
		var data []byte
		var err error
		if r.file == "-" {
			data, err = io.ReadAll(c.stdin)
		} else {
			data, err = os.ReadFile(r.file)
		}
		if err != nil {
			return nil, usageErr("%v", err)
		}
		if !json.Valid(data) {
			return nil, usageErr("%s is not JSON", r.file)
		}
		return json.RawMessage(data), nil
	}
	if r.devices <= 0 || r.hours <= 0 {
		return nil, usageErr("say --devices and --hours, or give the request as --file request.json")
	}
	w := map[string]any{"kind": r.kind, "devices": r.devices, "hours": r.hours}
	if r.checkpoint > 0 {
		w["checkpoint_mins"] = r.checkpoint
	}
	if r.restart > 0 {
		w["restart_mins"] = r.restart
	}
	cons := map[string]any{}
	if l := splitList(r.families); l != nil {
		cons["families"] = l
	}
	if l := splitList(r.accelerators); l != nil {
		cons["accelerators"] = l
	}
	if l := splitList(r.regions); l != nil {
		cons["regions"] = l
	}
	if r.start != "" {
		cons["earliest_start"] = r.start
	}
	if r.deadline != "" {
		cons["deadline"] = r.deadline
	}
	if r.maxPrice > 0 {
		cons["max_price_cents"] = r.maxPrice
	}
	doc := map[string]any{"version": 1, "workload": w, "constraints": cons}
	if r.limit > 0 {
		doc["limit"] = r.limit
	}
	return json.Marshal(doc)
}

type cliCost struct {
	Instance      int64 `json:"instance_cents"`
	Storage       int64 `json:"storage_cents"`
	Egress        int64 `json:"egress_cents"`
	Orchestration int64 `json:"orchestration_cents"`
	FailedWork    int64 `json:"expected_failed_work_cents"`
	Restart       int64 `json:"restart_cents"`
	Total         int64 `json:"total_cents"`
}

type cliQuote struct {
	QuoteID    string    `json:"quote_id"`
	ValidUntil time.Time `json:"valid_until"`
	Rank       int       `json:"rank"`
	Pieces     []struct {
		OfferID     int64     `json:"offer_id"`
		Accelerator string    `json:"accelerator"`
		Region      string    `json:"region"`
		Devices     int       `json:"devices"`
		Start       time.Time `json:"start"`
		End         time.Time `json:"end"`
		PriceCents  int64     `json:"price_cents_per_device_hour"`
	} `json:"pieces"`
	Cost          cliCost   `json:"cost"`
	ChargedCents  int64     `json:"charged_cents"`
	Emissions     string    `json:"emissions_kg_co2e"`
	ReliabilityBP int       `json:"reliability_bp"`
	Start         time.Time `json:"start"`
	End           time.Time `json:"end"`
	Exact         bool      `json:"exact"`
}

type cliQuotes struct {
	Quotes      []cliQuote `json:"quotes"`
	Total       int        `json:"total"`
	Explanation struct {
		Summary     string         `json:"summary"`
		Considered  int            `json:"considered"`
		Fit         int            `json:"fit"`
		Eliminated  map[string]int `json:"eliminated"`
		Shortfall   string         `json:"shortfall"`
		Relaxations []struct {
			Constraint string          `json:"constraint"`
			Message    string          `json:"message"`
			Quotes     int             `json:"quotes"`
			Request    json.RawMessage `json:"request"`
		} `json:"relaxations"`
	} `json:"explanation"`
	Search struct {
		Message string `json:"message"`
	} `json:"search"`
}

func (c *apiClient) quote(req json.RawMessage) (cliQuotes, []byte, error) {
	var out cliQuotes
	data, err := c.do(http.MethodPost, "/quotes", req, &out)
	return out, data, err
}

func cmdQuote(c *apiClient, args []string) error {
	fs := flag.NewFlagSet("quote", flag.ContinueOnError)
	rf := addRequestFlags(fs)
	asJSON := fs.Bool("json", false, "print the API's JSON")
	explain := fs.Bool("explain", false, "also print why offers were rejected and what to relax")
	if _, err := parseFlags(fs, args, "quote [--json] [--explain] (--file request.json | --devices N --hours H [--family H100] …)", 0, 0); err != nil {
		return err
	}
	req, err := rf.request(c)
	if err != nil {
		return err
	}
	qs, data, err := c.quote(req)
	if err != nil {
		return err
	}
	if *asJSON {
		if err := c.printJSON(data); err != nil {
			return err
		}
	} else {
		c.printQuotes(qs, *explain || len(qs.Quotes) == 0)
	}
	if len(qs.Quotes) == 0 {
		return &exitError{code: exitRefused, msg: "no quotes for this request: " + qs.Explanation.Summary}
	}
	return nil
}

func (c *apiClient) printQuotes(qs cliQuotes, explain bool) {
	w := c.stdout
	for _, q := range qs.Quotes {
		fmt.Fprintf(w, "#%d  %s – %s   charged %s   effective %s   reliability %d.%02d%%   %s kg CO2e\n", q.Rank, when(q.Start), when(q.End),
			money(q.ChargedCents), money(q.Cost.Total), q.ReliabilityBP/100, q.ReliabilityBP%100, q.Emissions)
		for _, p := range q.Pieces {
			fmt.Fprintf(w, "    offer %d: %d × %s in %s at %s/device-hour, %s – %s\n", p.OfferID, p.Devices, p.Accelerator, p.Region, money(p.PriceCents), when(p.Start), when(p.End))
		}
		k := q.Cost
		fmt.Fprintf(w, "    instance %s + storage %s + egress %s + orchestration %s + expected failed work %s + restarts %s = %s",
			money(k.Instance), money(k.Storage), money(k.Egress), money(k.Orchestration), money(k.FailedWork), money(k.Restart), money(k.Total))
		if !q.Exact {
			fmt.Fprint(w, " (at least)")
		}
		fmt.Fprintf(w, "\n    quote id %s (valid until %s)\n", q.QuoteID, when(q.ValidUntil))
	}
	if qs.Search.Message != "" {
		fmt.Fprintln(w, qs.Search.Message)
	}
	if !explain {
		return
	}
	e := qs.Explanation
	fmt.Fprintf(w, "Why: %s\n  %d offers considered, %d fit.\n", e.Summary, e.Considered, e.Fit)
	for _, k := range sortedIntKeys(e.Eliminated) {
		fmt.Fprintf(w, "  rejected by %s: %d\n", k, e.Eliminated[k])
	}
	if e.Shortfall != "" {
		fmt.Fprintf(w, "  shortfall: %s\n", e.Shortfall)
	}
	for _, r := range e.Relaxations {
		fmt.Fprintf(w, "  relax %s: %s (%d quotes)\n", r.Constraint, r.Message, r.Quotes)
	}
}

func sortedIntKeys(m map[string]int) []string {
	s := map[string]string{}
	for k := range m {
		s[k] = ""
	}
	return sortedKeys(s)
}

type cliPiece struct {
	OfferID     int64     `json:"offer_id"`
	Devices     int       `json:"devices"`
	Start       time.Time `json:"start"`
	End         time.Time `json:"end"`
	PriceCents  int64     `json:"price_cents_per_device_hour"`
	AmountCents int64     `json:"amount_cents"`
}

type cliAccess struct {
	PieceID    int64  `json:"piece_id"`
	Node       int    `json:"node"`
	Devices    int    `json:"devices"`
	State      string `json:"state"`
	Host       string `json:"host"`
	Port       int    `json:"port"`
	User       string `json:"user"`
	SSHCommand string `json:"ssh_command"`
	Online     bool   `json:"online"`
}

type cliReservation struct {
	ID            int64       `json:"id"`
	State         string      `json:"state"`
	AmountCents   int64       `json:"amount_cents"`
	CancelFee     int64       `json:"cancel_fee_cents"`
	HoldExpiresAt *time.Time  `json:"hold_expires_at"`
	RejectUntil   *time.Time  `json:"reject_until"`
	Pieces        []cliPiece  `json:"pieces"`
	Access        []cliAccess `json:"access"`
	CreatedAt     time.Time   `json:"created_at"`
}

func (r cliReservation) span() (time.Time, time.Time) {
	var s, e time.Time
	for _, p := range r.Pieces {
		if s.IsZero() || p.Start.Before(s) {
			s = p.Start
		}
		if p.End.After(e) {
			e = p.End
		}
	}
	return s, e
}

func (c *apiClient) printReservation(r cliReservation) {
	w := c.stdout
	s, e := r.span()
	fmt.Fprintf(w, "Reservation #%d: %s, %s, %s – %s\n", r.ID, r.State, money(r.AmountCents), when(s), when(e))
	if r.HoldExpiresAt != nil {
		fmt.Fprintf(w, "  held until %s: pay before then (gpumarket pay %d)\n", when(*r.HoldExpiresAt), r.ID)
	}
	if r.RejectUntil != nil {
		fmt.Fprintf(w, "  can be rejected for a full refund until %s (gpumarket reject %d)\n", when(*r.RejectUntil), r.ID)
	}
	if r.CancelFee > 0 {
		fmt.Fprintf(w, "  cancellation fee kept: %s\n", money(r.CancelFee))
	}
	for _, p := range r.Pieces {
		fmt.Fprintf(w, "  offer %d: %d devices at %s/device-hour, %s – %s, %s\n", p.OfferID, p.Devices, money(p.PriceCents), when(p.Start), when(p.End), money(p.AmountCents))
	}
	for _, a := range r.Access {
		line := fmt.Sprintf("  node %d (%d devices): %s", a.Node, a.Devices, a.State)
		if a.SSHCommand != "" {
			line += ": " + a.SSHCommand
		}
		fmt.Fprintln(w, line)
	}
}

func cmdBook(c *apiClient, args []string) error {
	fs := flag.NewFlagSet("book", flag.ContinueOnError)
	rf := addRequestFlags(fs)
	quoteID := fs.String("quote-id", "", "the quote to book (from gpumarket quote); default: quote now and book the best")
	pay := fs.Bool("pay", false, "pay at once with your saved card")
	wait := fs.Bool("wait", false, "wait until the machines are ready and print the ssh command (implies the reservation gets paid)")
	timeout := fs.Duration("timeout", 2*time.Hour, "how long --wait waits")
	poll := fs.Duration("poll", 10*time.Second, "how often --wait asks")
	asJSON := fs.Bool("json", false, "print the API's JSON")
	if _, err := parseFlags(fs, args, "book [--quote-id ID] (--file request.json | --devices N --hours H …) [--pay] [--wait] [--json]", 0, 0); err != nil {
		return err
	}
	req, err := rf.request(c)
	if err != nil {
		return err
	}
	id := *quoteID
	if id == "" {
		qs, _, err := c.quote(req)
		if err != nil {
			return err
		}
		if len(qs.Quotes) == 0 {
			return &exitError{code: exitRefused, msg: "no quotes for this request: " + qs.Explanation.Summary}
		}
		id = qs.Quotes[0].QuoteID
		fmt.Fprintf(c.stderr, "booking the best quote: %s effective, %s charged\n", money(qs.Quotes[0].Cost.Total), money(qs.Quotes[0].ChargedCents))
	}
	var r cliReservation
	data, err := c.do(http.MethodPost, "/reservations", map[string]any{"request": req, "quote_id": id}, &r)
	if err != nil {
		return err
	}
	if *pay {
		if data, err = c.do(http.MethodPost, fmt.Sprintf("/reservations/%d/pay", r.ID), nil, &r); err != nil {
			return err
		}
	}
	if *wait {
		return c.waitReady(r.ID, *timeout, *poll, *asJSON)
	}
	if *asJSON {
		return c.printJSON(data)
	}
	c.printReservation(r)
	return nil
}

// waitReady polls the reservation until every node's access is ready,
// then prints the ssh command of each; a reservation that ends unpaid or
// is cancelled is refused.
func (c *apiClient) waitReady(id int64, timeout, poll time.Duration, asJSON bool) error {
	deadline := time.Now().Add(timeout)
	last := ""
	for {
		var r cliReservation
		data, err := c.do(http.MethodGet, fmt.Sprintf("/reservations/%d", id), nil, &r)
		if err != nil {
			return err
		}
		switch r.State {
		case "cancelled", "expired", "completed", "settled":
			return &exitError{code: exitRefused, msg: fmt.Sprintf("reservation #%d is %s: its machines will not be ready", id, r.State)}
		}
		ready := len(r.Access) > 0
		var states []string
		for _, a := range r.Access {
			states = append(states, fmt.Sprintf("node %d %s", a.Node, a.State))
			ready = ready && a.State == "ready"
		}
		if ready {
			if asJSON {
				return c.printJSON(data)
			}
			for _, a := range r.Access {
				fmt.Fprintln(c.stdout, a.SSHCommand)
			}
			return nil
		}
		now := r.State
		if len(states) > 0 {
			now += ": " + strings.Join(states, ", ")
		}
		if now != last {
			fmt.Fprintf(c.stderr, "reservation #%d %s; waiting…\n", id, now)
			last = now
		}
		if time.Now().After(deadline) {
			return &exitError{code: exitRefused, msg: fmt.Sprintf("reservation #%d not ready after %s (%s)", id, timeout, now)}
		}
		select {
		case <-c.ctx.Done():
			return c.ctx.Err()
		case <-time.After(poll):
		}
	}
}

// reservationCmd runs a one-reservation subcommand: METHOD path, then
// the reservation (or its JSON) printed.
func (c *apiClient) reservationCmd(name string, args []string, method, suffix string, body func() (any, error)) error {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print the API's JSON")
	pos, err := parseFlags(fs, args, name+" [--json] RESERVATION", 1, 1)
	if err != nil {
		return err
	}
	id, err := idArg(pos[0], "RESERVATION")
	if err != nil {
		return err
	}
	var b any
	if body != nil {
		if b, err = body(); err != nil {
			return err
		}
	}
	var r cliReservation
	data, err := c.do(method, fmt.Sprintf("/reservations/%d%s", id, suffix), b, &r)
	if err != nil {
		return err
	}
	if *asJSON {
		return c.printJSON(data)
	}
	c.printReservation(r)
	return nil
}

func cmdPay(c *apiClient, args []string) error {
	return c.reservationCmd("pay", args, http.MethodPost, "/pay", nil)
}

func cmdShow(c *apiClient, args []string) error {
	return c.reservationCmd("show", args, http.MethodGet, "", nil)
}

func cmdCancel(c *apiClient, args []string) error {
	return c.reservationCmd("cancel", args, http.MethodPost, "/cancel", nil)
}

func cmdReject(c *apiClient, args []string) error {
	// The reason is a flag of its own; strip it before the shared parser.
	reason := ""
	var rest []string
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case (a == "--reason" || a == "-reason") && i+1 < len(args):
			reason, i = args[i+1], i+1
		case strings.HasPrefix(a, "--reason="), strings.HasPrefix(a, "-reason="):
			reason = a[strings.Index(a, "=")+1:]
		default:
			rest = append(rest, a)
		}
	}
	return c.reservationCmd("reject", rest, http.MethodPost, "/reject", func() (any, error) {
		return map[string]string{"reason": reason}, nil
	})
}

func cmdList(c *apiClient, args []string) error {
	fs := flag.NewFlagSet("list", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print the API's JSON")
	if _, err := parseFlags(fs, args, "list [--json]", 0, 0); err != nil {
		return err
	}
	var out struct {
		Reservations []cliReservation `json:"reservations"`
	}
	data, err := c.do(http.MethodGet, "/reservations", nil, &out)
	if err != nil {
		return err
	}
	if *asJSON {
		return c.printJSON(data)
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tAMOUNT\tDEVICES\tSTART\tEND")
	for _, r := range out.Reservations {
		s, e := r.span()
		n := 0
		for _, p := range r.Pieces {
			n += p.Devices
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\t%s\n", r.ID, r.State, money(r.AmountCents), n, when(s), when(e))
	}
	return tw.Flush()
}

func cmdExtend(c *apiClient, args []string) error {
	fs := flag.NewFlagSet("extend", flag.ContinueOnError)
	hours := fs.Int("hours", 0, "by how many hours")
	maxCents := fs.Int64("max-cents", 0, "refuse if the extension costs more than this (cents)")
	asJSON := fs.Bool("json", false, "print the API's JSON")
	pos, err := parseFlags(fs, args, "extend RESERVATION --hours N [--max-cents C] [--json]", 1, 1)
	if err != nil {
		return err
	}
	id, err := idArg(pos[0], "RESERVATION")
	if err != nil {
		return err
	}
	if *hours <= 0 {
		return usageErr("say by how many hours: --hours N")
	}
	var q struct {
		MinHours    int   `json:"min_hours"`
		MaxHours    int   `json:"max_hours"`
		AmountCents int64 `json:"amount_cents"`
	}
	if _, err := c.do(http.MethodGet, fmt.Sprintf("/reservations/%d/extension?hours=%d", id, *hours), nil, &q); err != nil {
		return err
	}
	if *maxCents > 0 && q.AmountCents > *maxCents {
		return &exitError{code: exitRefused, msg: fmt.Sprintf("the extension costs %s, more than --max-cents %s; nothing booked", money(q.AmountCents), money(*maxCents))}
	}
	var r cliReservation
	data, err := c.do(http.MethodPost, fmt.Sprintf("/reservations/%d/extend", id), map[string]any{"hours": *hours, "amount_cents": q.AmountCents}, &r)
	if err != nil {
		return err
	}
	if *asJSON {
		return c.printJSON(data)
	}
	fmt.Fprintf(c.stdout, "Extended by %d hours for %s, as reservation #%d (pay it: gpumarket pay %d).\n", *hours, money(q.AmountCents), r.ID, r.ID)
	c.printReservation(r)
	return nil
}

// cmdSSH replaces the process with the system ssh, connected to the
// reservation's node as its access says; arguments after -- go to ssh.
func cmdSSH(c *apiClient, args []string) error {
	fs := flag.NewFlagSet("ssh", flag.ContinueOnError)
	node := fs.Int("node", -1, "which node (default: the first ready one)")
	identity := fs.String("i", c.identity, "the private key file (default: the config's identity_file, else ssh's own)")
	pos, err := parseFlags(fs, args, "ssh [--node N] [-i KEY] RESERVATION [-- SSH ARGUMENTS…]", 1, -1)
	if err != nil {
		return err
	}
	id, err := idArg(pos[0], "RESERVATION")
	if err != nil {
		return err
	}
	var r cliReservation
	if _, err := c.do(http.MethodGet, fmt.Sprintf("/reservations/%d", id), nil, &r); err != nil {
		return err
	}
	var target *cliAccess
	for i, a := range r.Access {
		if a.State == "ready" && (*node < 0 || a.Node == *node) {
			target = &r.Access[i]
			break
		}
	}
	if target == nil {
		var states []string
		for _, a := range r.Access {
			states = append(states, fmt.Sprintf("node %d %s", a.Node, a.State))
		}
		msg := fmt.Sprintf("reservation #%d (%s) has no ready node to connect to", id, r.State)
		if len(states) > 0 {
			msg += ": " + strings.Join(states, ", ")
		}
		return &exitError{code: exitRefused, msg: msg}
	}
	path, err := exec.LookPath("ssh")
	if err != nil {
		return &exitError{code: exitRefused, msg: "no ssh on PATH: " + err.Error()}
	}
	argv := []string{"ssh", "-p", strconv.Itoa(target.Port)}
	if *identity != "" {
		if rest, ok := strings.CutPrefix(*identity, "~/"); ok && c.getenv("HOME") != "" {
			*identity = c.getenv("HOME") + "/" + rest // no shell expands it here
		}
		argv = append(argv, "-i", *identity)
	}
	argv = append(argv, target.User+"@"+target.Host)
	argv = append(argv, pos[1:]...)
	return c.exec(path, argv, os.Environ())
}
