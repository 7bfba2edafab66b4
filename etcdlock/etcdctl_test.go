package etcdlock_test

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/internal/testenv"
)

// These tests run dlock in LayoutConcurrency beside etcdctl lock and
// etcdctl elect (Debian's etcd-client), processes of their own, on the
// same names. A missing etcdctl fails them (testenv.EtcdctlBinary).

// waitFile waits up to d for path to exist and returns its content.
func waitFile(t testing.TB, path string, d time.Duration) string {
	t.Helper()
	for deadline := time.Now().Add(d); ; time.Sleep(10 * time.Millisecond) {
		if b, err := os.ReadFile(path); err == nil {
			return string(b)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not appear within %v", path, d)
		}
	}
}

// exited runs cmd.Wait in the background; the channel gets its error.
func exited(cmd *exec.Cmd) <-chan error {
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	return done
}

// lockRev is the create revision etcdctl lock hands its command as
// ETCD_LOCK_REV, as the command wrote it to a file.
func lockRev(t testing.TB, content string) uint64 {
	t.Helper()
	rev, err := strconv.ParseUint(strings.TrimSpace(content), 10, 64)
	if err != nil {
		t.Fatalf("ETCD_LOCK_REV = %q: %v", content, err)
	}
	return rev
}

// TestEtcdctlLock: while `etcdctl lock NAME -- cmd` runs cmd, dlock cannot
// take NAME, and a waiting Acquire gets it once cmd ends; while dlock
// holds NAME, etcdctl lock waits and runs its command only after the
// release. Tokens and ETCD_LOCK_REV grow across the handoffs.
func TestEtcdctlLock(t *testing.T) {
	eps, admin, prefix, ctx := interop(t, 60*time.Second)
	dir := t.TempDir()
	name := "job"
	l := concLocker(t, eps, prefix)

	in, out := filepath.Join(dir, "in"), filepath.Join(dir, "out")
	ctl := testenv.Etcdctl(t, eps, "lock", prefix+"/"+name, "--", "sh", "-c",
		`echo "$ETCD_LOCK_REV" > "$1.tmp" && mv "$1.tmp" "$1"; while [ ! -e "$2" ]; do sleep 0.02; done`, "sh", in, out)
	if err := ctl.Start(); err != nil {
		t.Fatal(err)
	}
	ctlDone := exited(ctl)
	ctlRev := lockRev(t, waitFile(t, in, 15*time.Second))
	if _, err := l.TryAcquire(ctx, name); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("dlock TryAcquire while etcdctl lock runs its command = %v, want ErrNotAcquired", err)
	}
	p := start(func() (*dlock.Lease, error) { return l.Acquire(ctx, name) })
	p.notYet(t, "dlock Acquire while etcdctl lock holds")
	time.Sleep(300 * time.Millisecond)
	p.notYet(t, "dlock Acquire while etcdctl lock holds")
	if err := os.WriteFile(out, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := await(t, ctlDone, 15*time.Second, "etcdctl lock"); err != nil {
		t.Fatalf("etcdctl lock: %v", err)
	}
	lease := p.get(t, "dlock Acquire after etcdctl lock's command ended")
	if lease.Token() <= ctlRev {
		t.Errorf("dlock's token %d is not above etcdctl's ETCD_LOCK_REV %d", lease.Token(), ctlRev)
	}

	in2 := filepath.Join(dir, "in2")
	ctl2 := testenv.Etcdctl(t, eps, "lock", prefix+"/"+name, "--", "sh", "-c", `echo "$ETCD_LOCK_REV" > "$1.tmp" && mv "$1.tmp" "$1"`, "sh", in2)
	if err := ctl2.Start(); err != nil {
		t.Fatal(err)
	}
	ctl2Done := exited(ctl2)
	waitQueue(t, admin, prefix+"/"+name+"/", 2)
	time.Sleep(500 * time.Millisecond)
	if _, err := os.Stat(in2); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("etcdctl lock ran its command while dlock holds (stat: %v)", err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if rev := lockRev(t, waitFile(t, in2, 15*time.Second)); rev <= lease.Token() {
		t.Errorf("etcdctl's ETCD_LOCK_REV %d is not above dlock's token %d", rev, lease.Token())
	}
	if err := await(t, ctl2Done, 15*time.Second, "etcdctl lock"); err != nil {
		t.Fatalf("etcdctl lock: %v", err)
	}
}

// gauge is a holders gauge that processes share: a holder makes the
// directory held on entry and removes it on exit; an entry that finds it
// there already is an overlap, written down in the file overlaps. Every
// entry appends its side to the file log.
type gauge struct{ dir string }

// gaugeShell is the gauge's critical section for a shell: enter, hold
// 50ms, exit. $1 is the gauge's directory, $2 the side.
const gaugeShell = `mkdir "$1/held" 2>/dev/null || echo "$2" >> "$1/overlaps"; echo "$2" >> "$1/log"; sleep 0.05; rmdir "$1/held"`

func (g gauge) hold(side string) {
	if err := os.Mkdir(filepath.Join(g.dir, "held"), 0o755); errors.Is(err, fs.ErrExist) {
		appendTo(filepath.Join(g.dir, "overlaps"), side)
	}
	appendTo(filepath.Join(g.dir, "log"), side)
	time.Sleep(50 * time.Millisecond)
	_ = os.Remove(filepath.Join(g.dir, "held"))
}

func appendTo(path, line string) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		panic(err)
	}
	defer f.Close()
	_, _ = f.WriteString(line + "\n")
}

