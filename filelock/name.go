package filelock

import (
	"fmt"
	"strings"

	"github.com/dlockgo/dlock"
)

// Suffix ends the name of every lock file.
const Suffix = ".lock"

// A lock's file name is its name with every "/" replaced by slashEscape,
// plus Suffix ("orders%42.lock"), directly in the driver's directory: with
// no "/" and the suffix, it is never "." or "..", nor reaches outside. The
// mapping is reversible and collision-free as slashEscape is not in the
// alphabet of lock names; FileName rejects it anyway, should that grow.
const slashEscape = '%'

// FileName returns the name of the file, in a driver's directory, that
// holds the lock called name: name with each "/" replaced by "%", plus
// Suffix ("orders/42" → "orders%42.lock"). The error wraps
// dlock.ErrInvalidName for a name that dlock.ValidateName rejects.
func FileName(name string) (string, error) {
	if err := validate(name); err != nil {
		return "", err
	}
	return strings.ReplaceAll(name, "/", string(slashEscape)) + Suffix, nil
}

// LockName returns the lock name that the file name file holds, the
// inverse of FileName; ok is false for a file that is no lock file.
func LockName(file string) (name string, ok bool) {
	base, found := strings.CutSuffix(file, Suffix)
	if !found || strings.ContainsRune(base, '/') {
		return "", false
	}
	name = strings.ReplaceAll(base, string(slashEscape), "/")
	if validate(name) != nil {
		return "", false
	}
	return name, true
}

func validate(name string) error {
	if err := dlock.ValidateName(name); err != nil {
		return err
	}
	if strings.IndexByte(name, slashEscape) >= 0 {
		return fmt.Errorf("%w: %q: %q is reserved by filelock", dlock.ErrInvalidName, name, slashEscape)
	}
	return nil
}
