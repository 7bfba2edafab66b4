package redisutil

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/dlockgo/dlock/driver"
)

// HostList checks the "host[:port]" entries of a URL's server list (its
// comma-separated host, and for some forms its addr parameters) and
// returns them as addresses, with defPort where an entry names no port.
// Every mistake is a *driver.ParamError on the parameter "host": an empty
// entry, a bad host or port, an address listed twice (dup says why that
// is wrong).
func HostList(u driver.URL, entries []string, defPort, dup string) ([]string, error) {
	seen := map[string]bool{}
	addrs := make([]string, 0, len(entries))
	for _, h := range entries {
		if h == "" {
			return nil, u.Err("host", u.Host, errors.New("empty entry in the node list"))
		}
		host, port, err := net.SplitHostPort(h)
		if err != nil {
			switch {
			case strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]"):
				host, port = h[1:len(h)-1], defPort // [::1]
			case strings.Contains(h, ":"):
				return nil, u.Err("host", h, err)
			default:
				host, port = h, defPort
			}
		}
		if host == "" {
			return nil, u.Err("host", h, errors.New("no host name"))
		}
		if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
			return nil, u.Err("host", h, fmt.Errorf("bad port %q", port))
		}
		addr := net.JoinHostPort(host, port)
		if seen[addr] {
			return nil, u.Err("host", h, errors.New(dup))
		}
		seen[addr] = true
		addrs = append(addrs, addr)
	}
	return addrs, nil
}

// PositiveOr returns v, or def when v is zero or negative (an unset
// Options duration, an unknown remaining time).
func PositiveOr(v, def time.Duration) time.Duration {
	if v <= 0 {
		return def
	}
	return v
}
