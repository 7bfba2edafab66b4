package filelock

import (
	"fmt"
	"os"
	"path/filepath"
)

// DefaultDir returns the directory that a Driver uses when given none (and
// that the URL "file://" names), creating it with mode 0700 if it is
// missing: $XDG_STATE_HOME/dlock, $HOME/.local/state/dlock,
// os.UserCacheDir()/dlock or os.TempDir()/dlock-<uid>, the first that can
// be determined (see docs/FILE.md). The directory is per user: processes
// of different users do not exclude each other through it. DefaultDir
// fails if the directory is a symbolic link, belongs to another user or is
// writable by group or others.
func DefaultDir() (string, error) {
	dir := defaultDirPath()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("filelock: default directory: %w", err)
	}
	if err := checkPrivate(dir); err != nil {
		return "", fmt.Errorf("filelock: default directory: %w", err)
	}
	return dir, nil
}

func defaultDirPath() string {
	if s := os.Getenv("XDG_STATE_HOME"); s != "" && filepath.IsAbs(s) {
		return filepath.Join(s, "dlock")
	}
	if home, err := os.UserHomeDir(); err == nil && filepath.IsAbs(home) {
		return filepath.Join(home, ".local", "state", "dlock")
	}
	if c, err := os.UserCacheDir(); err == nil && filepath.IsAbs(c) {
		return filepath.Join(c, "dlock")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("dlock-%d", os.Getuid()))
}
