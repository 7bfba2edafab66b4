package natslock

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/redisutil"
)

// DefaultPort is the NATS port used when a URL names none.
const DefaultPort = "4222"

// DefaultDialTimeout bounds how long Open waits for a server to answer
// (URL parameter dial_timeout).
const DefaultDialTimeout = 5 * time.Second

func init() {
	dlock.Register("nats", open)
}

// open is the Opener of nats:// URLs (see the package documentation for
// their form and parameters). It connects, then binds or creates the
// bucket, so that a wrong address or a server without per-key TTL fails
// here rather than at the first lock.
func open(ctx context.Context, u driver.URL) (driver.Driver, error) {
	servers, nopts, tlsConfig, err := connOptions(u)
	if err != nil {
		return nil, err
	}
	// The server reports a denied publish asynchronously, and the request
	// gets no answer: keep the report for the error, and end Open's wait.
	var refusal atomic.Pointer[error]
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	nopts = append(nopts, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrPermissionViolation) || errors.Is(err, nats.ErrAuthorization) {
			refusal.Store(&err)
			cancel()
		}
	}))
	o, err := driverOptions(u)
	if err == nil {
		err = u.Unknown()
	}
	if err != nil {
		return nil, err
	}
	nc, err := nats.Connect(strings.Join(servers, ","), nopts...)
	if err != nil {
		return nil, fmt.Errorf("natslock: open %s: %w%s", u.Redacted(), err, tlsHint(err, tlsConfig))
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("natslock: open %s: %w", u.Redacted(), err)
	}
	d, err := NewDriver(ctx, js, o)
	if err != nil {
		nc.Close()
		if r := refusal.Load(); r != nil {
			return nil, fmt.Errorf("natslock: open %s: %w (the server refused: %v)", u.Redacted(), err, *r)
		}
		return nil, fmt.Errorf("natslock: open %s: %w", u.Redacted(), err)
	}
	d.nc = nc
	return d, nil
}

// tlsHint says what a failed TLS handshake most likely means: the server
// requires TLS the URL did not ask for, or a client certificate it did
// not give (nats.go reports only the handshake's end).
func tlsHint(err error, c *tls.Config) string {
	if !strings.Contains(err.Error(), "tls") {
		return ""
	}
	switch {
	case c == nil:
		return " (the server requires TLS: add tls=true, and cacert= if its certificate is not from a system authority)"
	case len(c.Certificates) == 0:
		return " (if the server verifies clients, give the client's certificate: cert= and key=)"
	}
	return ""
}

// connOptions reads the servers, the credentials, TLS and the connection
// parameters.
func connOptions(u driver.URL) ([]string, []nats.Option, *tls.Config, error) {
	if u.Host == "" {
		return nil, nil, nil, u.Err("host", "", errors.New("missing: the URL must name at least one server, as in nats://127.0.0.1:4222/dlock"))
	}
	addrs, err := redisutil.HostList(u, strings.Split(u.Host, ","), DefaultPort, "listed twice")
	if err != nil {
		return nil, nil, nil, err
	}
	tlsConfig, err := u.TLS(false)
	if err != nil {
		return nil, nil, nil, err
	}
	scheme := "nats://"
	if tlsConfig != nil {
		scheme = "tls://"
	}
	servers := make([]string, len(addrs))
	for i, a := range addrs {
		servers[i] = scheme + a
	}
	dial, err := u.PositiveDuration("dial_timeout", DefaultDialTimeout)
	if err != nil {
		return nil, nil, nil, err
	}
	opts := []nats.Option{
		nats.Timeout(dial),
		nats.MaxReconnects(-1),
		nats.RetryOnFailedConnect(false),
		// No buffering while reconnecting: a write queued then would be
		// sent after its call returned, to take a lock nobody holds.
		nats.ReconnectBufSize(-1),
	}
	if name := u.String("client_name", ""); name != "" {
		opts = append(opts, nats.Name(name))
	}
	if tlsConfig != nil {
		opts = append(opts, nats.Secure(tlsConfig))
	}
	auth, err := authOptions(u)
	if err != nil {
		return nil, nil, nil, err
	}
	return servers, append(opts, auth...), tlsConfig, nil
}

