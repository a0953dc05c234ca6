package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gpumarket/gpumarket/billing"
	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
	"github.com/gpumarket/gpumarket/web"
	"github.com/gpumarket/gpumarket/workflow"
)

// The fleet server: one replica of the marketplace with a fleet of
// one-node offers, each with a host token, a buyer with an SSH key, and a
// control surface for the load tool (pay for a rental on a node, read the
// agents' database counts). `loadgen -fleet` runs it in a child process
// (`loadgen -fleet-server`), so that the server's connections and the
// simulated agents' each fit in a process's open-file limit;
// BenchmarkPayToKeys runs it in its own process.

// fleetNode is one node of the fleet: its offer and host token.
type fleetNode struct {
	OfferID int64  `json:"offer_id"`
	Token   string `json:"token"`
}

// fleetPaid is a rental paid on a node: its piece, and when (Unix
// nanoseconds, wall clock) the payment began to be recorded.
type fleetPaid struct {
	PieceID       int64 `json:"piece_id"`
	ReservationID int64 `json:"reservation_id"`
	PaidAt        int64 `json:"paid_at"`
}

// fleetServer is the marketplace under the fleet.
type fleetServer struct {
	URL      string
	APIToken string
	Nodes    []fleetNode

	db     *store.DB
	wf     *workflow.Service
	local  *billing.Local
	buyers []int64
	http   *http.Server
	done   chan struct{}
	stop   context.CancelFunc
	mu     sync.Mutex
	seq    int
}

// fleetBuyers is how many buyers pay for the fleet's rentals, in turn.
const fleetBuyers = 8

// fleetDevices is what a fleet node's agent reports: 8 healthy H100s, as
// the offers list them.
func fleetDevices() []market.HostDevice {
	ds := make([]market.HostDevice, 8)
	for i := range ds {
		ds[i] = market.HostDevice{Index: i, UUID: fmt.Sprintf("GPU-%08d", i), Name: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559,
			TemperatureC: 40, UtilizationPct: 0, PowerW: 70, Healthy: true}
	}
	return ds
}

// startFleetServer seeds a new database at path with offers market offers
// (the quote yardstick's market) and nodes fleet nodes, and serves it on
// addr ("127.0.0.1:0" for any port) until close.
func startFleetServer(ctx context.Context, path string, offers, nodes int, addr string, writeEvery bool, stdout io.Writer) (*fleetServer, error) {
	tokenFile := path + ".token"
	if err := seedMarket(ctx, path, offers, "../shared/data/alibaba-gpu-v2023/csv", tokenFile, io.Discard); err != nil {
		return nil, err
	}
	raw, err := os.ReadFile(tokenFile)
	if err != nil {
		return nil, err
	}
	db, err := store.Open(ctx, path)
	if err != nil {
		return nil, err
	}
	fs := &fleetServer{APIToken: strings.TrimSpace(string(raw)), db: db, done: make(chan struct{})}
	if err := fs.seedFleet(ctx, nodes); err != nil {
		db.Close()
		return nil, err
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	fs.local = billing.NewLocal(billing.LocalConfig{Store: db})
	fs.wf, err = workflow.New(ctx, workflow.Config{Billing: fs.local, PlatformFeeBP: 1000, WriteEveryHeartbeat: writeEvery}, db, log)
	if err != nil {
		db.Close()
		return nil, err
	}
	_, e, err := web.New(ctx, web.Config{BaseURL: "http://" + addr, SessionKey: []byte(strings.Repeat("f", 32)),
		APIRatePerSecond: 1_000_000, Workflow: fs.wf}, db, log)
	if err != nil {
		db.Close()
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		db.Close()
		return nil, err
	}
	fs.URL = "http://" + ln.Addr().String()
	fs.http = &http.Server{Handler: e, ReadHeaderTimeout: 10 * time.Second, WriteTimeout: 60 * time.Second, IdleTimeout: 120 * time.Second}
	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	fs.stop = stop
	go func() {
		defer close(fs.done)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); fs.wf.Run(runCtx, 15*time.Second) }()
		_ = fs.http.Serve(ln)
		stop()
		wg.Wait()
	}()
	fmt.Fprintf(stdout, "fleet server: %d offers, %d nodes, serving %s\n", offers, nodes, fs.URL)
	return fs, nil
}

