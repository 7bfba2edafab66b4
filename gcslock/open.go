package gcslock

import (
	"context"
	"errors"
	"fmt"

	"cloud.google.com/go/storage"
	"google.golang.org/api/option"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/objlock"
)

func init() {
	dlock.Register("gs", open)
}

// open is the Opener of gs:// URLs; see the package documentation for
// their form and parameters. Credentials come from Google's application
// default credentials, never from the URL.
func open(ctx context.Context, u driver.URL) (driver.Driver, error) {
	if u.Host == "" {
		return nil, u.Err("bucket", "", errors.New("a gs URL names its bucket as host: gs://bucket/prefix"))
	}
	if u.User != nil {
		return nil, u.Err("user", u.User.Username(), errors.New("credentials come from Google's application default credentials (GOOGLE_APPLICATION_CREDENTIALS, the metadata server), not the URL"))
	}
	prefix, endpoint, probe, err := objlock.URL(u)
	if err != nil {
		return nil, err
	}
	if err := u.Unknown(); err != nil {
		return nil, err
	}
	var opts []option.ClientOption
	if endpoint != "" {
		opts = append(opts, option.WithEndpoint(endpoint))
	}
	client, err := storage.NewClient(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("gcslock: open %s: %w", u.Redacted(), err)
	}
	d, err := NewDriver(ctx, client, u.Host, &Options{Prefix: prefix, NoProbe: !probe})
	if err != nil {
		client.Close()
		return nil, fmt.Errorf("gcslock: open %s: %w", u.Redacted(), err)
	}
	return &closing{d, client}, nil
}

// closing is a Driver that closes the client open made for it.
type closing struct {
	*Driver
	client *storage.Client
}

func (c *closing) Close() error {
	return errors.Join(c.Driver.Close(), c.client.Close())
}
