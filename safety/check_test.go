package safety

import "testing"

func TestCheck(t *testing.T) {
	seq := []Acquisition{ // three clients taking turns, tokens increasing
		{Client: 1, Token: 10, Enter: 100, Exit: 200},
		{Client: 2, Token: 11, Enter: 200, Exit: 300},
		{Client: 3, Token: 12, Enter: 310, Exit: 400},
		{Client: 1, Token: 13, Enter: 400, Exit: 500},
	}
	inOrder := []Write{{1, 10, true, 0}, {2, 11, true, 0}, {2, 11, true, 0}, {3, 12, true, 0}, {1, 13, true, 0}}
	tests := []struct {
		name   string
		acqs   []Acquisition
		writes []Write
		want   Result
	}{
		{"clean", seq, inOrder, Result{Acquisitions: 4, Writes: 5}},
		{"empty", nil, nil, Result{}},
		{
			// Client 1 paused past its TTL: 2 and 3 held the lock meanwhile.
			"paused holder overlaps two sections",
			[]Acquisition{
				{Client: 1, Token: 10, Enter: 100, Exit: 900, Lost: true},
				{Client: 2, Token: 11, Enter: 300, Exit: 400},
				{Client: 3, Token: 12, Enter: 500, Exit: 600},
				{Client: 2, Token: 13, Enter: 950, Exit: 990},
			},
			nil,
			Result{Acquisitions: 4, Overlaps: 2, StillHeld: 2, Excess: 2},
		},
		{
			// Client 1 paused from 150 to 850: its last look that found
			// the lease held was at 140, before the others' grants.
			"paused holder seen held only before its pause",
			[]Acquisition{
				{Client: 1, Token: 10, Enter: 100, Exit: 900, Lost: true, LostAt: 851, HeldAt: 140},
				{Client: 2, Token: 11, Enter: 300, Exit: 400},
			},
			nil,
			Result{Acquisitions: 2, Overlaps: 1},
		},
		{
			// Client 1 cut off: told at 250, it works on until 900. The
			// grant at 200 came while its lease still said held; the one
			// at 300, after it was told.
			"told before one grant, not the other",
			[]Acquisition{
				{Client: 1, Token: 10, Enter: 100, Exit: 900, Lost: true, LostAt: 250},
				{Client: 2, Token: 11, Enter: 200, Exit: 240},
				{Client: 3, Token: 12, Enter: 300, Exit: 400},
			},
			nil,
			Result{Acquisitions: 3, Overlaps: 2, StillHeld: 1, Excess: 1},
		},
		{
			// A double grant neither holder heard of.
			"unnoticed overlap",
			[]Acquisition{
				{Client: 1, Token: 10, Enter: 100, Exit: 300},
				{Client: 2, Token: 10, Enter: 200, Exit: 400},
				{Client: 3, Token: 11, Enter: 250, Exit: 500, Lost: true},
			},
			nil,
			Result{Acquisitions: 3, Overlaps: 3, Unnoticed: 1, StillHeld: 3, Excess: 2, Regressions: 1},
		},
		{
			// The same client's consecutive sections never count.
			"same client touching",
			[]Acquisition{{Client: 1, Token: 1, Enter: 0, Exit: 10}, {Client: 1, Token: 2, Enter: 5, Exit: 20}},
			nil,
			Result{Acquisitions: 2},
		},
		{
			"stale writes accepted without a guard",
			nil,
			[]Write{{1, 10, true, 0}, {2, 11, true, 0}, {1, 10, true, 0}, {3, 12, true, 0}, {2, 11, true, 0}, {1, 9, false, 0}},
			Result{Writes: 6, Rejected: 1, StaleAccepted: 2},
		},
		{
			"one token, two clients",
			nil,
			[]Write{{1, 10, true, 0}, {1, 10, true, 0}, {2, 10, true, 0}, {2, 11, true, 0}, {2, 11, true, 0}},
			Result{Writes: 5, SharedAccepted: 1},
		},
		{
			"a guard's refusals are not stale writes",
			nil,
			[]Write{{2, 11, true, 0}, {1, 10, false, 0}, {2, 11, true, 0}},
			Result{Writes: 3, Rejected: 1},
		},
		{
			// A failover: the promoted replica hands out 11 again, then 12.
			"token regressions in grant order",
			[]Acquisition{
				{Client: 1, Token: 11, Enter: 100, Exit: 150},
				{Client: 2, Token: 12, Enter: 200, Exit: 250},
				{Client: 3, Token: 11, Enter: 300, Exit: 350},
				{Client: 1, Token: 12, Enter: 400, Exit: 450},
				{Client: 2, Token: 13, Enter: 500, Exit: 550},
			},
			nil,
			Result{Acquisitions: 5, Regressions: 2},
		},
		{
			// Input order does not matter for acquisitions.
			"unsorted input",
			[]Acquisition{seq[3], seq[1], seq[0], seq[2]},
			nil,
			Result{Acquisitions: 4},
		},
	}
	// Other kinds: overlaps are allowed within the kind's bound, and
	// Excess counts the grants beyond it.
	rw := func(c int, mode string, enter, held int64) Acquisition {
		return Acquisition{Client: c, Token: uint64(enter), Enter: enter, Exit: held + 10, HeldAt: held, Mode: mode, Limit: 2}
	}
	kinds := []struct {
		name string
		acqs []Acquisition
		want int
	}{
		{"readers together", []Acquisition{rw(1, "read", 10, 100), rw(2, "read", 20, 100), rw(3, "read", 30, 100)}, 0},
		{"a writer after the readers", []Acquisition{rw(1, "read", 10, 100), rw(2, "read", 20, 100), rw(3, "write", 101, 200)}, 0},
		{"a writer beside a reader", []Acquisition{rw(1, "read", 10, 100), rw(3, "write", 50, 200)}, 1},
		{"a reader beside a writer", []Acquisition{rw(3, "write", 10, 100), rw(1, "read", 50, 200), rw(2, "read", 60, 200)}, 2},
		{"two permits of two", []Acquisition{rw(1, "permit", 10, 100), rw(2, "permit", 20, 100), rw(3, "permit", 101, 200)}, 0},
		{"a third permit of two", []Acquisition{rw(1, "permit", 10, 100), rw(2, "permit", 20, 100), rw(3, "permit", 30, 200)}, 1},
		{"a second leader", []Acquisition{rw(1, "leader", 10, 100), rw(2, "leader", 50, 200)}, 1},
		{"leaders in turn", []Acquisition{rw(1, "leader", 10, 100), rw(2, "leader", 101, 200)}, 0},
	}
	for _, tc := range kinds {
		t.Run(tc.name, func(t *testing.T) {
			if got := Check(tc.acqs, nil).Excess; got != tc.want {
				t.Errorf("Excess = %d, want %d", got, tc.want)
			}
		})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Check(tc.acqs, tc.writes); got != tc.want {
				t.Errorf("Check = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestResultAdd(t *testing.T) {
	a := Result{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14}
	if got, want := a.Add(a), (Result{2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28}); got != want {
		t.Errorf("Add = %+v, want %+v", got, want)
	}
}

func TestCheckObserved(t *testing.T) {
	acqs := []Acquisition{{Client: 1, Token: 10, Call: 5, Mode: "leader"}, {Client: 2, Token: 11, Call: 5, Mode: "leader"}}
	calls := []Call{{Client: 3, At: 20}} // a campaign of client 3 that failed
	tests := []struct {
		name           string
		obs            []Observation
		bad, abandoned int
	}{
		{"in order", []Observation{{1, "1", 10, 6}, {1, "", 0, 7}, {1, "2", 11, 8}, {2, "2", 11, 8}}, 0, 0},
		{"a leader no client campaigned as", []Observation{{1, "4", 12, 30}}, 1, 0},
		{"a failed campaign's key", []Observation{{1, "3", 12, 30}}, 0, 1},
		{"a granted client's other key", []Observation{{1, "2", 12, 30}}, 0, 1},
		{"before its campaign started", []Observation{{1, "3", 12, 10}}, 1, 0},
		{"the wrong value for a token", []Observation{{1, "2", 10, 6}}, 1, 0},
		{"a token going back", []Observation{{1, "2", 11, 6}, {1, "1", 10, 7}}, 1, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			bad, abandoned := CheckObserved(acqs, calls, tc.obs)
			if bad != tc.bad || abandoned != tc.abandoned {
				t.Errorf("CheckObserved = %d bad, %d abandoned; want %d, %d", bad, abandoned, tc.bad, tc.abandoned)
			}
		})
	}
}
