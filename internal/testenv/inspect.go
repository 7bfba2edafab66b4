package testenv

import (
	"context"
	"slices"
	"testing"

	"github.com/dlockgo/dlock/driver"
)

// PrefixNames is a prefix and the names, one per entry, that an Inspect
// of it must list, in order.
type PrefixNames struct {
	Prefix string
	Names  []string
}

// CheckInspectNames checks, for each case, that insp.Inspect(ctx,
// c.Prefix) lists exactly c.Names.
func CheckInspectNames(t testing.TB, ctx context.Context, insp driver.Inspector, cases []PrefixNames) {
	t.Helper()
	for _, c := range cases {
		got, err := insp.Inspect(ctx, c.Prefix)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, g := range got {
			names = append(names, g.Name)
		}
		if !slices.Equal(names, c.Names) {
			t.Errorf("Inspect(%q) names = %q, want %q", c.Prefix, names, c.Names)
		}
	}
}
