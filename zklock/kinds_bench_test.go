package zklock_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/locktest"
)

// Benchmarks of the lock kinds besides the mutex, through a dlock.Locker
// on the standalone server, one goroutine, uncontended: ns/op is one
// acquire and its release (one campaign and its resignation).
//
//	Read        AcquireRead of a lock no one else uses
//	ReadShared  AcquireRead while another reader holds the lock (a
//	            listing more: the node is not alone)
//	Write       AcquireWrite
//	Permit      AcquirePermit of a semaphore of 4 of which another client
//	            holds a permit (still one round trip: the name's znode
//	            has no more than 4 children)
//	Campaign    Campaign and Release
//
// BenchmarkLeader, below, is one Leader read instead.

// benchKind measures kind's acquire and release of a name that, when
// shared, another client holds in the same kind.
func benchKind(b *testing.B, kind string, shared bool) {
	ctx := context.Background()
	servers, prefix := []string{testenv.ZKAddr(b)}, testPrefix()
	l, _ := newLocker(b, servers, prefix, 10*time.Second)
	if shared {
		other, _ := newLocker(b, servers, prefix, 10*time.Second)
		if _, err := locktest.Kind(other, kind, "bench")(ctx); err != nil {
			b.Fatal(err)
		}
	}
	locktest.BenchCycle(b, ctx, locktest.Kind(l, kind, "bench")) // connects outside the timer
}

func BenchmarkRead(b *testing.B)       { benchKind(b, "read", false) }
func BenchmarkReadShared(b *testing.B) { benchKind(b, "read", true) }
func BenchmarkWrite(b *testing.B)      { benchKind(b, "write", false) }
func BenchmarkPermit(b *testing.B)     { benchKind(b, "permit", true) }
func BenchmarkCampaign(b *testing.B)   { benchKind(b, "campaign", false) }

// BenchmarkMutex is the baseline: Acquire, in the same harness.
func BenchmarkMutex(b *testing.B) { benchKind(b, "mutex", false) }

// BenchmarkLeader is one Leader call on an election another client leads:
// the server is brought up to date with the leader first (a no-op
// transaction, see Driver.Inspect), then the election's znode is read.
func BenchmarkLeader(b *testing.B) {
	ctx := context.Background()
	servers, prefix := []string{testenv.ZKAddr(b)}, testPrefix()
	l, _ := newLocker(b, servers, prefix, 10*time.Second)
	other, _ := newLocker(b, servers, prefix, 10*time.Second)
	if _, err := other.Campaign(ctx, "bench", "them"); err != nil {
		b.Fatal(err)
	}
	if _, err := l.Leader(ctx, "bench"); err != nil { // connect outside the timer
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		info, err := l.Leader(ctx, "bench")
		if err != nil || info.Value != "them" {
			b.Fatalf("Leader = %+v, %v", info, err)
		}
	}
}
