package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// NetScript installs what test networks need (iproute2, nftables).
const NetScript = "scripts/services.sh"

// Net is a test network of the test's own: a bridge in the root network
// namespace and, per host, a network namespace joined to it by a veth
// pair. The root namespace has the address Gateway on the bridge, so the
// test process and its clients reach every host; hosts reach each other
// and the gateway. Partitions are nftables rules inside the hosts'
// namespaces: nothing outside the network is touched. StartNet's cleanup
// kills every process left in the namespaces and removes them and the
// bridge.
type Net struct {
	t      testing.TB
	id     int
	bridge string
	// Gateway is the root namespace's address on the bridge: the address
	// the hosts reach the test process at.
	Gateway string
	// Hosts are the network's hosts, in the order they were made.
	Hosts []*Host

	mu sync.Mutex // orders rule changes
}

// Host is one network namespace of a Net, with one address.
type Host struct {
	// Name is the namespace's name (for ip netns exec).
	Name string
	// IP is the host's address on the bridge.
	IP string
	// drops are the addresses the host drops packets from (in) and to
	// (out).
	in, out []string
}

const netIDs = 100 // networks 10.213.0.0/24 … 10.213.99.0/24

// StartNet makes a network of n hosts. It fails t when the test cannot
// make one: not root, or ip or nft missing (install iproute2 and
// nftables; NetScript does).
func StartNet(t testing.TB, n int) *Net {
	t.Helper()
	for _, bin := range []string{"ip", "nft"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("test networks need %s (%v); install iproute2 and nftables with %s", bin, err, NetScript)
		}
	}
	if os.Geteuid() != 0 {
		t.Fatalf("test networks need root (network namespaces); run the tests as root")
	}
	nt := &Net{t: t}
	// The bridge's name is the network's lock: the kernel refuses a second
	// link of the same name, so two test processes never share a network.
	var err error
	for id := range netIDs {
		br := fmt.Sprintf("dlkbr%d", id)
		err = ipCmd("link", "add", br, "type", "bridge")
		if err != nil && staleNet(id) {
			err = ipCmd("link", "add", br, "type", "bridge")
		}
		if err == nil {
			nt.id, nt.bridge = id, br
			// The bridge's name makes id ours: clear what an earlier
			// owner's teardown may have left (a namespace the kernel
			// had not finished removing).
			removeHosts(id)
			break
		}
	}
	if nt.bridge == "" {
		t.Fatalf("make a test network: no free bridge name among dlkbr0…dlkbr%d (last error: %v)", netIDs-1, err)
	}
	t.Cleanup(nt.remove)
	nt.Gateway = nt.addr(1)
	if err := errors.Join(
		ipCmd("link", "set", nt.bridge, "alias", "dlock-test pid="+strconv.Itoa(os.Getpid())),
		ipCmd("addr", "add", nt.Gateway+"/24", "dev", nt.bridge),
		ipCmd("link", "set", nt.bridge, "up"),
	); err != nil {
		t.Fatalf("make a test network: %v", err)
	}
	for i := range n {
		h := &Host{Name: fmt.Sprintf("dlk%dh%d", nt.id, i), IP: nt.addr(10 + i)}
		veth := fmt.Sprintf("dlk%dv%d", nt.id, i)
		if err := errors.Join(
			ipCmd("netns", "add", h.Name),
			ipCmd("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", h.Name),
			ipCmd("link", "set", veth, "master", nt.bridge, "up"),
			ipCmd("-n", h.Name, "addr", "add", h.IP+"/24", "dev", "eth0"),
			ipCmd("-n", h.Name, "link", "set", "eth0", "up"),
			ipCmd("-n", h.Name, "link", "set", "lo", "up"),
		); err != nil {
			t.Fatalf("make test host %s: %v", h.Name, err)
		}
		nt.Hosts = append(nt.Hosts, h)
	}
	return nt
}

func (nt *Net) addr(host int) string { return fmt.Sprintf("10.213.%d.%d", nt.id, host) }

// staleNet removes network id if the test process that made it is gone,
// and reports whether it did.
func staleNet(id int) bool {
	alias, err := os.ReadFile(fmt.Sprintf("/sys/class/net/dlkbr%d/ifalias", id))
	if err != nil {
		return false
	}
	pid, err := strconv.Atoi(strings.TrimPrefix(strings.TrimSpace(string(alias)), "dlock-test pid="))
	if err != nil || syscall.Kill(pid, 0) == nil {
		return false // not ours, or its owner lives
	}
	removeNet(id)
	return true
}

// remove kills the hosts' processes and removes the namespaces and the
// bridge.
func (nt *Net) remove() { removeNet(nt.id) }

func removeNet(id int) {
	removeHosts(id)
	_ = ipCmd("link", "del", fmt.Sprintf("dlkbr%d", id))
}

// removeHosts kills the processes of network id's namespaces and removes
// them.
func removeHosts(id int) {
	// Deleting a namespace frees its end of a veth pair only when the
	// kernel gets round to it: delete the root end first, which removes
	// both at once, so that the names are free when this returns.
	links, _ := filepath.Glob(fmt.Sprintf("/sys/class/net/dlk%dv*", id))
	for _, l := range links {
		_ = ipCmd("link", "del", filepath.Base(l))
	}
	out, _ := exec.Command("ip", "netns", "list").Output()
	prefix := fmt.Sprintf("dlk%dh", id)
	for _, line := range strings.Split(string(out), "\n") {
		name, _, _ := strings.Cut(line, " ")
		if !strings.HasPrefix(name, prefix) {
			continue
		}
		pids, _ := exec.Command("ip", "netns", "pids", name).Output()
		for _, p := range strings.Fields(string(pids)) {
			if pid, err := strconv.Atoi(p); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		_ = ipCmd("netns", "del", name)
	}
}

func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Command returns a command that runs name in the host's namespace. Its
// process is name's own (ip netns exec execs it), so signals sent to
// cmd.Process reach it.
func (h *Host) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", h.Name, name}, args...)...)
}

