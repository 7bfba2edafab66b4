// Package natsbin finds the nats-server that dlock's tests
// (internal/testenv) and the bench module's harness start, and tells when
// one is ready. It imports the NATS client alone, so that the bench module
// can use it without taking on testenv's dependencies (the clients of
// every backend).
package natsbin

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ServicesScript installs a nats-server recent enough; Find's error names
// it.
const ServicesScript = "scripts/services.sh"

// MinVersion is the oldest nats-server accepted: per-key TTLs and their
// markers came in 2.11. Debian's nats-server (2.9) is older;
// ServicesScript installs a current release in /usr/local/bin.
const MinVersion = "2.11"

// Find returns the nats-server binary and its version: DLOCK_NATS_BIN,
// else /usr/local/bin/nats-server (where ServicesScript installs it), else
// nats-server on PATH, the first that is MinVersion or later. When there
// is none, its error says why the first candidate was refused and names
// ServicesScript. It looks again on every call.
func Find() (bin, version string, err error) {
	candidates := []string{"/usr/local/bin/nats-server", "nats-server"}
	if b := os.Getenv("DLOCK_NATS_BIN"); b != "" {
		candidates = []string{b}
	}
	var firstErr error
	for _, c := range candidates {
		bin, err := exec.LookPath(c)
		if err == nil {
			version, err = versionOf(bin)
		}
		if err == nil {
			return bin, version, nil
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	return "", "", fmt.Errorf("no nats-server %s or later: %w; install it with %s (or set DLOCK_NATS_BIN)", MinVersion, firstErr, ServicesScript)
}

var versionRE = regexp.MustCompile(`v?(\d+)\.(\d+)\.(\d+)`)

// versionOf runs bin --version and returns the version if it is
// MinVersion or later.
func versionOf(bin string) (string, error) {
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s --version: %v", bin, err)
	}
	m := versionRE.FindStringSubmatch(string(out))
	if m == nil {
		return "", fmt.Errorf("%s --version: no version in %q", bin, out)
	}
	major, _ := strconv.Atoi(m[1])
	minor, _ := strconv.Atoi(m[2])
	if major < 2 || major == 2 && minor < 11 {
		return "", fmt.Errorf("%s is %s, older than %s (no per-key TTL)", bin, m[0], MinVersion)
	}
	return m[0], nil
}

// Ready checks that the server at url (nats://host:port) answers
// JetStream requests: a client of it alone, with opts, gets JetStream's
// account information (in a cluster, once a meta leader is elected).
func Ready(url string, opts ...nats.Option) error {
	nc, err := nats.Connect(url, append(opts, nats.Timeout(time.Second), nats.NoReconnect())...)
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
