package filelock

import (
	"fmt"
	"os"
	"path/filepath"
)

// DefaultDir returns the directory a Driver uses when given none (and the
// URL "file://" names), created with mode 0700 if missing: the first that
// can be determined of $XDG_STATE_HOME/dlock, $HOME/.local/state/dlock,
// os.UserCacheDir()/dlock and os.TempDir()/dlock-<uid> (see docs/FILE.md).
// It is per user: processes of different users do not exclude each other
// through it. DefaultDir fails if it is a symbolic link, belongs to
// another user or is writable by group or others.
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
