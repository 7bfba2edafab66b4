package dlock_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
)

// A handle's text has nine fields and decodes to the same Handle; a text
// written before the CLI's holder left the library (a tenth field, empty)
// decodes as it did; one naming a holder, or with fields missing, is
// refused with ErrBadHandle.
func TestHandleText(t *testing.T) {
	h := dlock.Handle{Scheme: "redis", Name: "deploy-prod", Mode: driver.Permit, Limit: 3,
		Owner: "fedcba9876543210fedcba9876543210", Token: 42, TTL: 10 * time.Minute}
	text := h.String()
	if n := strings.Count(text, ".") + 1; n != 9 {
		t.Errorf("String() = %q: %d fields, want 9", text, n)
	}
	withDeadline := dlock.Handle{Scheme: "zk", Name: "jobs/a", Mode: driver.Read,
		Owner: "0123456789abcdef0123456789abcdef", Token: 7, TTL: 5 * time.Second, Deadline: time.UnixMilli(1796400000000)}
	for _, c := range []struct {
		text string
		want dlock.Handle
	}{
		{text, h},
		{withDeadline.String(), withDeadline},
		// Written by Handle.String before (its tenth field, the holder,
		// empty): decoded the same.
		{"dlock1.redis.permit.600000.0.42.3.fedcba9876543210fedcba9876543210.ZGVwbG95LXByb2Q.", h},
	} {
		if got, err := dlock.ParseHandle(c.text); err != nil || got != c.want {
			t.Errorf("ParseHandle(%q) = %+v, %v; want %+v", c.text, got, err, c.want)
		}
	}
	for _, s := range []string{
		// The dlock CLI's handle of a lock in its detached holder.
		"dlock1.zk.read.5000.1796400000000.7.0.0123456789abcdef0123456789abcdef.am9icy9h.L3J1bi91c2VyLzEwMDAvZGxvY2svaG9sZC1hYjEyLnNvY2s",
		"dlock1.redis.permit.600000.0.42.3.fedcba9876543210fedcba9876543210",
		text + "..",
		"dlock2" + strings.TrimPrefix(text, "dlock1"),
	} {
		if _, err := dlock.ParseHandle(s); !errors.Is(err, dlock.ErrBadHandle) {
			t.Errorf("ParseHandle(%q) = %v, want ErrBadHandle", s, err)
		}
	}
}
