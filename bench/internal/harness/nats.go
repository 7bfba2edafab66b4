package harness

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ServicesScript installs a nats-server recent enough (and Redis); the
// error of a missing or old nats-server names it.
const ServicesScript = "scripts/services.sh"

// NATSMinVersion is the oldest nats-server the NATS implementations work
// with: per-key TTLs came in 2.11. Debian's nats-server (2.9) is older.
const NATSMinVersion = "2.11"

// NATSBinary returns the nats-server to start and its version:
// DLOCK_NATS_BIN, else /usr/local/bin/nats-server (where ServicesScript
// installs it), else nats-server on PATH, the first that is
// NATSMinVersion or later. dlock's own tests find it the same way
// (internal/testenv, which this module cannot import).
func NATSBinary() (bin, version string, err error) {
	candidates := []string{"/usr/local/bin/nats-server", "nats-server"}
	if b := os.Getenv("DLOCK_NATS_BIN"); b != "" {
		candidates = []string{b}
	}
	var firstErr error
	for _, c := range candidates {
		bin, err := exec.LookPath(c)
		if err == nil {
			version, err = natsVersion(bin)
		}
		if err == nil {
			return bin, version, nil
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	return "", "", fmt.Errorf("no nats-server %s or later: %w; install it with %s (or set DLOCK_NATS_BIN)", NATSMinVersion, firstErr, ServicesScript)
}

var natsVersionRE = regexp.MustCompile(`v?(\d+)\.(\d+)\.(\d+)`)

// natsVersion runs bin --version and returns the version if it is
// NATSMinVersion or later.
func natsVersion(bin string) (string, error) {
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s --version: %v", bin, err)
	}
	m := natsVersionRE.FindStringSubmatch(string(out))
	if m == nil {
		return "", fmt.Errorf("%s --version: no version in %q", bin, out)
	}
	major, _ := strconv.Atoi(m[1])
	minor, _ := strconv.Atoi(m[2])
	if major < 2 || major == 2 && minor < 11 {
		return "", fmt.Errorf("%s is %s, older than %s (no per-key TTL)", bin, m[0], NATSMinVersion)
	}
	return m[0], nil
}

// StartNATS starts a nats-server of the benchmark's own (NATSBinary) on a
// free loopback port, JetStream on, its store (file storage) in the
// server's temporary directory, and waits until JetStream answers. Its
// Addr is a nats:// URL. Kill removes it and every bucket in it.
func StartNATS() (*Server, error) {
	bin, _, err := NATSBinary()
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	url := "nats://127.0.0.1:" + strconv.Itoa(port)
	return launch("nats-server", url, natsReady, func(dir string) *exec.Cmd {
		return exec.Command(bin, "-a", "127.0.0.1", "-p", strconv.Itoa(port), "-js", "-sd", dir)
	})
}

// natsReady checks that the server at url answers JetStream requests.
func natsReady(url string) error {
	nc, err := nats.Connect(url, nats.Timeout(time.Second), nats.NoReconnect())
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err = js.AccountInfo(ctx)
	return err
}

// Bucket returns a KV bucket name unique to this run and implementation
// (bucket names allow letters, digits, '-' and '_').
func (e *Env) Bucket(impl string) string {
	return "dlockbench-" + e.Run + "-" + strings.ReplaceAll(impl, ".", "_")
}
