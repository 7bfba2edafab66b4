package filelock

import (
	"context"
	"errors"
	"io/fs"
	"strconv"
	"strings"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
)

func init() {
	dlock.Register(Scheme, open)
}

// open opens a Driver from a file URL (see the package documentation).
func open(_ context.Context, u driver.URL) (driver.Driver, error) {
	if u.Opaque != "" {
		return nil, u.Err("path", u.Opaque, errors.New("want an absolute directory, file:///dir, or file:// for the default directory"))
	}
	if u.Host != "" && u.Host != "localhost" {
		return nil, u.Err("host", u.Host, errors.New("file URLs name a local directory: file:///abs/dir (three slashes), or file:// for the default directory"))
	}
	if u.User != nil {
		return nil, u.Err("user", u.User.Username(), errors.New("file URLs take no user"))
	}
	if u.Path == "/" {
		return nil, u.Err("path", u.Path, errors.New("not the root directory; file:// alone means the default directory"))
	}
	var o Options
	if u.Has("mode") {
		v := u.String("mode", "")
		m, err := parseMode(v)
		if err != nil {
			return nil, u.Err("mode", v, err)
		}
		o.Mode = m
	}
	sync, err := u.Bool("sync", false)
	if err != nil {
		return nil, err
	}
	o.Sync = sync
	if err := u.Unknown(); err != nil {
		return nil, err
	}
	return NewDriver(u.Path, &o)
}

// parseMode parses an octal permission (0600, 660, 0o644) with owner rw.
func parseMode(v string) (fs.FileMode, error) {
	m, err := strconv.ParseUint(strings.TrimPrefix(v, "0o"), 8, 32)
	if err != nil || m&^0o777 != 0 {
		return 0, errors.New("want octal permission bits, such as 0600 or 0660")
	}
	if m&0o600 != 0o600 {
		return 0, errors.New("must grant the owner read and write (0600)")
	}
	return fs.FileMode(m), nil
}