// authOptions reads the credentials: the user information (user and
// password), token, creds (a .creds file: a user JWT and its nkey seed)
// or nkey (a file holding an nkey seed), one kind at most. A token is a
// parameter, not the user information nats.go also takes it from, so that
// messages hide it as they hide passwords.
func authOptions(u driver.URL) ([]nats.Option, error) {
	token := u.String("token", "")
	creds := u.String("creds", "")
	nkey := u.String("nkey", "")
	var opts []nats.Option
	var kinds []string
	if u.User != nil {
		kinds = append(kinds, "userinfo")
		user := u.User.Username()
		password, hasPassword := u.User.Password()
		switch {
		case user == "":
			return nil, u.Err("userinfo", "", errors.New("a password without a user name"))
		case !hasPassword:
			return nil, u.Err("userinfo", "", errors.New("a user name without a password; for a token, use the token parameter"))
		}
		opts = append(opts, nats.UserInfo(user, password))
	}
	if token != "" {
		kinds = append(kinds, "token")
		opts = append(opts, nats.Token(token))
	}
	if creds != "" {
		kinds = append(kinds, "creds")
		if err := readable(creds); err != nil {
			return nil, u.Err("creds", creds, err)
		}
		opts = append(opts, nats.UserCredentials(creds))
	}
	if nkey != "" {
		kinds = append(kinds, "nkey")
		opt, err := nats.NkeyOptionFromSeed(nkey)
		if err != nil {
			return nil, u.Err("nkey", nkey, err)
		}
		opts = append(opts, opt)
	}
	if len(kinds) > 1 {
		last := kinds[len(kinds)-1]
		return nil, u.Err(last, u.String(last, ""), fmt.Errorf("one kind of credentials only, not %s", strings.Join(kinds, " and ")))
	}
	return opts, nil
}

// readable checks that a credentials file can be read, so that a wrong
// path is reported by its parameter rather than by a failed handshake.
func readable(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	return f.Close()
}

// driverOptions reads the parameters of the driver itself: the path (the
// bucket), replicas, storage, marker_ttl, create and request_timeout.
func driverOptions(u driver.URL) (*Options, error) {
	o := &Options{Bucket: strings.Trim(u.Path, "/")}
	if o.Bucket == "" {
		o.Bucket = DefaultBucket
	}
	if !validBucket(o.Bucket) {
		return nil, u.Err("bucket", o.Bucket, errors.New("the path must be a bucket name: letters, digits, - and _"))
	}
	var err error
	if o.Replicas, err = u.Int("replicas", 1); err != nil {
		return nil, err
	}
	if o.Replicas < 1 || o.Replicas > 5 {
		return nil, u.Err("replicas", strconv.Itoa(o.Replicas), errors.New("must be 1 to 5"))
	}
	switch s := u.String("storage", "file"); s {
	case "file":
		o.Storage = jetstream.FileStorage
	case "memory":
		o.Storage = jetstream.MemoryStorage
	default:
		return nil, u.Err("storage", s, errors.New(`must be "file" (the default) or "memory"`))
	}
	if o.MarkerTTL, err = u.Duration("marker_ttl", DefaultMarkerTTL); err != nil {
		return nil, err
	}
	if o.MarkerTTL < time.Second {
		return nil, u.Err("marker_ttl", o.MarkerTTL.String(), errors.New("must be at least 1s, the server's least TTL"))
	}
	create, err := u.Bool("create", true)
	if err != nil {
		return nil, err
	}
	o.NoCreate = !create
	if o.RequestTimeout, err = u.PositiveDuration("request_timeout", DefaultRequestTimeout); err != nil {
		return nil, err
	}
	return o, nil
}

// validBucket matches a valid KV bucket name, as jetstream checks it.
var validBucket = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`).MatchString
