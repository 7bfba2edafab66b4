package main

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// metricsServer serves dlock's OpenTelemetry metrics for Prometheus on
// /metrics, through the OpenTelemetry Prometheus exporter.
type metricsServer struct {
	provider *sdkmetric.MeterProvider
	srv      *http.Server
	done     chan struct{}
}

// serveMetrics listens on addr and serves /metrics until Close. It logs
// the address it listens on (useful with port 0) at Info.
func serveMetrics(addr string, log *slog.Logger) (*metricsServer, error) {
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
	m := &metricsServer{
		provider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp)),
		srv:      &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second},
		done:     make(chan struct{}),
	}
	go func() {
		defer close(m.done)
		if err := m.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("dlock: metrics server stopped", "error", err)
		}
	}()
	log.Info("dlock: serving metrics", "addr", ln.Addr().String(), "url", "http://"+ln.Addr().String()+"/metrics")
	return m, nil
}

// Close stops the server, waiting a little for scrapes in flight.
func (m *metricsServer) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = m.srv.Shutdown(ctx)
	<-m.done
	_ = m.provider.Shutdown(ctx)
}
