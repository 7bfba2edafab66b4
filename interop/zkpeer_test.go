package interop

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/zklock"
)

// A zkPeer is a ZooKeeper lock library in a process of its own, driven by
// its harness under peers/ (Curator.java, kazoo_peer.py): the same
// commands for both (loop, hold, try, leader).
type zkPeer struct {
	name   string        // "curator", "kazoo"
	layout zklock.Layout // the dlock layout that speaks its format
	// election: the harness's kind for the peer's election recipe.
	election string
	// rwKinds: the sides of the readers-writer lock its two processes take
	// in TestZKMutualExclusion. kazoo 2.8 (Debian 12's) has both writers:
	// its ReadLock waits for the newest write node, even one queued after
	// its own, and so deadlocks with any writer that queues behind it,
	// kazoo's own as well as dlock's (kazoo#649, fixed in kazoo 2.9).
	// TestZKReadersShare covers its readers.
	rwKinds []string
	// command returns the command that runs the harness with args.
	command func(t testing.TB, args ...string) *exec.Cmd
}

var zkPeers = []zkPeer{
	{name: "curator", layout: zklock.LayoutCurator, election: "latch", rwKinds: []string{"read", "write"}, command: curatorCommand},
	{name: "kazoo", layout: zklock.LayoutKazoo, election: "election", rwKinds: []string{"write", "write"}, command: kazooCommand},
}

// curatorJars are the jars the Curator harness runs on: Debian's
// libcurator-recipes-java and what it depends on.
var curatorJars = []string{
	"curator-recipes", "curator-framework", "curator-client",
	"zookeeper", "zookeeper-jute", "guava", "slf4j-api", "slf4j-nop",
}

var curatorBuild struct {
	once sync.Once
	cp   string
	err  error
}

// curatorCommand compiles peers/Curator.java once per test binary and
// returns the command that runs it with args. A missing JDK or Curator is
// a failure: the interop tests never skip a peer.
func curatorCommand(t testing.TB, args ...string) *exec.Cmd {
	t.Helper()
	curatorBuild.once.Do(func() {
		var cp []string
		for _, j := range curatorJars {
			p := "/usr/share/java/" + j + ".jar"
			if _, err := os.Stat(p); err != nil {
				curatorBuild.err = fmt.Errorf("Curator's jars are not installed (Debian's libcurator-recipes-java; scripts/services.sh installs it): %w", err)
				return
			}
			cp = append(cp, p)
		}
		out, err := os.MkdirTemp("", "dlock-interop-curator-")
		if err != nil {
			curatorBuild.err = err
			return
		}
		src, _ := filepath.Abs("peers/Curator.java")
		javac := exec.Command("javac", "-cp", strings.Join(cp, ":"), "-d", out, src)
		if b, err := javac.CombinedOutput(); err != nil {
			curatorBuild.err = fmt.Errorf("javac Curator.java: %v\n%s", err, b)
			return
		}
		curatorBuild.cp = strings.Join(append(cp, out), ":")
	})
	if curatorBuild.err != nil {
		t.Fatal(curatorBuild.err)
	}
	return exec.Command("java", append([]string{"-Xss512k", "-XX:TieredStopAtLevel=1", "-cp", curatorBuild.cp, "Curator"}, args...)...)
}

// kazooPython is the interpreter that has Debian's python3-kazoo.
const kazooPython = "/usr/bin/python3"

// kazooCommand returns the command that runs peers/kazoo_peer.py with
// args. A missing kazoo is a failure.
func kazooCommand(t testing.TB, args ...string) *exec.Cmd {
	t.Helper()
	if err := exec.Command(kazooPython, "-c", "import kazoo").Run(); err != nil {
		t.Fatalf("kazoo is not installed for %s (Debian's python3-kazoo; scripts/services.sh installs it): %v", kazooPython, err)
	}
	src, _ := filepath.Abs("peers/kazoo_peer.py")
	return exec.Command(kazooPython, append([]string{src}, args...)...)
}

// zkEnv is one test's ZooKeeper: the shared standalone server, a prefix
// of the test's own, and a plain client to look at the tree with.
type zkEnv struct {
	addr   string
	prefix string
	conn   *zk.Conn
}

