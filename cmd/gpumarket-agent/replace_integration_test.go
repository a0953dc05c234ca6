package main

import (
	"context"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
)

// TestReplacementAgainstServer runs the real server and two real agents,
// one on each node of a 2-node offer (docs/replacement.md). The buyer
// books one node for an hour with the auto replacement policy and pays;
// the agent of the booked node installs the buyer's key. Then that agent
// is killed (SIGKILL); past the grace period the server's round measures
// the host failure and books the replacement on the other node — and the
// server is killed (SIGKILL) as soon as the failure shows, and restarted
// on the same database: exactly one replacement is booked. The other
// node's agent installs the buyer's key, the API and the reservation page
// show the new endpoint, the buyer is told where the rental runs now, the
// statement shows both pieces side by side, its figures equal those
// derived here from the terms, and `gpumarket reconcile` is clean.
func TestReplacementAgainstServer(t *testing.T) {
	const (
		priceCents = 317 // the harness's itOfferForm
		perNode    = 8
		tierBP     = 2500 // uptime below 99 %: 25 % of the amount
	)
	mk := newMarket(t, "replace", url.Values{"title": {"2 × 8 H100 SXM, replacement test"}, "devices_per_node": {strconv.Itoa(perNode)},
		"nodes": {"2"}, "network": {"roce-400"}, "placement_group": {"1"}})
	srv, db, buyer := mk.srv, mk.db, mk.buyer
	offerID, buyerKey, apiToken := mk.offerID, mk.buyerKey, mk.apiToken

	// A host token per node, each shown once on the hosts page; an agent
	// on each node, each with its own authorized_keys and address.
	hosts := make([]*itHost, 2)
	for node := range hosts {
		hosts[node] = mk.host(node, fmt.Sprintf("203.0.113.%d", 7+node), "")
	}

	// One node for two hours, two hours from now, replaced automatically
	// (the offer rents for an hour at least: the time left must be as long).
	start := time.Now().UTC().Truncate(time.Minute).Add(2 * time.Hour)
	end := start.Add(2 * time.Hour)
	request := fmt.Sprintf(`{"version":1,"workload":{"kind":"training","devices":%d,"hours":2,"checkpoint_mins":60,"restart_mins":10},
		"constraints":{"families":["H100"],"earliest_start":%q,"deadline":%q},"replacement":{"policy":"auto"}}`,
		perNode, start.Format(time.RFC3339), start.Add(48*time.Hour).Format(time.RFC3339))
	var quotes struct {
		Quotes []struct {
			QuoteID string    `json:"quote_id"`
			Start   time.Time `json:"start"`
		} `json:"quotes"`
		OnFailure string `json:"on_failure"`
	}
	srv.api(t, apiToken, "POST", "/api/v1/quotes", request, http.StatusOK, &quotes)
	if len(quotes.Quotes) == 0 || !quotes.Quotes[0].Start.Equal(start) || !strings.Contains(quotes.OnFailure, "moves your rental to another machine") {
		t.Fatalf("quotes: %+v", quotes)
	}
	var booked apiReservation
	srv.api(t, apiToken, "POST", "/api/v1/reservations", `{"request":`+request+`,"quote_id":"`+quotes.Quotes[0].QuoteID+`"}`, http.StatusCreated, &booked)
	resPath := fmt.Sprintf("/reservations/%d", booked.ID)
	r := buyer.mustPost(resPath, resPath+"/pay", url.Values{}, http.StatusSeeOther)
	checkout := buyer.path(r.location)
	buyer.mustPost(checkout, checkout, url.Values{}, http.StatusSeeOther)

	for _, h := range hosts {
		mk.start(h)
	}

	// Just before the start the booked node's agent installs the key.
	srv = srv.restartAt(t, start.Add(-3*time.Second))
	var ready apiReservation
	waitUntil(t, 30*time.Second, "the API shows the booked node's connection", func() bool {
		ready = srv.reservation(t, apiToken, booked.ID)
		return len(ready.Access) == 1 && ready.Access[0].State == "ready"
	})
	failed := ready.Access[0].Node
	other := 1 - failed
	if !strings.Contains(readFile(t, hosts[failed].keys), buyerKey) || strings.Contains(readFile(t, hosts[other].keys), buyerKey) {
		t.Fatalf("the key is on the wrong node: node %d booked", failed)
	}

	// Some minutes into the rental, the booked node's agent is killed.
	srv = srv.restartAt(t, start.Add(3*time.Minute))
	waitUntil(t, 20*time.Second, "both agents beat after the restart", func() bool {
		hb := srv.reservation(t, apiToken, booked.ID).Access[0].LastHeartbeat
		return hb != nil && !hb.Before(start.Add(3*time.Minute))
	})
	if err := hosts[failed].proc.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-hosts[failed].proc.done
	last := *srv.reservation(t, apiToken, booked.ID).Access[0].LastHeartbeat

	// Five minutes later (the market up all along), past the grace period:
	// the round measures the failure. The server is killed as soon as the
	// failure shows, then serves the same database again.
	srv = srv.restartUpAt(t, last.Add(5*time.Minute), last)
	waitUntil(t, 20*time.Second, "the failed node shows offline", func() bool {
		got := srv.reservation(t, apiToken, booked.ID)
		return len(got.Access) > 0 && !got.Access[0].Online
	})
	if err := srv.proc.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-srv.proc.done
	srv = startServer(t, mk.bins, db, srv.addr, time.Until(last.Add(5*time.Minute+2*time.Second)))

	// The other node's agent installs the key; the buyer sees where to connect.
	var moved apiReservation
	waitUntil(t, 30*time.Second, "the API shows the replacement node's connection", func() bool {
		moved = srv.reservation(t, apiToken, booked.ID)
		for _, a := range moved.Access {
			if a.Node == other && a.State == "ready" {
				return true
			}
		}
		return false
	})
	for _, a := range moved.Access {
		if a.Node == other && (a.Host != hosts[other].addr || a.SSHCommand != "ssh -p 2222 gpu@"+hosts[other].addr) {
			t.Fatalf("the replacement's access %+v", a)
		}
	}
	if !strings.Contains(readFile(t, hosts[other].keys), buyerKey) {
		t.Fatal("the buyer's key is not on the replacement node")
	}
	if !strings.Contains(buyer.get(resPath).body, "ssh -p 2222 gpu@"+hosts[other].addr) {
		t.Error("the reservation page does not show the new endpoint")
	}
	told := fmt.Sprintf("The provider's agent measured a host failure on node %d of reservation #%d.", failed+1, booked.ID)
	ready2 := fmt.Sprintf("is ready on node %d of offer #%s: connect with ssh -p 2222 gpu@%s", other+1, offerID, hosts[other].addr)
	if n := html.UnescapeString(buyer.get("/notifications").body); !strings.Contains(n, told) || !strings.Contains(n, fmt.Sprintf("node(s) %d", other+1)) ||
		!strings.Contains(n, ready2) {
		t.Errorf("the buyer is not told what failed and where the rental runs now:\n%s", n)
	}

	// At the end both pieces settle.
	srv = srv.restartAt(t, end.Add(-20*time.Second))
	waitUntil(t, 60*time.Second, "the reservation is settled", func() bool {
		return srv.reservation(t, apiToken, booked.ID).State == string(market.ReservationSettled)
	})
	statement := buyer.get(resPath + "/statement").body
	srv.stop(t)

	sdb, err := store.Open(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	reps, err := sdb.ListReplacements(context.Background(), booked.ID)
	sdb.Close()
	if err != nil {
		t.Fatal(err)
	}
	if len(reps) != 1 || reps[0].State != store.ReplacementBooked || reps[0].Tier != market.TierSameOffer || reps[0].FailedNode != failed {
		t.Fatalf("replacements %+v, want one on the same offer's other node", reps)
	}
	from := reps[0].From
	incs, settled := readBooks(t, db, booked.ID)

	// The figures from the terms: two hours of one node cost 2 × 8 × 317¢
	// = 5,072¢. The replacement runs [from, end): the buyer paid for it
	// 5,072 × (end − from) / 7,200 s (rounded down); the same offer matches
	// it for 2 whole hours at the same price, clamped to the same seconds:
	// the same amount, so no refund and no share. The original piece keeps
	// the rest, and its host failure from the last heartbeat to the
	// replacement's start gives the credit of the terms: the time lost not
	// charged, plus 25 % (uptime below 99 %), capped at 100 %.
	paid := int64(2 * perNode * priceCents)
	left := int64(end.Sub(from) / time.Second)
	remaining := paid * left / 7200
	delivered := paid - remaining
	if s := reps[0].Split; int64(s.Remaining) != remaining || int64(s.Cost) != remaining || s.Refund != 0 || s.ProviderShare != 0 || s.BuyerShare != 0 ||
		int64(s.Delivered) != delivered {
		t.Fatalf("split %+v, want remaining = cost = %d, delivered %d", s, remaining, delivered)
	}
	var inc store.Incident
	for _, i := range incs {
		if i.Kind == market.IncidentHostFailure && i.End.Equal(from) {
			inc = i
		}
	}
	if inc.ID == 0 || !inc.Start.Equal(last.Truncate(time.Second)) {
		t.Fatalf("incidents %+v: want the host failure from %s to %s", incs, last, from)
	}
	reserved := int64(perNode) * int64(from.Sub(start)/time.Second)
	lost := int64(perNode) * int64(inc.End.Sub(inc.Start)/time.Second)
	credit := min(roundHalfAway(delivered*(lost*10000+tierBP*reserved), reserved*10000), delivered)
	if int64(settled.Statement.Refund) != credit {
		t.Errorf("settlement refund %d, want %d from the terms (delivered %d, lost %d of %d device-seconds)", settled.Statement.Refund, credit, delivered, lost, reserved)
	}
	if got := testidText(statement, "statement-refund"); got != market.Cents(credit).String() {
		t.Errorf("the statement shows the refund %q, want %s", got, market.Cents(credit))
	}
	for _, want := range []string{`data-testid="replacement-original"`, `data-testid="replacement-new"`, `data-testid="replacement-difference">none<`,
		fmt.Sprintf(`data-testid="replacement-incident">Incident #%d: Host failure`, inc.ID)} {
		if !strings.Contains(statement, want) {
			t.Errorf("the statement lacks %s", want)
		}
	}
	srv.reconcile(t)
}
