package interop

import (
	"os"
	"testing"
)

// TestMain runs the tests, or, in a child process a test started
// (DLOCK_INTEROP_CHILD), that child's part: a dlock holder for a test to
// kill.
func TestMain(m *testing.M) {
	switch os.Getenv("DLOCK_INTEROP_CHILD") {
	case "zk":
		zkChild()
	}
	os.Exit(m.Run())
}
