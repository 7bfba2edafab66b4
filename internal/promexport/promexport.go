// Package promexport serves dlock's OpenTelemetry metrics for Prometheus on
// /metrics, through the OpenTelemetry Prometheus exporter: the CLI's
// --metrics-addr and the program that draws the dashboard's picture
// (internal/tools/dashpic) export the same series the same way.
package promexport

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// A Server serves the metrics its Provider records until Close.
type Server struct {
	// Provider is the meter provider to give dlock (dlock.WithMeterProvider).
	Provider *sdkmetric.MeterProvider
	// Addr is the address the server listens on (the port chosen when
	// the address given had port 0).
	Addr string
	srv  *http.Server
	done chan struct{}
}

// Serve listens on addr and serves /metrics until Close. If the server
// stops on its own, onStop is called with the reason.
func Serve(addr string, onStop func(error)) (*Server, error) {
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	s := &Server{
		Provider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp)),
		Addr:     ln.Addr().String(),
		srv:      &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second},
		done:     make(chan struct{}),
	}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			onStop(err)
		}
	}()
	return s, nil
}

// Close stops the server, waiting a little for scrapes in flight, and
// shuts the meter provider down.
func (s *Server) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = s.srv.Shutdown(ctx)
	<-s.done
	_ = s.Provider.Shutdown(ctx)
}