// ip is the address a server on h listens on: h's, or loopback when h is
// nil.
func (h *Host) ip() string {
	if h == nil {
		return "127.0.0.1"
	}
	return h.IP
}

// hostAt returns hosts[i], or nil when hosts is empty.
func hostAt(hosts []*Host, i int) *Host {
	if len(hosts) == 0 {
		return nil
	}
	return hosts[i]
}

// Addr returns host:port of the host's address.
func (h *Host) Addr(port int) string { return net.JoinHostPort(h.IP, strconv.Itoa(port)) }

// String names the host for test logs.
func (h *Host) String() string { return h.Name + " " + h.IP }

// Partition cuts the network into sides: no packet passes between hosts
// of different sides, in either direction (they are dropped, as a
// partition does: no reset, no error). Hosts on no side, and the gateway,
// keep every link. Partition replaces any earlier partition or Drop.
func (nt *Net) Partition(sides ...[]*Host) {
	nt.t.Helper()
	nt.mu.Lock()
	defer nt.mu.Unlock()
	side := map[*Host]int{}
	for i, s := range sides {
		for _, h := range s {
			side[h] = i + 1
		}
	}
	for _, h := range nt.Hosts {
		var cut []string
		for _, o := range nt.Hosts {
			if o != h && side[h] != 0 && side[o] != 0 && side[h] != side[o] {
				cut = append(cut, o.IP)
			}
		}
		nt.setRules(h, cut, cut)
	}
}

// Drop makes h drop every packet from the hosts from, while its own
// packets to them still pass: a partition in one direction only. It adds
// to the rules in place.
func (nt *Net) Drop(h *Host, from ...*Host) {
	nt.t.Helper()
	nt.mu.Lock()
	defer nt.mu.Unlock()
	in := slices.Clone(h.in)
	for _, o := range from {
		if !slices.Contains(in, o.IP) {
			in = append(in, o.IP)
		}
	}
	nt.setRules(h, in, h.out)
}

// Isolate cuts h off from the gateway, in both directions: the test
// process's clients no longer reach it. It adds to the rules in place.
func (nt *Net) Isolate(h *Host) {
	nt.t.Helper()
	nt.mu.Lock()
	defer nt.mu.Unlock()
	nt.setRules(h, append(slices.Clone(h.in), nt.Gateway), append(slices.Clone(h.out), nt.Gateway))
}

// Heal removes every partition and drop.
func (nt *Net) Heal() {
	nt.t.Helper()
	nt.mu.Lock()
	defer nt.mu.Unlock()
	for _, h := range nt.Hosts {
		nt.setRules(h, nil, nil)
	}
}

// setRules replaces h's rules: drop packets from in and to out. The
// caller holds nt.mu.
func (nt *Net) setRules(h *Host, in, out []string) {
	nt.t.Helper()
	if slices.Equal(in, h.in) && slices.Equal(out, h.out) {
		return
	}
	var b strings.Builder
	b.WriteString("table inet dlock\ndelete table inet dlock\ntable inet dlock {\n")
	b.WriteString("  chain in {\n    type filter hook input priority 0; policy accept;\n")
	if len(in) > 0 {
		fmt.Fprintf(&b, "    ip saddr { %s } drop\n", strings.Join(in, ", "))
	}
	b.WriteString("  }\n  chain out {\n    type filter hook output priority 0; policy accept;\n")
	if len(out) > 0 {
		fmt.Fprintf(&b, "    ip daddr { %s } drop\n", strings.Join(out, ", "))
	}
	b.WriteString("  }\n}\n")
	cmd := exec.Command("ip", "netns", "exec", h.Name, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(b.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		// Errorf, not Fatalf: fault injectors call this from goroutines of
		// their own.
		nt.t.Errorf("set the rules of %s: %v: %s", h, err, out)
		return
	}
	h.in, h.out = slices.Clone(in), slices.Clone(out)
}

// inNS runs f on an OS thread switched into the host's namespace. Sockets
// f makes belong to that namespace for good.
func (h *Host) inNS(f func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	self, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if err != nil {
		return err
	}
	defer self.Close()
	target, err := os.Open("/var/run/netns/" + h.Name)
	if err != nil {
		return err
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("enter %s: %w", h.Name, err)
	}
	ferr := f()
	if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
		// The thread cannot go back: leave it locked, so that the runtime
		// ends it with the goroutine instead of reusing it.
		runtime.LockOSThread()
		return errors.Join(ferr, fmt.Errorf("leave %s: %w", h.Name, err))
	}
	return ferr
}

// Listen listens on address (host:port; the host's own IP) inside the
// host's namespace.
func (h *Host) Listen(network, address string) (net.Listener, error) {
	var l net.Listener
	err := h.inNS(func() (err error) {
		l, err = net.Listen(network, address)
		return err
	})
	return l, err
}

// DialContext dials from inside the host's namespace, so that the
// connection is subject to the host's links and rules: a client in the
// test process placed on the host. Its signature is that of
// net.Dialer.DialContext, for client options.
func (h *Host) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	var c net.Conn
	err := h.inNS(func() (err error) {
		// net.Dialer makes the socket on the calling goroutine's thread
		// before it connects: the socket is the namespace's.
		c, err = (&net.Dialer{}).DialContext(ctx, network, address)
		return err
	})
	return c, err
}
