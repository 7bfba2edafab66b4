package testenv

import (
	"bytes"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
)

// Goroutines returns the stacks of the running goroutines that are in the
// code of one of pkgs (import paths, say "github.com/dlockgo/dlock/pglock"
// and the internal packages that run its goroutines) outside their tests,
// by goroutine id. Ids are never reused, so the ones
// absent from an earlier call's result are goroutines started since: see
// NewGoroutines.
func Goroutines(pkgs ...string) map[int64]string {
	var buf bytes.Buffer
	_ = pprof.Lookup("goroutine").WriteTo(&buf, 2) // every stack, as runtime.Stack(buf, true)
	out := map[int64]string{}
	for _, g := range bytes.Split(buf.Bytes(), []byte("\n\n")) {
		s := string(g)
		if strings.Contains(s, "_test.go") || !slices.ContainsFunc(pkgs, func(pkg string) bool {
			// A frame of the package's own code, not only of a
			// dependency named alike.
			return strings.Contains(s, pkg+".") && strings.Contains(s, "/"+pkg[strings.LastIndexByte(pkg, '/')+1:]+"/")
		}) {
			continue
		}
		head, _, _ := strings.Cut(s, " [")
		id, err := strconv.ParseInt(strings.TrimPrefix(head, "goroutine "), 10, 64)
		if err == nil {
			out[id] = s
		}
	}
	return out
}

// NewGoroutines returns the stacks, joined, of the goroutines in pkgs' code
// that were not in before (an earlier Goroutines(pkgs...)); "" when none.
func NewGoroutines(before map[int64]string, pkgs ...string) string {
	var b strings.Builder
	for id, s := range Goroutines(pkgs...) {
		if _, ok := before[id]; !ok {
			b.WriteString(s)
			b.WriteString("\n\n")
		}
	}
	return b.String()
}
