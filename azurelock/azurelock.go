package azurelock

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/objlock"
)

// Options configures a Driver; the zero value is usable.
type Options struct {
	// Prefix is prepended to the name of every blob the driver writes,
	// e.g. "locks/". Empty by default: the lock blobs are at
	// mutex/<name> in the container.
	Prefix string
	// NoProbe skips the check NewDriver makes that the store refuses
	// conditional writes whose condition fails. Leave it off unless the
	// driver's credentials may not write under Prefix before the first
	// lock.
	NoProbe bool
}

// Driver is the Azure Blob Storage driver: a dlock driver.Driver over one
// container; see the package documentation.
type Driver struct {
	*objlock.Driver
}

// NewDriver returns a driver over the container called containerName
// through client. Unless o.NoProbe, it first checks that the store
// honours conditional writes (see the package documentation) and refuses
// one that does not.
func NewDriver(ctx context.Context, client *azblob.Client, containerName string, o *Options) (*Driver, error) {
	if client == nil {
		return nil, errors.New("azurelock: nil client")
	}
	if containerName == "" {
		return nil, errors.New("azurelock: empty container name")
	}
	var opt Options
	if o != nil {
		opt = *o
	}
	d, err := objlock.Open(ctx, &store{c: client.ServiceClient().NewContainerClient(containerName)},
		objlock.Config{Scheme: "azblob", Package: "azurelock", Prefix: opt.Prefix, Grain: time.Second},
		opt.NoProbe, `"0x8DD00000000000"`)
	if err != nil {
		return nil, err
	}
	return &Driver{d}, nil
}

// New returns a Locker over NewDriver(ctx, client, containerName, o).
func New(ctx context.Context, client *azblob.Client, containerName string, o *Options, opts ...dlock.Option) (*dlock.Locker, error) {
	d, err := NewDriver(ctx, client, containerName, o)
	if err != nil {
		return nil, err
	}
	return dlock.New(d, opts...)
}

// store is objlock.Store over a container.
type store struct {
	c *container.Client
}

func (s *store) Read(ctx context.Context, key string) (objlock.Object, bool, objlock.Now, error) {
	out, err := s.c.NewBlobClient(key).DownloadStream(ctx, nil)
	if err != nil {
		var re *azcore.ResponseError
		if errors.As(err, &re) && re.StatusCode == http.StatusNotFound {
			d, derr := date(re.RawResponse)
			return objlock.Object{}, false, objlock.HTTPDate(d), derr
		}
		return objlock.Object{}, false, objlock.Now{}, err
	}
	defer out.Body.Close()
	body, err := io.ReadAll(out.Body)
	if err != nil {
		return objlock.Object{}, false, objlock.Now{}, err
	}
	if out.Date == nil || out.ETag == nil || out.LastModified == nil {
		return objlock.Object{}, false, objlock.Now{}, errIncomplete
	}
	o := objlock.Object{Body: body, Version: string(*out.ETag), Modified: *out.LastModified}
	return o, true, objlock.HTTPDate(*out.Date), nil
}

func (s *store) Write(ctx context.Context, key string, body []byte, version string) (string, error) {
	cond := &blob.ModifiedAccessConditions{}
	if version == "" {
		cond.IfNoneMatch = to(azcore.ETagAny)
	} else {
		cond.IfMatch = to(azcore.ETag(version))
	}
	out, err := s.c.NewBlockBlobClient(key).Upload(ctx, streaming.NopCloser(bytes.NewReader(body)), &blockblob.UploadOptions{
		HTTPHeaders:      &blob.HTTPHeaders{BlobContentType: to("application/json")},
		AccessConditions: &blob.AccessConditions{ModifiedAccessConditions: cond},
	})
	if err != nil {
		// 412: the condition failed; 409: the blob exists (a create);
		// 404: a replace of a blob that is gone.
		var re *azcore.ResponseError
		if errors.As(err, &re) {
			switch re.StatusCode {
			case http.StatusPreconditionFailed, http.StatusConflict, http.StatusNotFound:
				return "", errors.Join(objlock.ErrCondition, err)
			}
		}
		return "", err
	}
	if out.ETag == nil {
		return "", errIncomplete
	}
	return string(*out.ETag), nil
}

func (s *store) Delete(ctx context.Context, key string) error {
	_, err := s.c.NewBlobClient(key).Delete(ctx, nil)
	return err
}

func (s *store) List(ctx context.Context, prefix string) ([]string, error) {
	var keys []string
	p := s.c.NewListBlobsFlatPager(&container.ListBlobsFlatOptions{Prefix: &prefix})
	for p.More() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		for _, b := range page.Segment.BlobItems {
			if b.Name != nil {
				keys = append(keys, *b.Name)
			}
		}
	}
	return keys, nil
}

func to[T any](v T) *T { return &v }

var errIncomplete = errors.New("azurelock: the store's response lacks its Date, ETag or Last-Modified, which the lock's expiry and conditions need")

// date is the Date of a response.
func date(r *http.Response) (time.Time, error) {
	if r != nil {
		if t, err := http.ParseTime(r.Header.Get("Date")); err == nil {
			return t, nil
		}
	}
	return time.Time{}, errIncomplete
}

var _ driver.Driver = (*Driver)(nil)