// TestEtcdctlLockContention: two dlock Lockers and two sequences of
// etcdctl lock processes take one name in turns; the gauge they share
// never sees two holders.
func TestEtcdctlLockContention(t *testing.T) {
	eps, _, prefix, ctx := interop(t, 120*time.Second)
	const name, rounds = "hot", 6
	g := gauge{dir: t.TempDir()}
	var wg sync.WaitGroup
	errs := make(chan error, 4*rounds)
	for i := range 2 {
		l := concLocker(t, eps, prefix)
		wg.Go(func() {
			for range rounds {
				lease, err := l.Acquire(ctx, name)
				if err != nil {
					errs <- fmt.Errorf("dlock %d: %w", i, err)
					return
				}
				g.hold("dlock")
				if err := lease.Release(ctx); err != nil {
					errs <- fmt.Errorf("dlock %d: release: %w", i, err)
				}
			}
		})
	}
	for i := range 2 {
		wg.Go(func() {
			for range rounds {
				cmd := testenv.Etcdctl(t, eps, "lock", prefix+"/"+name, "--", "sh", "-c", gaugeShell, "sh", g.dir, "etcdctl")
				if b, err := cmd.CombinedOutput(); err != nil {
					errs <- fmt.Errorf("etcdctl %d: %w: %s", i, err, b)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if b, err := os.ReadFile(filepath.Join(g.dir, "overlaps")); err == nil {
		t.Errorf("two holders at once, entering: %q", strings.Fields(string(b)))
	}
	b, _ := os.ReadFile(filepath.Join(g.dir, "log"))
	counts := map[string]int{}
	for _, side := range strings.Fields(string(b)) {
		counts[side]++
	}
	if counts["dlock"] != 2*rounds || counts["etcdctl"] != 2*rounds {
		t.Errorf("entries %v, want %d of each side", counts, 2*rounds)
	}
}

// TestEtcdctlLockCrash: an etcdctl lock killed with SIGKILL (its command
// with it) frees the lock for a waiting dlock Acquire once its session
// lease (--ttl 2) expires; a dlock holder whose client dies frees it for
// a waiting etcdctl lock once its own lease expires.
func TestEtcdctlLockCrash(t *testing.T) {
	eps, admin, prefix, ctx := interop(t, 60*time.Second)
	dir := t.TempDir()
	l := concLocker(t, eps, prefix)

	in := filepath.Join(dir, "in")
	ctl := testenv.Etcdctl(t, eps, "lock", "--ttl", "2", prefix+"/a", "--", "sh", "-c", `touch "$1"; exec sleep 60`, "sh", in)
	if err := ctl.Start(); err != nil {
		t.Fatal(err)
	}
	ctlDone := exited(ctl)
	waitFile(t, in, 15*time.Second)
	p := start(func() (*dlock.Lease, error) { return l.Acquire(ctx, "a") })
	p.notYet(t, "dlock Acquire while etcdctl lock holds")
	if err := syscall.Kill(-ctl.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	<-ctlDone
	lease := p.get(t, "dlock Acquire after etcdctl lock was killed")
	took := time.Since(killed)
	t.Logf("dlock acquired %v after etcdctl lock was killed", took)
	if took < time.Second {
		t.Errorf("dlock acquired %v after the kill, before the killed holder's 2s lease could expire", took)
	}
	_ = lease.Release(ctx)

	const ttl = 2 * time.Second
	holder := concLocker(t, eps, prefix, dlock.WithTTL(ttl))
	if _, err := holder.Acquire(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	in2 := filepath.Join(dir, "in2")
	ctl2 := testenv.Etcdctl(t, eps, "lock", prefix+"/b", "--", "touch", in2)
	if err := ctl2.Start(); err != nil {
		t.Fatal(err)
	}
	ctl2Done := exited(ctl2)
	waitQueue(t, admin, prefix+"/b/", 2)
	_ = drv(holder).Client().Close()
	crashed := time.Now()
	waitFile(t, in2, 30*time.Second)
	t.Logf("etcdctl lock ran its command %v after the dlock holder's client closed", time.Since(crashed))
	if err := await(t, ctl2Done, 15*time.Second, "etcdctl lock"); err != nil {
		t.Fatalf("etcdctl lock: %v", err)
	}
}

// lines reads r line by line into a channel, closed at EOF.
func lines(t testing.TB, cmd *exec.Cmd) <-chan string {
	t.Helper()
	r, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan string, 100)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			ch <- sc.Text()
		}
	}()
	return ch
}

// awaitLine reads lines until one equals want.
func awaitLine(t testing.TB, ch <-chan string, want string) {
	t.Helper()
	receiveUntil(t, ch, "a line "+want, func(l string) bool { return l == want })
}

// TestEtcdctlElect: `etcdctl elect -l NAME` observes the dlock leader's
// value; `etcdctl elect NAME PROPOSAL` waits while a dlock candidate leads
// and is elected when it resigns, and dlock's Leader and Observe then
// report PROPOSAL with the key's create revision; when etcdctl resigns
// (SIGINT), a dlock candidate waiting behind it leads.
func TestEtcdctlElect(t *testing.T) {
	eps, admin, prefix, ctx := interop(t, 60*time.Second)
	const name = "svc"
	pfx := prefix + "/" + name
	obs, dch := observeNobody(t, ctx, eps, prefix, name)

	a := concLocker(t, eps, prefix)
	la, err := a.Campaign(ctx, name, "dlock-a")
	if err != nil {
		t.Fatal(err)
	}
	listen := testenv.Etcdctl(t, eps, "elect", "-l", pfx)
	listened := lines(t, listen)
	if err := listen.Start(); err != nil {
		t.Fatal(err)
	}
	awaitLine(t, listened, "dlock-a")

	elect := testenv.Etcdctl(t, eps, "elect", pfx, "ctl-b")
	elected := lines(t, elect)
	if err := elect.Start(); err != nil {
		t.Fatal(err)
	}
	electDone := exited(elect)
	kvs := waitQueue(t, admin, pfx+"/", 2)
	select {
	case l := <-elected:
		t.Fatalf("etcdctl elect printed %q while dlock's candidate leads", l)
	case <-time.After(300 * time.Millisecond):
	}
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	awaitLine(t, elected, "ctl-b")
	ctlB := dlock.LeaderInfo{Value: "ctl-b", Token: uint64(kvs[1].CreateRevision)}
	dlockObserved(t, dch, ctlB)
	if got, err := obs.Leader(ctx, name); err != nil || got != ctlB {
		t.Errorf("dlock Leader = %+v, %v; want %+v", got, err, ctlB)
	}
	awaitLine(t, listened, "ctl-b")

	c := concLocker(t, eps, prefix)
	pc := start(func() (*dlock.Lease, error) { return c.Campaign(ctx, name, "dlock-c") })
	waitQueue(t, admin, pfx+"/", 2)
	pc.notYet(t, "dlock candidate behind etcdctl elect")
	if err := elect.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	lc := pc.get(t, "dlock candidate after etcdctl elect resigned")
	if err := await(t, electDone, 15*time.Second, "etcdctl elect"); err != nil {
		t.Errorf("etcdctl elect after SIGINT: %v", err)
	}
	dlockObserved(t, dch, dlock.LeaderInfo{Value: "dlock-c", Token: lc.Token()})
	awaitLine(t, listened, "dlock-c")
	_ = lc.Release(ctx)
}
