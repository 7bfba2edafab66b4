package filelock

import "time"

// tokenLen is the size of a lock file's content: the last token granted
// as 20 zero-padded decimal digits (every write the same size at offset
// 0: no stale bytes follow), then a newline.
const tokenLen = 21

// nextToken returns the next token of a lock whose file holds b: the
// later of the stored token + 1 and the Unix clock in microseconds. The
// stored token makes tokens strictly increase while the file exists; the
// clock, across the loss of its content (deleted, or a write lost in a
// crash) unless it went back: an acquisition takes far longer than a
// microsecond (a few system calls), so no token runs ahead of the clock,
// and a token drawn from it later exceeds all earlier ones.
func nextToken(b []byte, now time.Time) uint64 {
	next := uint64(1)
	if last, ok := parseToken(b); ok && last < 1<<64-1 {
		next = last + 1
	}
	if us := now.UnixMicro(); us > 0 && uint64(us) > next {
		next = uint64(us)
	}
	return next
}

// parseToken reads the decimal token in b up to a newline; ok is false for
// anything else (an empty new file, garbage).
func parseToken(b []byte) (uint64, bool) {
	var v uint64
	n := 0
	for ; n < len(b) && b[n] != '\n'; n++ {
		c := b[n]
		if c < '0' || c > '9' || v > (1<<64-1-uint64(c-'0'))/10 {
			return 0, false
		}
		v = v*10 + uint64(c-'0')
	}
	return v, n > 0
}

// formatToken writes t into b as tokenLen bytes.
func formatToken(b *[tokenLen]byte, t uint64) {
	b[tokenLen-1] = '\n'
	for i := tokenLen - 2; i >= 0; i-- {
		b[i] = byte('0' + t%10)
		t /= 10
	}
}
