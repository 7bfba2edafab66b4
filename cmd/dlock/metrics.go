package main

import (
	"log/slog"

	"github.com/dlockgo/dlock/internal/promexport"
)

// serveMetrics listens on addr and serves dlock's metrics for Prometheus
// on /metrics until Close. It logs the address it listens on (useful with
// port 0) at Info.
func serveMetrics(addr string, log *slog.Logger) (*promexport.Server, error) {
	m, err := promexport.Serve(addr, func(err error) { log.Error("dlock: metrics server stopped", "error", err) })
	if err != nil {
		return nil, err
	}
	log.Info("dlock: serving metrics", "addr", m.Addr, "url", "http://"+m.Addr+"/metrics")
	return m, nil
}
