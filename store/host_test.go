package store

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// twoNodeOffer is a listed offer of the provider with two nodes of 8.
func twoNodeOffer(t *testing.T, db *DB, providerID int64) market.Offer {
	t.Helper()
	ctx := context.Background()
	in := validOffer(providerID)
	in.Nodes, in.NetworkID = 2, "ethernet-100"
	o, err := db.CreateOffer(ctx, in, t0)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.ReviewOffer(ctx, o.ID, market.ReviewApproved, "", t0); err != nil {
		t.Fatal(err)
	}
	o, err = db.FindProviderOffer(ctx, providerID, o.ID)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// h100s are n healthy H100 SXM devices as nvidia-smi names them.
func h100s(n int) []market.HostDevice {
	out := make([]market.HostDevice, n)
	for i := range out {
		out[i] = market.HostDevice{Index: i, UUID: "GPU-" + string(rune('a'+i)), Name: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559, Healthy: true}
	}
	return out
}

// hostToken creates a token for a node and returns it with its raw form.
func hostToken(t *testing.T, db *DB, providerID, offerID int64, node int) (HostToken, string) {
	t.Helper()
	tok, raw, err := db.CreateHostToken(context.Background(), providerID, offerID, node, t0)
	if err != nil {
		t.Fatalf("CreateHostToken: %v", err)
	}
	return tok, raw
}

// heartbeat records a heartbeat and fails the test on an error.
func heartbeat(t *testing.T, db *DB, tokenID, seq int64, devices []market.HostDevice, at time.Time) bool {
	t.Helper()
	hb := market.Heartbeat{Seq: seq, AgentVersion: "1.0.0", Probe: "simulate", Devices: devices}
	if err := market.ValidateHeartbeat(&hb); err != nil {
		t.Fatal(err)
	}
	ok, err := db.RecordHeartbeat(context.Background(), tokenID, hb, at)
	if err != nil {
		t.Fatalf("RecordHeartbeat seq %d: %v", seq, err)
	}
	return ok
}

func TestHostTokens(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	prov := createUser(t, db, "prov@example.com", true)
	other := createUser(t, db, "other@example.com", true)
	o := twoNodeOffer(t, db, prov.ID)

	tok, raw, err := db.CreateHostToken(ctx, prov.ID, o.ID, 1, t0)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(raw, "gph_") || len(raw) != 4+43 || tok.Prefix != raw[:8] || tok.Node != 1 || tok.OfferID != o.ID {
		t.Fatalf("token %+v raw %q", tok, raw)
	}
	// Stored hashed: the raw token is nowhere in the table.
	var n int
	if err := db.reader.QueryRowContext(ctx, `SELECT COUNT(*) FROM host_tokens WHERE token_hash = ? OR prefix = ? OR token_hash LIKE ?`,
		raw, raw, "%"+raw[8:]+"%").Scan(&n); err != nil || n != 0 {
		t.Fatalf("raw token stored: %d %v", n, err)
	}
	found, err := db.FindHostToken(ctx, raw)
	if err != nil || found.ID != tok.ID || found.ProviderID != prov.ID || found.Node != 1 || found.OfferID != o.ID {
		t.Fatalf("FindHostToken = %+v, %v", found, err)
	}
	for _, bad := range []string{"", "gpm_" + raw[4:], raw + "x", "gph_nope"} {
		_, err := db.FindHostToken(ctx, bad)
		wantCode(t, err, market.CodeUnauthorized)
	}

	// One live token per node: a new one revokes the old one at once.
	tok2, raw2 := hostToken(t, db, prov.ID, o.ID, 1)
	_, err = db.FindHostToken(ctx, raw)
	wantMessage(t, err, market.CodeUnauthorized, "revoked")
	if f, err := db.FindHostToken(ctx, raw2); err != nil || f.ID != tok2.ID {
		t.Fatalf("new token: %+v %v", f, err)
	}
	// Node 0 has its own token beside node 1's.
	_, raw0 := hostToken(t, db, prov.ID, o.ID, 0)
	if _, err := db.FindHostToken(ctx, raw0); err != nil {
		t.Fatal(err)
	}

	// Nodes outside the offer, another provider's offer, another
	// provider's token.
	_, _, err = db.CreateHostToken(ctx, prov.ID, o.ID, 2, t0)
	wantCode(t, err, market.CodeInvalid)
	if market.FieldErrors(err)["node"] == "" {
		t.Errorf("node error not on the field: %v", err)
	}
	_, _, err = db.CreateHostToken(ctx, prov.ID, o.ID, -1, t0)
	wantCode(t, err, market.CodeInvalid)
	_, _, err = db.CreateHostToken(ctx, other.ID, o.ID, 0, t0)
	wantCode(t, err, market.CodeNotFound)
	wantCode(t, db.RevokeHostToken(ctx, other.ID, tok2.ID, t0), market.CodeNotFound)
	if _, err := db.FindHostToken(ctx, raw2); err != nil {
		t.Fatal("another provider's revocation took effect")
	}

	// Revoked: refused at once, even mid-use.
	if err := db.RevokeHostToken(ctx, prov.ID, tok2.ID, t0); err != nil {
		t.Fatal(err)
	}
	_, err = db.FindHostToken(ctx, raw2)
	wantCode(t, err, market.CodeUnauthorized)
	_, err = db.RecordHeartbeat(ctx, tok2.ID, market.Heartbeat{Seq: 1}, t0)
	wantCode(t, err, market.CodeUnauthorized)
	if err := db.RevokeHostToken(ctx, prov.ID, tok2.ID, t0.Add(time.Hour)); err != nil {
		t.Fatal("revoking twice:", err)
	}

	// A suspended provider's tokens are refused and none are created.
	suspend(t, db, prov.ID)
	_, err = db.FindHostToken(ctx, raw0)
	wantCode(t, err, market.CodeUnauthorized)
	_, _, err = db.CreateHostToken(ctx, prov.ID, o.ID, 0, t0)
	wantCode(t, err, market.CodeForbidden)
	// Revoked at the suspension: it stays revoked after reinstatement.
	reinstate(t, db, prov.ID)
	_, err = db.FindHostToken(ctx, raw0)
	wantCode(t, err, market.CodeUnauthorized)

	// A withdrawn offer gets no token.
	if err := db.SetOfferState(ctx, prov.ID, o.ID, market.OfferWithdrawn, t0); err != nil {
		t.Fatal(err)
	}
	_, _, err = db.CreateHostToken(ctx, prov.ID, o.ID, 0, t0)
	wantCode(t, err, market.CodeConflict)
}

func TestHeartbeatsSeqStatusAndHistory(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	prov := createUser(t, db, "prov@example.com", true)
	o := twoNodeOffer(t, db, prov.ID)
	tok, _ := hostToken(t, db, prov.ID, o.ID, 1)

	at := t0
	if !heartbeat(t, db, tok.ID, 5, h100s(8), at) {
		t.Fatal("first heartbeat not accepted")
	}
	// A replay and an older heartbeat change nothing.
	sick := h100s(8)
	sick[3].Healthy = false
	if heartbeat(t, db, tok.ID, 5, sick, at.Add(10*time.Second)) || heartbeat(t, db, tok.ID, 4, sick, at.Add(10*time.Second)) {
		t.Fatal("replayed heartbeat accepted")
	}
	hosts, err := db.ListProviderHosts(ctx, prov.ID, at.Add(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if len(hosts) != 1 || len(hosts[0].Nodes) != 1 {
		t.Fatalf("hosts %+v", hosts)
	}
	n := hosts[0].Nodes[0]
	if n.Node != 1 || !n.Reported || n.Token.ID != tok.ID || n.Status.LastSeq != 5 || n.Status.Healthy != 8 ||
		!n.Status.LastHeartbeatAt.Equal(at) || len(n.Status.Devices) != 8 || n.Status.Devices[3].Name != "NVIDIA H100 80GB HBM3" ||
		n.Status.HardwareDiffers != "" || n.Status.AgentVersion != "1.0.0" || !n.Status.Online(at.Add(time.Minute)) ||
		n.Status.Online(at.Add(61*time.Second)) {
		t.Fatalf("node after replay: %+v", n)
	}

	// Same health within the grace period extends a run; a change or a gap
	// starts one.
	for i := int64(6); i <= 8; i++ {
		heartbeat(t, db, tok.ID, i, h100s(8), at.Add(time.Duration(i-5)*10*time.Second))
	}
	heartbeat(t, db, tok.ID, 9, sick, at.Add(40*time.Second))
	heartbeat(t, db, tok.ID, 10, sick, at.Add(50*time.Second))
	heartbeat(t, db, tok.ID, 11, sick, at.Add(10*time.Minute)) // after a gap
	runs, err := db.ListHeartbeatRuns(ctx, o.ID, 1, at, at.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	want := []HeartbeatRun{
		{FirstAt: at, LastAt: at.Add(30 * time.Second), FirstSeq: 5, LastSeq: 8, Heartbeats: 4, Devices: 8, Healthy: 8},
		{FirstAt: at.Add(40 * time.Second), LastAt: at.Add(50 * time.Second), FirstSeq: 9, LastSeq: 10, Heartbeats: 2, Devices: 8, Healthy: 7, Unhealthy: "3 (GPU-d)"},
		{FirstAt: at.Add(10 * time.Minute), LastAt: at.Add(10 * time.Minute), FirstSeq: 11, LastSeq: 11, Heartbeats: 1, Devices: 8, Healthy: 7, Unhealthy: "3 (GPU-d)"},
	}
	if len(runs) != len(want) {
		t.Fatalf("runs %+v", runs)
	}
	for i := range want {
		if runs[i] != want[i] {
			t.Errorf("run %d = %+v, want %+v", i, runs[i], want[i])
		}
	}
	if r, _ := db.ListHeartbeatRuns(ctx, o.ID, 0, at, at.Add(time.Hour)); len(r) != 0 {
		t.Errorf("node 0 has node 1's history: %+v", r)
	}

	// Hardware that differs is kept for the admins until a heartbeat
	// matches; a probe failure with no devices cannot tell.
	heartbeat(t, db, tok.ID, 12, h100s(7), at.Add(11*time.Minute))
	differs, err := db.ListHardwareDiffers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(differs) != 1 || differs[0].OfferID != o.ID || differs[0].Node != 1 || differs[0].ProviderID != prov.ID ||
		differs[0].OfferTitle != o.Title || differs[0].ProviderName != prov.DisplayName ||
		differs[0].Message != "Node 1 reports 7 devices; the listing has 8 per node." || !differs[0].At.Equal(at.Add(11*time.Minute)) {
		t.Fatalf("differs %v", differs)
	}
	hb := market.Heartbeat{Seq: 13, Error: "nvidia-smi: command not found"}
	if ok, err := db.RecordHeartbeat(ctx, tok.ID, hb, at.Add(12*time.Minute)); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if differs, _ := db.ListHardwareDiffers(ctx); len(differs) != 1 {
		t.Fatalf("a probe failure cleared the flag: %v", differs)
	}
	heartbeat(t, db, tok.ID, 14, h100s(8), at.Add(13*time.Minute))
	if differs, _ := db.ListHardwareDiffers(ctx); len(differs) != 0 {
		t.Fatalf("a matching heartbeat kept the flag: %v", differs)
	}
}

func TestHeartbeatHistoryIsBounded(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	prov := createUser(t, db, "prov@example.com", true)
	o := listedOffer(t, db, prov.ID, 2)
	tok, _ := hostToken(t, db, prov.ID, o.ID, 0)
	ok, sick := h100s(2), h100s(2)
	sick[0].Healthy = false
	// Flapping health: one run per heartbeat.
	for i := range maxRunsPerNode + 20 {
		d := ok
		if i%2 == 1 {
			d = sick
		}
		heartbeat(t, db, tok.ID, int64(i+1), d, t0.Add(time.Duration(i)*10*time.Second))
	}
	var runs int
	var first int64
	if err := db.reader.QueryRowContext(ctx, `SELECT COUNT(*), MIN(first_seq) FROM host_heartbeat_runs WHERE offer_id = ?`, o.ID).Scan(&runs, &first); err != nil {
		t.Fatal(err)
	}
	if runs != maxRunsPerNode || first != 21 {
		t.Fatalf("%d runs from seq %d, want the newest %d from 21", runs, first, maxRunsPerNode)
	}
}