// close stops serving, the background loop and the database.
func (fs *fleetServer) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = fs.http.Shutdown(ctx)
	fs.http.Close()
	fs.stop()
	<-fs.done
	fs.db.Close()
}

// seedFleet adds the fleet: one provider's nodes one-node offers of 8 H100
// in Oregon, approved, each with a host token; and a buyer with an SSH key.
func (fs *fleetServer) seedFleet(ctx context.Context, nodes int) error {
	now := time.Now().UTC()
	prov, err := fs.db.CreateUser(ctx, market.User{Email: "fleet@load.gpumarket.test", DisplayName: "Fleet provider", IsProvider: true},
		[]byte("not a password hash"), now)
	if err != nil {
		return err
	}
	// Several buyers, since each may hold only a few unpaid reservations
	// and a payment beside a busy writer can take more than a second.
	for i := range fleetBuyers {
		buyer, err := fs.db.CreateUser(ctx, market.User{Email: fmt.Sprintf("fleet-buyer-%d@load.gpumarket.test", i), DisplayName: "Fleet buyer", IsBuyer: true},
			[]byte("not a password hash"), now)
		if err != nil {
			return err
		}
		fs.buyers = append(fs.buyers, buyer.ID)
		if _, err := fs.db.AddSSHKey(ctx, buyer.ID, market.SSHKey{Type: "ssh-ed25519", Bits: 256, Fingerprint: "SHA256:fleet-load-key", Comment: "fleet@load",
			Line: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIG01hsMAM7RpPI0A/8qBgEd+reLeY9Y/YXcvCKwu2ocf fleet@load"}, now); err != nil {
			return fmt.Errorf("fleet buyer's key: %w", err)
		}
	}
	var batch []market.Offer
	for i := range nodes {
		o := market.Offer{
			ProviderID: prov.ID, Title: fmt.Sprintf("Fleet node %d", i), AcceleratorID: "nvidia-h100-80gb-sxm", MemoryGB: 80,
			DevicesPerNode: 8, Nodes: 1, Interconnect: market.InterconnectNVLink, NetworkID: "none", CPUCores: 96, RAMGB: 1024,
			StorageGB: 7680, DriverVersion: "550.54", CUDAVersion: "12.4", OSImage: "Ubuntu 22.04", ContainerRuntime: "Docker 26",
			RegionID: "us-west-or", AvailableFrom: now.Add(-time.Hour), AvailableUntil: now.Add(90 * 24 * time.Hour), MinRentalHours: 1,
			MaxRentalHours: 720, ProvisioningMins: 0, PriceCentsPerDeviceHour: 249, BillingBasis: market.BillingWallClock, UptimeBP: 9950,
			CreditSchedule: []market.CreditTier{{BelowBP: 9950, CreditBP: 1000}}, CreditCapBP: 5000, FreeCancelHours: 24, CancelFeeBP: 1000,
		}
		if err := market.ValidateOffer(&o, now); err != nil {
			return fmt.Errorf("fleet offer: %w", err)
		}
		o.Review, o.State = market.ReviewApproved, market.OfferActive
		batch = append(batch, o)
	}
	ids, err := fs.db.ImportOffers(ctx, batch, now)
	if err != nil {
		return err
	}
	for _, id := range ids {
		_, raw, err := fs.db.CreateHostToken(ctx, prov.ID, id, 0, now)
		if err != nil {
			return err
		}
		fs.Nodes = append(fs.Nodes, fleetNode{OfferID: id, Token: raw})
	}
	return nil
}

// pay books node's whole offer for an hour from now and pays it through
// the local processor's checkout, as the simulated payment page does.
func (fs *fleetServer) pay(ctx context.Context, node int) (fleetPaid, error) {
	if node < 0 || node >= len(fs.Nodes) {
		return fleetPaid{}, fmt.Errorf("no node %d", node)
	}
	fs.mu.Lock()
	fs.seq++
	key := fs.seq
	fs.mu.Unlock()
	now := time.Now().UTC().Truncate(time.Second)
	p := market.ReservationPiece{OfferID: fs.Nodes[node].OfferID, Devices: 8, Start: now, End: now.Add(time.Hour), PriceCents: 249, AmountCents: 8 * 249}
	buyer := fs.buyers[key%len(fs.buyers)]
	r, err := fs.wf.Book(ctx, buyer, []market.ReservationPiece{p}, `{"version":1}`, 30*time.Minute)
	if err != nil {
		return fleetPaid{}, fmt.Errorf("book: %w", err)
	}
	co, err := fs.local.CreateCheckout(ctx, billing.CheckoutInput{ReservationID: r.ID, Amount: r.AmountCents, Description: "fleet",
		SuccessURL: "http://localhost/ok", CancelURL: "http://localhost/cancel", IdempotencyKey: fmt.Sprintf("fleet_%d_%d", r.ID, key)})
	if err != nil {
		return fleetPaid{}, err
	}
	if err := fs.db.RecordCheckout(ctx, buyer, r.ID, co.ID, r.AmountCents, now); err != nil {
		return fleetPaid{}, err
	}
	evs, err := fs.local.CompleteCheckout(co.ID, true, now)
	if err != nil {
		return fleetPaid{}, err
	}
	paid := fleetPaid{PieceID: r.Pieces[0].ID, ReservationID: r.ID, PaidAt: time.Now().UnixNano()}
	for _, ev := range evs {
		if err := fs.wf.ApplyEvent(ctx, slog.New(slog.NewTextHandler(io.Discard, nil)), ev); err != nil {
			return fleetPaid{}, err
		}
	}
	return paid, nil
}

// control serves the load tool's control surface: GET /nodes, POST
// /pay?node=N, GET /counts.
func (fs *fleetServer) control() http.Handler {
	mux := http.NewServeMux()
	reply := func(w http.ResponseWriter, v any, err error) {
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(v)
	}
	mux.HandleFunc("GET /nodes", func(w http.ResponseWriter, r *http.Request) {
		reply(w, map[string]any{"url": fs.URL, "api_token": fs.APIToken, "nodes": fs.Nodes}, nil)
	})
	mux.HandleFunc("POST /pay", func(w http.ResponseWriter, r *http.Request) {
		n, err := strconv.Atoi(r.URL.Query().Get("node"))
		if err != nil {
			http.Error(w, "node", http.StatusBadRequest)
			return
		}
		p, err := fs.pay(r.Context(), n)
		reply(w, p, err)
	})
	mux.HandleFunc("GET /counts", func(w http.ResponseWriter, r *http.Request) {
		reply(w, fleetCounts{AgentCounts: fs.wf.AgentCounts(), CPU: processCPU()}, nil)
	})
	// Profiles of the server under the fleet (go tool pprof URL/debug/pprof/profile).
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	return mux
}

// runFleetServer is `loadgen -fleet-server`: the fleet server, with its
// control surface on control's address printed as "control <url>", until
// ctx ends.
func runFleetServer(ctx context.Context, path string, offers, nodes int, writeEvery bool, stdout io.Writer) error {
	fs, err := startFleetServer(ctx, path, offers, nodes, "127.0.0.1:0", writeEvery, stdout)
	if err != nil {
		return err
	}
	defer fs.close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	cs := &http.Server{Handler: fs.control(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = cs.Serve(ln) }()
	defer cs.Close()
	fmt.Fprintf(stdout, "control http://%s\n", ln.Addr())
	<-ctx.Done()
	return nil
}

// fleetCounts is the server's GET /counts: what the agents cost the
// database, and the CPU time the server's process used so far.
type fleetCounts struct {
	workflow.AgentCounts
	CPU time.Duration `json:"cpu_ns"`
}

// processCPU is the CPU time (user and system) this process used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// errNoControl is a fleet server child that never said where its control
// surface is.
var errNoControl = errors.New("the fleet server did not start")
