package web

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/gpumarket/gpumarket/market"
)

// publicKeyLine makes a fresh key of the given kind and returns its
// authorized_keys line with a comment.
func publicKeyLine(t *testing.T, kind string) string {
	t.Helper()
	var pub any
	switch kind {
	case "ed25519":
		p, _, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		pub = p
	case "ecdsa":
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		pub = &k.PublicKey
	case "rsa2048", "rsa3072":
		bits := 2048
		if kind == "rsa3072" {
			bits = 3072
		}
		k, err := rsa.GenerateKey(rand.Reader, bits)
		if err != nil {
			t.Fatal(err)
		}
		pub = &k.PublicKey
	}
	sp, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sp))) + " buyer@laptop"
}

// addSSHKey adds a key on the account page and fails the test unless it
// is accepted.
func addSSHKey(t *testing.T, c *client, line string) {
	t.Helper()
	r := c.post("/account", "/account/ssh-keys", url.Values{"public_key": {line}})
	if r.status != http.StatusSeeOther || r.location != "/account#ssh-h" {
		t.Fatalf("add ssh key: %d → %q\n%s", r.status, r.location, r.body)
	}
}

func TestSSHKeysOnTheAccountPage(t *testing.T) {
	app := newTestApp(t)
	buyer := app.client()
	buyer.signUp("keys@example.com", false)
	mustContain(t, buyer.get("/account").body, `data-testid="ssh-keys-none"`, `id="ssh-h"`)

	ed := publicKeyLine(t, "ed25519")
	addSSHKey(t, buyer, ed)
	addSSHKey(t, buyer, publicKeyLine(t, "ecdsa"))
	addSSHKey(t, buyer, publicKeyLine(t, "rsa3072"))
	page := buyer.get("/account").body
	mustContain(t, page, "Ed25519 256 bits", "ECDSA 256 bits", "RSA 3072 bits", "SHA256:", "buyer@laptop")
	if n := strings.Count(page, `data-testid="ssh-key"`); n != 3 {
		t.Fatalf("%d keys listed, want 3", n)
	}
	// The key itself is not even shown back to its owner: its fingerprint is.
	mustNotContain(t, page, strings.Fields(ed)[1])

	bad := []struct{ text, want string }{
		{"", "Paste your public key"},
		{"hello world", "This is not an SSH public key"},
		{publicKeyLine(t, "rsa2048"), "This RSA key has 2048 bits; RSA keys need at least 3072"},
		{"-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----", "This is a private key"},
		{`command="rm -rf /" ` + ed, "without the options in front of it"},
		{ed + "\n" + publicKeyLine(t, "ed25519"), "one key at a time"},
		{ed, "You have already added this key."},
		{ed + " me\x00laptop", "control character U+0000"},
		{ed + " me\xfflaptop", "not valid UTF-8"},
		{"ssh-ed25519\x00" + strings.Fields(ed)[1], "control character U+0000"},
		{"ssh-dss AAAAB3NzaC1kc3MAAACBAP1/U4EddRIpUt9KnC7s5Of2EbdSPO9EAMMeP4C2USZpRV1AIlH7WT2NWPq/xfW6MPbLm1Vs14E7gB00b/JmYLdrmVClpJ+f6AR7ECLCT7up1/63xhv4O1fnxqimFQ8E+4P208UewwI1VBNaFpEy9nXzrith1yrv8iIDGZ3RSAHHAAAAFQCXYFCPFSMLzLKSuYKi64QL8Fgc9QAAAIEA9+GghdabPd7LvKtcNrhXuXmUr7v6OuqC+VdMCz0HgmdRWVeOutRZT+ZxBxCBgLRJFnEj6EwoFhO3zwkyjMim4TwWeotUfI0o4KOuHiuzpnWRbqN/C/ohNWLx+2J6ASQ7zKTxvqhRkImog9/hWuWfBpKLZl6Ae1UlZAFMO/7PSSoAAACBAPGmf1n7X9g3RqCj+3PQ1JWBC7ZtZRnDcWWIiEUm8iO7ihvHrU1z3K9IKdQZQ2ms6Gu4yGAaHcCMnSxAmeYwwewYx9MmXVxYM8/ZLSxP/GY+W63dKxdrtVNSTymfEPSn+X4y+jG3E1qYuS7t9tpd+ZaxzVBxhnkrG8MZqOnEh8XV", "DSA keys are no longer safe"},
	}
	for _, b := range bad {
		r := buyer.post("/account", "/account/ssh-keys", url.Values{"public_key": {b.text}})
		if r.status != http.StatusUnprocessableEntity {
			t.Errorf("%.30q: status %d, want 422", b.text, r.status)
			continue
		}
		msg := html.UnescapeString(r.body[strings.Index(r.body, `data-testid="error-public_key"`):])
		if !strings.Contains(msg[:strings.Index(msg, "</span>")], b.want) {
			t.Errorf("%.30q: message %q, want %q", b.text, msg[:strings.Index(msg, "</span>")], b.want)
		}
		if !strings.Contains(html.UnescapeString(r.body), ">"+b.text+"</textarea>") {
			t.Errorf("%.30q: the pasted text is not kept", b.text)
		}
	}

	// Another account sees none of them and cannot remove them.
	other := app.client()
	other.signUp("keys-other@example.com", false)
	mustContain(t, other.get("/account").body, `data-testid="ssh-keys-none"`)
	keys, err := app.db.ListSSHKeys(context.Background(), buyer.userID())
	if err != nil || len(keys) != 3 {
		t.Fatal(keys, err)
	}
	if r := other.post("/account", fmt.Sprintf("/account/ssh-keys/%d/remove", keys[0].ID), url.Values{}); r.status != http.StatusNotFound {
		t.Errorf("another account removing a key: %d", r.status)
	}
	if r := buyer.post("/account", fmt.Sprintf("/account/ssh-keys/%d/remove", keys[0].ID), url.Values{}); r.status != http.StatusSeeOther {
		t.Fatalf("remove: %d", r.status)
	}
	if n := strings.Count(buyer.get("/account").body, `data-testid="ssh-key"`); n != 2 {
		t.Fatalf("%d keys after removing one, want 2", n)
	}
}

