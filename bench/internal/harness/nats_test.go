package harness

import (
	"os"
	"testing"
	"time"
)

func TestProcessCPU(t *testing.T) {
	pid := os.Getpid()
	comm, _, err := ProcStat(pid)
	if err != nil {
		t.Fatal(err)
	}
	if comm == "" {
		t.Error("no command name")
	}
	before, err := ProcessCPU(pid)
	if err != nil {
		t.Fatal(err)
	}
	// Spin until the ticks move (a busy machine gives this process
	// little of a CPU, so no fixed amount is expected).
	deadline := time.Now().Add(10 * time.Second)
	for {
		after, err := ProcessCPU(pid)
		if err != nil {
			t.Fatal(err)
		}
		if after-before >= 20*time.Millisecond {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("10 s of spinning counted as %v of CPU", after-before)
		}
		for end := time.Now().Add(10 * time.Millisecond); time.Now().Before(end); {
		}
	}
}
