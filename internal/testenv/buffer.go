package testenv

import (
	"log/slog"
	"strings"
	"sync"
)

// Buffer collects what is written to it, safe for a writer goroutine (a
// background check's logger, exec.Cmd's copy of a child's output) and a
// reader at once.
type Buffer struct {
	mu sync.Mutex
	b  strings.Builder
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Lines returns the lines of a slog text handler's output logged at level
// ("WARN", "DEBUG").
func (b *Buffer) Lines(level string) []string {
	var out []string
	for s := range strings.Lines(b.String()) {
		if strings.Contains(s, "level="+level+" ") {
			out = append(out, s)
		}
	}
	return out
}

// NewLogger returns a Buffer and a logger writing text lines to it at
// every level.
func NewLogger() (*Buffer, *slog.Logger) {
	b := &Buffer{}
	return b, slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