func newZKEnv(t testing.TB) *zkEnv {
	t.Helper()
	addr := testenv.ZKAddr(t)
	conn, _, err := zk.Connect([]string{addr}, 5*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	return &zkEnv{addr: addr, prefix: fmt.Sprintf("/interop-%d", time.Now().UnixNano()), conn: conn}
}

// locker returns a dlock Locker on e in the given layout, with 2s sessions
// (as the harnesses use), closed at the end of the test.
func (e *zkEnv) locker(t testing.TB, layout zklock.Layout) *dlock.Locker {
	t.Helper()
	l, err := zklock.New([]string{e.addr}, &zklock.Options{Prefix: e.prefix, Layout: layout, SessionTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// path returns the znode of the lock called name.
func (e *zkEnv) path(name string) string { return e.prefix + "/" + name }

// children returns the children of the lock called name's znode.
func (e *zkEnv) children(t testing.TB, name string) []string {
	t.Helper()
	names, _, err := e.conn.Children(e.path(name))
	if err != nil && err != zk.ErrNoNode {
		t.Fatal(err)
	}
	return names
}

// waitChildren waits until the lock called name's znode has n children
// (a contender just queued its node).
func (e *zkEnv) waitChildren(t testing.TB, name string, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for len(e.children(t, name)) != n {
		if time.Now().After(deadline) {
			t.Fatalf("%s: children %v, want %d", e.path(name), e.children(t, name), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A holder is a peer process in "hold": it holds its lock from its
// "acquired" line until told to release.
type holder struct {
	t     testing.TB
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
}

// startHolder starts the harness's hold command.
func startHolder(t testing.TB, cmd *exec.Cmd) *holder {
	t.Helper()
	h := &holder{t: t, cmd: cmd, lines: make(chan string, 4)}
	var err error
	if h.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr testenv.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(h.lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			h.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() && stderr.String() != "" {
			t.Logf("%s stderr:\n%s", filepath.Base(cmd.Path), stderr.String())
		}
	})
	return h
}

// expect waits for the line want from the holder.
func (h *holder) expect(want string) {
	h.t.Helper()
	select {
	case l, ok := <-h.lines:
		if !ok {
			h.t.Fatalf("%v exited before saying %q", h.cmd.Args[:3], want)
		}
		if l != want {
			h.t.Fatalf("%v said %q, want %q", h.cmd.Args[:3], l, want)
		}
	case <-time.After(60 * time.Second):
		h.t.Fatalf("%v did not say %q within a minute", h.cmd.Args[:3], want)
	}
}

// release tells the holder to release, and waits until it did.
func (h *holder) release() {
	h.t.Helper()
	if _, err := io.WriteString(h.stdin, "\n"); err != nil {
		h.t.Fatal(err)
	}
	h.expect("released")
}

// run runs a harness command to its end and returns its output.
func run(t testing.TB, cmd *exec.Cmd) string {
	t.Helper()
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("%v: %v\n%s", cmd.Args, err, stderr)
	}
	return strings.TrimSpace(string(out))
}

// TestZKMutualExclusion runs dlock and each peer on one mutex, and on one
// readers-writer lock, from both sides at once: two peer processes and
// four dlock goroutines (on two Lockers, so two sessions) take the lock
// round after round, and no two holders ever overlap.
func TestZKMutualExclusion(t *testing.T) {
	const rounds = 30
	for _, p := range zkPeers {
		for _, kind := range []string{"mutex", "rw"} {
			t.Run(p.name+"/"+kind, func(t *testing.T) {
				e := newZKEnv(t)
				r := newResource(t)
				lockers := []*dlock.Locker{e.locker(t, p.layout), e.locker(t, p.layout)}
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
				defer cancel()

				peerKinds := []string{"mutex", "mutex"}
				if kind == "rw" {
					peerKinds = p.rwKinds
				}
				var wg sync.WaitGroup
				errs := make(chan error, 8)
				for i, k := range peerKinds {
					cmd := p.command(t, "loop", e.addr, k, e.path("x"), fmt.Sprint(rounds), r.dir, fmt.Sprintf("%s-%d", p.name, i), "2")
					wg.Go(func() {
						if out, err := cmd.CombinedOutput(); err != nil {
							errs <- fmt.Errorf("%v: %v\n%s", cmd.Args, err, out)
						}
					})
				}
				for i := range 4 {
					l := lockers[i%2]
					who := fmt.Sprintf("dlock-%d", i)
					write := kind == "mutex" || i%2 == 0
					wg.Go(func() {
						for range rounds {
							var (
								lease *dlock.Lease
								err   error
							)
							switch {
							case kind == "mutex":
								lease, err = l.Acquire(ctx, "x")
							case write:
								lease, err = l.AcquireWrite(ctx, "x")
							default:
								lease, err = l.AcquireRead(ctx, "x")
							}
							if err != nil {
								errs <- err
								return
							}
							if write {
								r.enter(who)
								time.Sleep(2 * time.Millisecond)
								r.exit()
							} else {
								exit := r.enterShared(who)
								time.Sleep(2 * time.Millisecond)
								exit()
							}
							if err := lease.Release(ctx); err != nil {
								errs <- err
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
				r.check(t, 6*rounds)
				sides := map[string]int{}
				for _, who := range r.entries() {
					sides[strings.Split(who, "-")[0]]++
				}
				if sides["dlock"] != 4*rounds || sides[p.name] != 2*rounds {
					t.Errorf("entries by side %v; want dlock %d, %s %d", sides, 4*rounds, p.name, 2*rounds)
				}
			})
		}
	}
}

// TestZKFIFO queues dlock's and a peer's waiters alternately behind a
// holder, of either side, and checks that they are served in the order
// they queued.
func TestZKFIFO(t *testing.T) {
	for _, p := range zkPeers {
		for _, first := range []string{"dlock", p.name} {
			t.Run(p.name+"/"+first+"-holds", func(t *testing.T) {
				e := newZKEnv(t)
				r := newResource(t)
				l := e.locker(t, p.layout)
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()

				// The first holder.
				var releaseFirst func()
				if first == "dlock" {
					lease, err := l.Acquire(ctx, "q")
					if err != nil {
						t.Fatal(err)
					}
					r.enter("dlock-0")
					releaseFirst = func() {
						r.exit()
						if err := lease.Release(ctx); err != nil {
							t.Error(err)
						}
					}
				} else {
					h := startHolder(t, p.command(t, "hold", e.addr, "mutex", e.path("q"), r.dir, p.name+"-0"))
					h.expect("acquired")
					releaseFirst = h.release
				}
				e.waitChildren(t, "q", 1)

				// Waiters, alternately a peer's and dlock's, each queued
				// once the one before it has its node.
				var (
					want    = []string{r.entries()[0]}
					wg      sync.WaitGroup
					holders []*holder
				)
				for i := 1; i <= 4; i++ {
					if i%2 == 1 {
						who := fmt.Sprintf("%s-%d", p.name, i)
						holders = append(holders, startHolder(t, p.command(t, "hold", e.addr, "mutex", e.path("q"), r.dir, who)))
						want = append(want, who)
					} else {
						who := fmt.Sprintf("dlock-%d", i)
						wg.Go(func() {
							lease, err := l.Acquire(ctx, "q")
							if err != nil {
								t.Error(err)
								return
							}
							r.enter(who)
							r.exit()
							if err := lease.Release(ctx); err != nil {
								t.Error(err)
							}
						})
						want = append(want, who)
					}
					e.waitChildren(t, "q", i+1)
				}
				releaseFirst()
				// Let each peer go as it gets its turn.
				for _, h := range holders {
					h.expect("acquired")
					h.release()
				}
				wg.Wait()
				if got := r.entries(); strings.Join(got, " ") != strings.Join(want, " ") {
					t.Errorf("served in the order %v; want the order of queueing %v", got, want)
				}
				r.check(t, len(want))
			})
		}
	}
}

// TestZKCrashedHolder kills a holder of either side with SIGKILL and
// checks that the other side gets the lock once the holder's session
// expires.
func TestZKCrashedHolder(t *testing.T) {
	for _, p := range zkPeers {
		t.Run(p.name+"/peer-crashes", func(t *testing.T) {
			e := newZKEnv(t)
			r := newResource(t)
			l := e.locker(t, p.layout)
			h := startHolder(t, p.command(t, "hold", e.addr, "mutex", e.path("c"), r.dir, p.name))
			h.expect("acquired")
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, err := l.TryAcquire(ctx, "c"); !errors.Is(err, dlock.ErrNotAcquired) {
				t.Fatalf("TryAcquire while %s holds: %v, want held", p.name, err)
			}
			start := time.Now()
			if err := h.cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			lease, err := l.Acquire(ctx, "c")
			if err != nil {
				t.Fatalf("Acquire after %s's holder was killed: %v", p.name, err)
			}
			t.Logf("%s killed: dlock held after %v (session timeout 2s)", p.name, time.Since(start).Round(time.Millisecond))
			_ = lease.Release(ctx)
		})
		t.Run(p.name+"/dlock-crashes", func(t *testing.T) {
			e := newZKEnv(t)
			child := startHolder(t, crashChild(t, e, p.layout, "c"))
			child.expect("acquired")
			if out := run(t, p.command(t, "try", e.addr, "mutex", e.path("c"), "200")); out != "busy" {
				t.Fatalf("%s tried while dlock held: %q, want busy", p.name, out)
			}
			start := time.Now()
			if err := child.cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			if out := run(t, p.command(t, "try", e.addr, "mutex", e.path("c"), "20000")); out != "acquired" {
				t.Fatalf("%s after dlock's holder was killed: %q, want acquired", p.name, out)
			}
			t.Logf("dlock killed: %s held after %v (session timeout 2s, with the JVM's or interpreter's start)", p.name, time.Since(start).Round(time.Millisecond))
		})
	}
}

// crashChild returns the command of a child process (this test binary,
// see TestMain) that takes the lock called name with dlock and holds it
// until killed.
func crashChild(t testing.TB, e *zkEnv, layout zklock.Layout, name string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "DLOCK_INTEROP_CHILD=zk", "DLOCK_INTEROP_ZK="+e.addr, "DLOCK_INTEROP_PREFIX="+e.prefix,
		"DLOCK_INTEROP_LAYOUT="+string(layout), "DLOCK_INTEROP_NAME="+name)
	return cmd
}

// zkChild is the crash child's body: hold the lock until killed.
func zkChild() {
	l, err := zklock.New([]string{os.Getenv("DLOCK_INTEROP_ZK")}, &zklock.Options{
		Prefix: os.Getenv("DLOCK_INTEROP_PREFIX"), Layout: zklock.Layout(os.Getenv("DLOCK_INTEROP_LAYOUT")), SessionTimeout: 2 * time.Second,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if _, err := l.Acquire(context.Background(), os.Getenv("DLOCK_INTEROP_NAME")); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("acquired")
	select {}
}

// TestZKReleaseKeepsOthers checks that neither side's giving up or
// releasing removes the other's node: a peer that times out waiting
// behind dlock's holder, and dlock's TryAcquire that fails behind a
// peer's, each remove only their own node.
func TestZKReleaseKeepsOthers(t *testing.T) {
	eachZKPeer(t, time.Minute, func(t *testing.T, p zkPeer, e *zkEnv, r *resource, l *dlock.Locker, ctx context.Context) {

		lease, err := l.Acquire(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		held := e.children(t, "k")
		if out := run(t, p.command(t, "try", e.addr, "mutex", e.path("k"), "300")); out != "busy" {
			t.Fatalf("%s tried while dlock held: %q, want busy", p.name, out)
		}
		if got := e.children(t, "k"); strings.Join(got, ",") != strings.Join(held, ",") {
			t.Fatalf("after %s gave up: children %v, want dlock's alone %v", p.name, got, held)
		}
		if err := lease.Renew(ctx); err != nil {
			t.Fatalf("dlock's lease after %s gave up: %v", p.name, err)
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}

		h := startHolder(t, p.command(t, "hold", e.addr, "mutex", e.path("k"), r.dir, p.name))
		h.expect("acquired")
		held = e.children(t, "k")
		if _, err := l.TryAcquire(ctx, "k"); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatalf("TryAcquire while %s holds: %v, want held", p.name, err)
		}
		if got := e.children(t, "k"); strings.Join(got, ",") != strings.Join(held, ",") {
			t.Fatalf("after dlock gave up: children %v, want %s's alone %v", got, p.name, held)
		}
		h.release()
		if lease, err = l.TryAcquire(ctx, "k"); err != nil {
			t.Fatalf("TryAcquire after %s released: %v", p.name, err)
		}
		_ = lease.Release(ctx)
	})
}

// TestZKElection runs an election with dlock's candidates and the peer's
// (Curator's LeaderLatch, kazoo's Election) and checks that both sides
// agree on who leads, and that leadership passes between them in order.
func TestZKElection(t *testing.T) {
	eachZKPeer(t, 2*time.Minute, func(t *testing.T, p zkPeer, e *zkEnv, r *resource, l *dlock.Locker, ctx context.Context) {

		lead, err := l.Campaign(ctx, "e", "dlock-a")
		if err != nil {
			t.Fatal(err)
		}
		obs, err := l.Observe(ctx, "e")
		if err != nil {
			t.Fatal(err)
		}
		expectLeader := func(want string) {
			t.Helper()
			for {
				select {
				case info := <-obs:
					if info.Value == want {
						return
					}
				case <-ctx.Done():
					t.Fatalf("Observe never reported %q", want)
				}
			}
		}
		expectLeader("dlock-a")
		h := startHolder(t, p.command(t, "hold", e.addr, p.election, e.path("e"), r.dir, p.name+"-b"))
		e.waitChildren(t, "e", 2)
		if got := run(t, p.command(t, "leader", e.addr, e.path("e"))); got != "dlock-a" {
			t.Errorf("%s sees the leader %q, want dlock-a", p.name, got)
		}
		if err := lead.Release(ctx); err != nil {
			t.Fatal(err)
		}
		h.expect("acquired")
		expectLeader(p.name + "-b")
		info, err := l.Leader(ctx, "e")
		if err != nil || info.Value != p.name+"-b" {
			t.Errorf("Leader while %s leads: %+v, %v", p.name, info, err)
		}
		// dlock queues behind the peer's leader, and takes over when
		// it resigns.
		won := acquireAsync(t, func() (*dlock.Lease, error) { return l.Campaign(ctx, "e", "dlock-c") })
		e.waitChildren(t, "e", 2)
		h.release()
		expectLeader("dlock-c")
		lease := <-won
		if lease == nil {
			t.FailNow()
		}
		if got := run(t, p.command(t, "leader", e.addr, e.path("e"))); got != "dlock-c" {
			t.Errorf("%s sees the leader %q, want dlock-c", p.name, got)
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// TestZKReadersShare queues a peer's reader and dlock's behind dlock's
// writer: when the writer releases, both hold the read lock at once, and
// a writer of either side waits for both.
func TestZKReadersShare(t *testing.T) {
	eachZKPeer(t, time.Minute, func(t *testing.T, p zkPeer, e *zkEnv, r *resource, l *dlock.Locker, ctx context.Context) {

		w, err := l.AcquireWrite(ctx, "s")
		if err != nil {
			t.Fatal(err)
		}
		e.waitChildren(t, "s", 1)
		h := startHolder(t, p.command(t, "hold", e.addr, "read", e.path("s"), r.dir, p.name+"-r"))
		e.waitChildren(t, "s", 2)
		got := acquireAsync(t, func() (*dlock.Lease, error) { return l.AcquireRead(ctx, "s") })
		e.waitChildren(t, "s", 3)
		if err := w.Release(ctx); err != nil {
			t.Fatal(err)
		}
		h.expect("acquired")
		rd := <-got
		if rd == nil {
			t.FailNow()
		}
		// Both read now; a writer of either side must wait.
		if _, err := l.TryAcquireWrite(ctx, "s"); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatalf("TryAcquireWrite while two readers hold: %v, want not acquired", err)
		}
		if out := run(t, p.command(t, "try", e.addr, "write", e.path("s"), "300")); out != "busy" {
			t.Fatalf("%s's writer tried while two readers held: %q, want busy", p.name, out)
		}
		h.release()
		if err := rd.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if out := run(t, p.command(t, "try", e.addr, "write", e.path("s"), "5000")); out != "acquired" {
			t.Fatalf("%s's writer after both readers left: %q, want acquired", p.name, out)
		}
	})
}

// acquireAsync runs acquire in a goroutine of its own: the channel gives
// its lease, or nil after an error, which fails tb.
func acquireAsync(tb testing.TB, acquire func() (*dlock.Lease, error)) <-chan *dlock.Lease {
	got := make(chan *dlock.Lease, 1)
	go func() {
		lease, err := acquire()
		if err != nil {
			tb.Error(err)
		}
		got <- lease
	}()
	return got
}

// eachZKPeer runs f as a subtest per peer, with a fresh prefix, resource
// and dlock Locker in the peer's layout, and a context that ends after
// timeout.
func eachZKPeer(t *testing.T, timeout time.Duration, f func(t *testing.T, p zkPeer, e *zkEnv, r *resource, l *dlock.Locker, ctx context.Context)) {
	for _, p := range zkPeers {
		t.Run(p.name, func(t *testing.T) {
			e := newZKEnv(t)
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			f(t, p, e, newResource(t), e.locker(t, p.layout), ctx)
		})
	}
}
