package harness

import (
	"os/exec"
	"strconv"
	"strings"

	"github.com/dlockgo/dlock/internal/testenv/natsbin"
)

// StartNATS starts a nats-server of the benchmark's own (natsbin.Find) on a
// free loopback port, JetStream on, its store (file storage) in the
// server's temporary directory, and waits until JetStream answers. Its
// Addr is a nats:// URL. Kill removes it and every bucket in it.
func StartNATS() (*Server, error) {
	bin, _, err := natsbin.Find()
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	url := "nats://127.0.0.1:" + strconv.Itoa(port)
	return launch("nats-server", url, func(url string) error { return natsbin.Ready(url) }, func(dir string) *exec.Cmd {
		return exec.Command(bin, "-a", "127.0.0.1", "-p", strconv.Itoa(port), "-js", "-sd", dir)
	})
}

// Bucket returns a KV bucket name unique to this run and implementation
// (bucket names allow letters, digits, '-' and '_').
func (e *Env) Bucket(impl string) string {
	return "dlockbench-" + e.Run + "-" + strings.ReplaceAll(impl, ".", "_")
}
