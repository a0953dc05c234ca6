package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpumarket/gpumarket/metrics"
)

// What a replica behind a load balancer needs: which proxies' forwarded
// client addresses to believe, its name in the logs, and where Prometheus
// scrapes it.

// parseTrustedProxies reads -trusted-proxies: a comma-separated list of
// CIDR ranges or single addresses (an address is its own /32 or /128).
func parseTrustedProxies(list string) ([]*net.IPNet, error) {
	var nets []*net.IPNet
	for _, item := range strings.Split(list, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		if strings.Contains(item, "/") {
			_, n, err := net.ParseCIDR(item)
			if err != nil {
				return nil, fmt.Errorf("-trusted-proxies: %q is not a CIDR range such as 10.0.0.0/8 or fd00::/8", item)
			}
			nets = append(nets, n)
			continue
		}
		ip := net.ParseIP(item)
		if ip == nil {
			return nil, fmt.Errorf("-trusted-proxies: %q is not an IP address or a CIDR range", item)
		}
		bits := 128
		if ip4 := ip.To4(); ip4 != nil {
			ip, bits = ip4, 32
		}
		nets = append(nets, &net.IPNet{IP: ip, Mask: net.CIDRMask(bits, bits)})
	}
	return nets, nil
}

// defaultReplica is the replica's name when none is configured: the host
// name, which differs between containers and machines.
func defaultReplica() string {
	if h, err := os.Hostname(); err == nil && h != "" {
		return h
	}
	return "gpumarket"
}

// metricsServer serves reg's metrics on its own listener, apart from the
// public address, so the load balancer never exposes them and they need no
// credentials: Prometheus scrapes every replica's metrics address directly.
type metricsServer struct {
	ln  net.Listener
	srv *http.Server
}

// listenMetrics listens on addr for metrics scrapes.
func listenMetrics(addr string, reg *prometheus.Registry) (*metricsServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen -metrics-addr %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metrics.Handler(reg))
	// The runtime's profiles, for the operator on the same port
	// (docs/testing.md: a CPU profile of the server under make loadtest).
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	return &metricsServer{ln: ln, srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, WriteTimeout: 30 * time.Second}}, nil
}

// serve serves scrapes until shutdown.
func (m *metricsServer) serve() error { return m.srv.Serve(m.ln) }

// shutdown stops serving scrapes, waiting for those under way.
func (m *metricsServer) shutdown(ctx context.Context) error { return m.srv.Shutdown(ctx) }
