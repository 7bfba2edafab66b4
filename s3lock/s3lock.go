package s3lock

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go/middleware"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/objlock"
)

// Options configures a Driver; the zero value is usable.
type Options struct {
	// Prefix is prepended to the key of every object the driver writes,
	// e.g. "locks/". Empty by default: the lock objects are at
	// mutex/<name> in the bucket.
	Prefix string
	// NoProbe skips the check NewDriver makes that the store refuses
	// conditional writes whose condition fails. Leave it off unless the
	// driver's credentials may not write under Prefix before the first
	// lock.
	NoProbe bool
}

// Driver is the S3 driver: a dlock driver.Driver over one bucket of S3
// or an S3-compatible store; see the package documentation.
type Driver struct {
	*objlock.Driver
}

// NewDriver returns a driver over bucket through client. Unless
// o.NoProbe, it first checks that the store honours conditional writes
// (see the package documentation) and refuses a store that does not.
func NewDriver(ctx context.Context, client *s3.Client, bucket string, o *Options) (*Driver, error) {
	if client == nil {
		return nil, errors.New("s3lock: nil client")
	}
	if bucket == "" {
		return nil, errors.New("s3lock: empty bucket name")
	}
	var opt Options
	if o != nil {
		opt = *o
	}
	d, err := objlock.Open(ctx, &store{c: client, bucket: bucket},
		objlock.Config{Scheme: "s3", Package: "s3lock", Prefix: opt.Prefix, Grain: time.Second},
		opt.NoProbe, `"00000000000000000000000000000000"`)
	if err != nil {
		return nil, err
	}
	return &Driver{d}, nil
}

// New returns a Locker over NewDriver(ctx, client, bucket, o).
func New(ctx context.Context, client *s3.Client, bucket string, o *Options, opts ...dlock.Option) (*dlock.Locker, error) {
	d, err := NewDriver(ctx, client, bucket, o)
	if err != nil {
		return nil, err
	}
	return dlock.New(d, opts...)
}

// store is objlock.Store over an S3 bucket.
type store struct {
	c      *s3.Client
	bucket string
}

func (s *store) Read(ctx context.Context, key string) (objlock.Object, bool, objlock.Now, error) {
	out, err := s.c.GetObject(ctx, &s3.GetObjectInput{Bucket: &s.bucket, Key: &key})
	if err != nil {
		if status(err) == http.StatusNotFound {
			date, derr := errorDate(err)
			return objlock.Object{}, false, objlock.HTTPDate(date), derr
		}
		return objlock.Object{}, false, objlock.Now{}, err
	}
	defer out.Body.Close()
	body, err := io.ReadAll(out.Body)
	if err != nil {
		return objlock.Object{}, false, objlock.Now{}, err
	}
	date, err := serverTime(out.ResultMetadata)
	o := objlock.Object{Body: body, Version: aws.ToString(out.ETag), Modified: aws.ToTime(out.LastModified)}
	return o, true, objlock.HTTPDate(date), err
}

func (s *store) Write(ctx context.Context, key string, body []byte, version string) (string, error) {
	in := &s3.PutObjectInput{Bucket: &s.bucket, Key: &key, Body: bytes.NewReader(body), ContentType: aws.String("application/json")}
	if version == "" {
		in.IfNoneMatch = aws.String("*")
	} else {
		in.IfMatch = aws.String(version)
	}
	out, err := s.c.PutObject(ctx, in)
	if err != nil {
		// 412: the condition failed; 409: a concurrent conditional write
		// to the key won; 404: a replace of an object that is gone.
		switch status(err) {
		case http.StatusPreconditionFailed, http.StatusConflict, http.StatusNotFound:
			return "", errors.Join(objlock.ErrCondition, err)
		}
		return "", err
	}
	return aws.ToString(out.ETag), nil
}

func (s *store) Delete(ctx context.Context, key string) error {
	_, err := s.c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &s.bucket, Key: &key})
	return err
}

func (s *store) List(ctx context.Context, prefix string) ([]string, error) {
	var keys []string
	p := s3.NewListObjectsV2Paginator(s.c, &s3.ListObjectsV2Input{Bucket: &s.bucket, Prefix: &prefix})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		for _, o := range page.Contents {
			keys = append(keys, aws.ToString(o.Key))
		}
	}
	return keys, nil
}

// status returns the HTTP status of a failed request, 0 if none came.
func status(err error) int {
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}

var errNoDate = errors.New("s3lock: the store's response has no Date header, and the lock's expiry is judged on the store's clock")

// serverTime is the Date of a successful response.
func serverTime(md middleware.Metadata) (time.Time, error) {
	if t, ok := awsmiddleware.GetServerTime(md); ok {
		return t, nil
	}
	return time.Time{}, errNoDate
}

// errorDate is the Date of a failed request's response.
func errorDate(err error) (time.Time, error) {
	var re *awshttp.ResponseError
	if errors.As(err, &re) && re.Response != nil {
		if t, perr := http.ParseTime(strings.TrimSpace(re.Response.Header.Get("Date"))); perr == nil {
			return t, nil
		}
	}
	return time.Time{}, errNoDate
}

var _ driver.Driver = (*Driver)(nil)
