package zklock_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/internal/testenv"
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

func benchKind(b *testing.B, take func(ctx context.Context, l *dlock.Locker) (*dlock.Lease, error), setup func(ctx context.Context, l *dlock.Locker)) {
	ctx := context.Background()
	servers, prefix := []string{testenv.ZKAddr(b)}, testPrefix()
	l, _ := newLocker(b, servers, prefix, 10*time.Second)
	if setup != nil {
		other, _ := newLocker(b, servers, prefix, 10*time.Second)
		setup(ctx, other)
	}
	one := func() {
		lease, err := take(ctx, l)
		if err != nil {
			b.Fatal(err)
		}
		if err := lease.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
	one() // connect outside the timer
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		one()
	}
}

func BenchmarkRead(b *testing.B) {
	benchKind(b, func(ctx context.Context, l *dlock.Locker) (*dlock.Lease, error) {
		return l.AcquireRead(ctx, "bench")
	}, nil)
}

func BenchmarkReadShared(b *testing.B) {
	benchKind(b, func(ctx context.Context, l *dlock.Locker) (*dlock.Lease, error) {
		return l.AcquireRead(ctx, "bench")
	}, func(ctx context.Context, other *dlock.Locker) {
		if _, err := other.AcquireRead(ctx, "bench"); err != nil {
			b.Fatal(err)
		}
	})
}

func BenchmarkWrite(b *testing.B) {
	benchKind(b, func(ctx context.Context, l *dlock.Locker) (*dlock.Lease, error) {
		return l.AcquireWrite(ctx, "bench")
	}, nil)
}

func BenchmarkPermit(b *testing.B) {
	benchKind(b, func(ctx context.Context, l *dlock.Locker) (*dlock.Lease, error) {
		return l.AcquirePermit(ctx, "bench", 4)
	}, func(ctx context.Context, other *dlock.Locker) {
		if _, err := other.AcquirePermit(ctx, "bench", 4); err != nil {
			b.Fatal(err)
		}
	})
}

func BenchmarkCampaign(b *testing.B) {
	benchKind(b, func(ctx context.Context, l *dlock.Locker) (*dlock.Lease, error) {
		return l.Campaign(ctx, "bench", "me")
	}, nil)
}

// BenchmarkMutex is the baseline: Acquire, in the same harness.
func BenchmarkMutex(b *testing.B) {
	benchKind(b, func(ctx context.Context, l *dlock.Locker) (*dlock.Lease, error) {
		return l.Acquire(ctx, "bench")
	}, nil)
}

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
