package s3lock

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/objlock"
)

func init() {
	dlock.Register("s3", open)
}

// open is the Opener of s3:// URLs; see the package documentation for
// their form and parameters. Credentials come from the AWS SDK's default
// chain, never from the URL.
func open(ctx context.Context, u driver.URL) (driver.Driver, error) {
	if u.Host == "" {
		return nil, u.Err("bucket", "", errors.New("an s3 URL names its bucket as host: s3://bucket/prefix"))
	}
	if u.User != nil {
		return nil, u.Err("user", u.User.Username(), errors.New("credentials come from the AWS SDK's chain (environment, shared config), not the URL"))
	}
	prefix, endpoint, probe, err := objlock.URL(u)
	if err != nil {
		return nil, err
	}
	region := u.String("region", "")
	pathStyle, err := u.Bool("path_style", false)
	if err != nil {
		return nil, err
	}
	if err := u.Unknown(); err != nil {
		return nil, err
	}
	var loads []func(*config.LoadOptions) error
	if region != "" {
		loads = append(loads, config.WithRegion(region))
	}
	cfg, err := config.LoadDefaultConfig(ctx, loads...)
	if err != nil {
		return nil, fmt.Errorf("s3lock: open %s: %w", u.Redacted(), err)
	}
	client := s3.NewFromConfig(cfg, func(o *s3.Options) {
		if endpoint != "" {
			o.BaseEndpoint = aws.String(endpoint)
		}
		o.UsePathStyle = pathStyle
	})
	d, err := NewDriver(ctx, client, u.Host, &Options{Prefix: prefix, NoProbe: !probe})
	if err != nil {
		return nil, fmt.Errorf("s3lock: open %s: %w", u.Redacted(), err)
	}
	return d, nil
}