// apiReservationAccess reads a reservation's access through the API.
type apiAccessReply struct {
	ID     int64 `json:"id"`
	Access []struct {
		PieceID        int64  `json:"piece_id"`
		Node           int    `json:"node"`
		Devices        int    `json:"devices"`
		State          string `json:"state"`
		Host           string `json:"host"`
		Port           int    `json:"port"`
		User           string `json:"user"`
		SSHCommand     string `json:"ssh_command"`
		Online         bool   `json:"online"`
		HealthyDevices *int   `json:"healthy_devices"`
	} `json:"access"`
}

func (a *testApp) apiAccess(token string, id int64) (int, apiAccessReply) {
	a.t.Helper()
	r := a.apiCall(http.MethodGet, fmt.Sprintf("/api/v1/reservations/%d", id), token, "")
	var out apiAccessReply
	if r.status == http.StatusOK {
		if err := json.Unmarshal([]byte(r.body), &out); err != nil {
			a.t.Fatal(err)
		}
	}
	return r.status, out
}

func TestAccessHandoverToTheBuyerOnly(t *testing.T) {
	app := newBillingApp(t)
	prov := app.client()
	prov.signUp("handover@example.com", true)
	o := app.twoNodeOffer(prov.userID())
	buyer := app.client()
	buyer.signUp("renter@example.com", false)
	key := publicKeyLine(t, "ed25519")
	addSSHKey(t, buyer, key)
	r := app.bookAndPay(buyer)
	p := r.Pieces[0]
	if p.OfferID != o.ID || len(p.Nodes) != 1 {
		t.Fatalf("piece %+v", p)
	}
	node := p.Nodes[0].Node
	token := createHostToken(t, prov, o.ID, node)
	otherNode := createHostToken(t, prov, o.ID, 1-node)
	otherProv := app.client()
	otherProv.signUp("handover-other@example.com", true)
	o2 := app.ownOfferTerms(otherProv.userID(), func(x *market.Offer) { x.Title = "Other provider's H100" })
	otherOffer := createHostToken(t, otherProv, o2.ID, 0)
	api := buyer.createToken("machines", "read")

	// Before the start: nothing to do; the buyer sees when the keys come.
	if rep := app.beat(token, heartbeatBody(1, 8)); len(rep.Assignments) != 0 {
		t.Fatalf("assignments before the start: %+v", rep.Assignments)
	}
	resPage := fmt.Sprintf("/reservations/%d", r.ID)
	mustContain(t, buyer.get(resPage).body, `data-testid="reservation-access"`, "Your keys are installed at the start")

	// At the start: install, with the buyer's key, on this node only.
	app.tick(p.Start)
	rep := app.beat(token, heartbeatBody(2, 8))
	if len(rep.Assignments) != 1 {
		t.Fatalf("assignments at the start: %+v", rep.Assignments)
	}
	as := rep.Assignments[0]
	if as.ReservationID != r.ID || as.PieceID != p.ID || as.Devices != 8 || as.State != "install" || !as.Start.Equal(p.Start) ||
		!as.End.Equal(p.End) || len(as.SSHKeys) != 1 || as.SSHKeys[0] != key || as.SSHUser != "" {
		t.Fatalf("assignment %+v", as)
	}
	for _, tok := range []string{otherNode, otherOffer} {
		if rep := app.beat(tok, heartbeatBody(2, 8)); len(rep.Assignments) != 0 {
			t.Fatalf("another node's agent is told %+v", rep.Assignments)
		}
	}
	mustContain(t, buyer.get(resPage).body, "The provider&#39;s agent is installing your keys")
	if status, acc := app.apiAccess(api, r.ID); status != http.StatusOK || len(acc.Access) != 1 || acc.Access[0].State != "installing" || acc.Access[0].Host != "" {
		t.Fatalf("API before installation: %d %+v", status, acc)
	}

	// Another node's agent, another provider's agent: the piece is not theirs.
	installed := map[string]any{"host": "203.0.113.7", "port": 22, "user": "gpu", "installed_at": p.Start.Format(time.RFC3339)}
	path := fmt.Sprintf("/agent/v1/assignments/%d/installed", p.ID)
	for _, tok := range []string{otherNode, otherOffer} {
		if res := app.agentPost(tok, path, installed); res.status != http.StatusNotFound {
			t.Errorf("installed by a stranger: %d %s", res.status, res.body)
		}
		if res := app.agentPost(tok, fmt.Sprintf("/agent/v1/assignments/%d/removed", p.ID), map[string]any{}); res.status != http.StatusNotFound {
			t.Errorf("removed by a stranger: %d %s", res.status, res.body)
		}
	}
	if res := app.agentPost(token, path, map[string]any{"host": "bad host", "port": 22, "user": "gpu"}); res.status != http.StatusBadRequest || !strings.Contains(res.body, `"host"`) {
		t.Errorf("bad host: %d %s", res.status, res.body)
	}
	if res := app.agentPost(token, path, installed); res.status != http.StatusOK {
		t.Fatalf("installed: %d %s", res.status, res.body)
	}

	// The buyer sees how to connect, on the page and in the API.
	page := buyer.get(resPage).body
	mustContain(t, page, `data-testid="access-command"`, "ssh gpu@203.0.113.7", `data-testid="access-host">203.0.113.7<`,
		`data-testid="access-port">22<`, `data-testid="access-user">gpu<`, "8 of 8 devices healthy")
	status, acc := app.apiAccess(api, r.ID)
	if status != http.StatusOK || len(acc.Access) != 1 {
		t.Fatalf("API: %d %+v", status, acc)
	}
	if a := acc.Access[0]; a.State != "ready" || a.Host != "203.0.113.7" || a.Port != 22 || a.User != "gpu" || a.SSHCommand != "ssh gpu@203.0.113.7" ||
		a.PieceID != p.ID || a.Node != node || a.Devices != 8 || !a.Online || a.HealthyDevices == nil || *a.HealthyDevices != 8 {
		t.Fatalf("API access %+v", a)
	}
	// Only to that buyer: another buyer, the provider and admins see
	// neither the connection nor the key.
	stranger := app.client()
	stranger.signUp("stranger@example.com", false)
	if r := stranger.get(resPage); r.status != http.StatusNotFound {
		t.Errorf("another buyer's page: %d", r.status)
	}
	if status, _ := app.apiAccess(stranger.createToken("x", "read"), r.ID); status != http.StatusNotFound {
		t.Errorf("another buyer's API: %d", status)
	}
	admin := app.client()
	admin.signUp("handover-admin@example.com", false)
	if err := app.makeAdmin(context.Background(), admin.userID(), true); err != nil {
		t.Fatal(err)
	}
	secret := strings.Fields(key)[1]
	for who, pages := range map[*client][]string{
		prov:  {"/provider/hosts", fmt.Sprintf("/provider/bookings/%d", r.ID), "/provider/reservations"},
		admin: {"/admin/hosts", fmt.Sprintf("/admin/reservations/%d", r.ID), "/admin/offers"},
		buyer: {"/account", resPage},
	} {
		for _, path := range pages {
			body := who.get(path).body
			mustNotContain(t, body, secret)
			if who != buyer {
				mustNotContain(t, body, "203.0.113.7")
			}
		}
	}
	mustContain(t, hostBlock(t, prov.get("/provider/hosts").body, o.ID, node), "The buyer&#39;s keys are installed (since "+market.FormatTime(p.Start))

	// At the end: remove. Not confirmed ten minutes later, the provider and
	// the admins see it.
	app.tick(p.End)
	rep = app.beat(token, heartbeatBody(3, 8))
	if len(rep.Assignments) != 1 || rep.Assignments[0].State != "remove" || len(rep.Assignments[0].SSHKeys) != 0 {
		t.Fatalf("assignments at the end: %+v", rep.Assignments)
	}
	mustContain(t, admin.get("/admin/hosts").body, `data-testid="overdue-none"`)
	app.tick(p.End.Add(market.RemovalDeadline))
	mustContain(t, hostBlock(t, prov.get("/provider/hosts").body, o.ID, node), "are not confirmed removed 10 minutes after the end")
	mustContain(t, admin.get("/admin/hosts").body, `data-testid="host-overdue-row"`, fmt.Sprintf("Reservation #%d, piece %d", r.ID, p.ID))
	mustContain(t, buyer.get(resPage).body, "the provider&#39;s agent is removing your keys")

	if res := app.agentPost(token, fmt.Sprintf("/agent/v1/assignments/%d/removed", p.ID), map[string]any{"removed_at": p.End.Format(time.RFC3339)}); res.status != http.StatusOK {
		t.Fatalf("removed: %d %s", res.status, res.body)
	}
	mustContain(t, admin.get("/admin/hosts").body, `data-testid="overdue-none"`)
	mustContain(t, buyer.get(resPage).body, "your keys were removed "+market.FormatTime(p.End))
	mustNotContain(t, buyer.get(resPage).body, `data-testid="access-command"`)
	if rep := app.beat(token, heartbeatBody(4, 8)); len(rep.Assignments) != 0 {
		t.Fatalf("assignments after the removal: %+v", rep.Assignments)
	}
	if _, acc := app.apiAccess(api, r.ID); acc.Access[0].State != "removed" || acc.Access[0].Host != "" {
		t.Fatalf("API after the removal: %+v", acc)
	}
}

