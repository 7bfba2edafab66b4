package testenv

import (
	"bytes"
	"runtime"
	"strconv"
	"strings"
)

// Goroutines returns the stacks of the running goroutines that are in
// package pkg's code (an import path, say "github.com/dlockgo/dlock/pglock")
// outside its tests, by goroutine id. Ids are never reused, so the ones
// absent from an earlier call's result are goroutines started since: see
// NewGoroutines.
func Goroutines(pkg string) map[int64]string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	out := map[int64]string{}
	dir := "/" + pkg[strings.LastIndexByte(pkg, '/')+1:] + "/"
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		s := string(g)
		if !strings.Contains(s, pkg+".") || strings.Contains(s, "_test.go") {
			continue
		}
		// A frame of the package's own code, not only of a dependency
		// named alike.
		if !strings.Contains(s, dir) {
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

// NewGoroutines returns the stacks, joined, of the goroutines in pkg's code
// that were not in before (an earlier Goroutines(pkg)); "" when none.
func NewGoroutines(before map[int64]string, pkg string) string {
	var b strings.Builder
	for id, s := range Goroutines(pkg) {
		if _, ok := before[id]; !ok {
			b.WriteString(s)
			b.WriteString("\n\n")
		}
	}
	return b.String()
}
