package safety

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

func TestCheckLinear(t *testing.T) {
	// a is a section of client c with token tok: acquire [call, enter],
	// its end at exit, release returning at rel; told of a loss at lostAt
	// (0: not told).
	a := func(c int, tok uint64, call, enter, exit, rel, lostAt int64) Acquisition {
		return Acquisition{Client: c, Token: tok, Call: call, Enter: enter, Exit: exit, Released: rel, LostAt: lostAt, Lost: lostAt != 0}
	}
	// w is the resource's decision at at on client c's write with tok.
	w := func(c int, tok uint64, ok bool, at int64) Write {
		return Write{Client: c, Token: tok, Accepted: ok, At: at}
	}
	// Client 1 told at 50 that its lock was lost; 2 granted at 60.
	noticed := []Acquisition{a(1, 10, 1, 5, 71, 80, 50), a(2, 11, 40, 60, 66, 90, 0)}
	tests := []struct {
		name   string
		acqs   []Acquisition
		writes []Write
		want   porcupine.CheckResult
	}{
		{"empty", nil, nil, porcupine.Ok},
		{"turns", []Acquisition{
			a(1, 10, 1, 5, 20, 25, 0),
			a(2, 11, 3, 30, 40, 45, 0),
			a(1, 12, 26, 50, 60, 65, 0),
		}, []Write{w(1, 10, true, 10), w(2, 11, true, 35), w(1, 12, true, 55)}, porcupine.Ok},
		{
			// Grants returned out of token order (6 at 10 after 5 at 8
			// is in order; 5 returning at 8 after 6 was called at 1 is
			// not a problem): the calls were concurrent.
			"concurrent grants in either order",
			[]Acquisition{
				a(2, 5, 1, 8, 9, 20, 0),
				a(1, 6, 1, 10, 30, 35, 0),
			},
			nil,
			porcupine.Ok,
		},
		{
			// 1's late write (at 70) refused after 2's accepted one (65).
			"noticed overlap, stale write refused",
			noticed,
			[]Write{w(2, 11, true, 65), w(1, 10, false, 70)},
			porcupine.Ok,
		},
		{
			// Client 2 granted at 60 while client 1's lease said held
			// until 100.
			"two told at once",
			[]Acquisition{
				a(1, 10, 1, 5, 100, 110, 0),
				a(2, 11, 40, 60, 70, 120, 0),
			},
			nil,
			porcupine.Illegal,
		},
		{
			"token regression in real time",
			[]Acquisition{
				a(1, 10, 1, 5, 20, 25, 0),
				a(2, 9, 30, 35, 40, 45, 0),
			},
			nil,
			porcupine.Illegal,
		},
		{
			// The positive control's failure: a write with a lower token
			// accepted after a higher one.
			"stale write accepted",
			noticed,
			[]Write{w(2, 11, true, 65), w(1, 10, true, 70)},
			porcupine.Illegal,
		},
		{
			"current write refused",
			nil,
			[]Write{w(1, 10, true, 10), w(2, 11, false, 35)},
			porcupine.Illegal,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := CheckLinear(tc.acqs, tc.writes, 10*time.Second); got != tc.want {
				t.Errorf("CheckLinear = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestCheckLinearPermits(t *testing.T) {
	p := func(c int, call, enter, held, rel int64) Acquisition {
		return Acquisition{Client: c, Token: uint64(enter), Call: call, Enter: enter, Exit: held, HeldAt: held, Released: rel, Mode: "permit", Limit: 2}
	}
	tests := []struct {
		name string
		acqs []Acquisition
		want porcupine.CheckResult
	}{
		{"two of two", []Acquisition{p(1, 1, 5, 50, 55), p(2, 2, 6, 50, 55), p(3, 3, 60, 70, 75)}, porcupine.Ok},
		{"a third while two are seen held", []Acquisition{p(1, 1, 5, 50, 55), p(2, 2, 6, 50, 55), p(3, 3, 20, 70, 75)}, porcupine.Illegal},
		{"a third whose grant may follow a free", []Acquisition{p(1, 1, 5, 10, 55), p(2, 2, 6, 50, 55), p(3, 3, 20, 70, 75)}, porcupine.Ok},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := CheckLinearPermits(tc.acqs, 2, 10*time.Second); got != tc.want {
				t.Errorf("CheckLinearPermits = %v, want %v", got, tc.want)
			}
		})
	}
}