// TestAccessNotEndedIsAnIncident: an agent that reports it could not end a
// rental's access (its keys, or with -rental-users its user and processes)
// tells the provider once per failure and lists the node for the admins
// until it reports the access removed; a report before installation, or by
// another node's agent, is refused.
func TestAccessNotEndedIsAnIncident(t *testing.T) {
	app := newBillingApp(t)
	prov := app.client()
	prov.signUp("stuck@example.com", true)
	o := app.twoNodeOffer(prov.userID())
	buyer := app.client()
	buyer.signUp("stuck-renter@example.com", false)
	addSSHKey(t, buyer, publicKeyLine(t, "ed25519"))
	r := app.bookAndPay(buyer)
	p := r.Pieces[0]
	node := p.Nodes[0].Node
	token := createHostToken(t, prov, o.ID, node)
	otherNode := createHostToken(t, prov, o.ID, 1-node)
	admin := app.client()
	admin.signUp("stuck-admin@example.com", false)
	if err := app.makeAdmin(context.Background(), admin.userID(), true); err != nil {
		t.Fatal(err)
	}
	failedPath := fmt.Sprintf("/agent/v1/assignments/%d/remove_failed", p.ID)
	failed := map[string]any{"message": "user rent31: 1 processes of uid 1001 still running after 50 rounds of SIGKILL"}

	app.tick(p.Start)
	app.beat(token, heartbeatBody(1, 8))
	if res := app.agentPost(token, failedPath, failed); res.status != http.StatusConflict {
		t.Errorf("remove_failed before installation: %d %s", res.status, res.body)
	}
	installed := map[string]any{"host": "203.0.113.7", "port": 22, "user": "rent31", "installed_at": p.Start.Format(time.RFC3339)}
	if res := app.agentPost(token, fmt.Sprintf("/agent/v1/assignments/%d/installed", p.ID), installed); res.status != http.StatusOK {
		t.Fatalf("installed: %d %s", res.status, res.body)
	}
	if res := app.agentPost(otherNode, failedPath, failed); res.status != http.StatusNotFound {
		t.Errorf("remove_failed by another node's agent: %d", res.status)
	}
	if res := app.agentPost(token, failedPath, map[string]any{"message": " "}); res.status != http.StatusBadRequest {
		t.Errorf("remove_failed without a message: %d", res.status)
	}

	app.tick(p.End.Add(time.Minute))
	for i := 0; i < 2; i++ { // reported again: told once
		if res := app.agentPost(token, failedPath, failed); res.status != http.StatusOK {
			t.Fatalf("remove_failed: %d %s", res.status, res.body)
		}
	}
	want := fmt.Sprintf("Reservation #%d, piece %d: the buyer&#39;s access could not be ended (user rent31: 1 processes of uid 1001 still running after 50 rounds of SIGKILL).", r.ID, p.ID)
	mustContain(t, admin.get("/admin/hosts").body, `data-testid="host-remove-failed-row"`, want)
	notes := prov.get("/notifications").body
	if n := strings.Count(notes, "could not end the buyer"); n != 1 {
		t.Errorf("the provider was told %d times, want once", n)
	}
	if res := app.agentPost(token, fmt.Sprintf("/agent/v1/assignments/%d/removed", p.ID), map[string]any{}); res.status != http.StatusOK {
		t.Fatalf("removed: %d %s", res.status, res.body)
	}
	mustContain(t, admin.get("/admin/hosts").body, `data-testid="remove-failed-none"`)
}
