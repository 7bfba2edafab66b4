package filelock_test

import (
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/locktest"
)

// TestDiagnose: Diagnose (dlock doctor's checks) passes a private
// directory on a local file system, leaving nothing in it, and warns on a
// directory anyone may write without the sticky bit (anyone may remove a
// held lock's file).
func TestDiagnose(t *testing.T) {
	dir := t.TempDir()
	_, d := newLocker(t, dir)
	fs := locktest.Diagnose(t, d, time.Minute)
	locktest.NoFail(t, fs)
	locktest.WantFinding(t, fs, "permissions", driver.OK, "may create lock files")
	if runtime.GOOS == "linux" {
		locktest.WantFinding(t, fs, "file system", driver.OK, " at /")
	}
	if left, err := os.ReadDir(dir); err != nil || len(left) != 0 {
		t.Errorf("Diagnose left %v in the directory (%v)", left, err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	fs = locktest.Diagnose(t, d, time.Minute)
	locktest.WantFinding(t, fs, "permissions", driver.Warn, "writable by everyone, without the sticky bit")
}
