package gcslock

import (
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"cloud.google.com/go/storage"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/iterator"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/objlock"
)

// Options configures a Driver; the zero value is usable.
type Options struct {
	// Prefix is prepended to the name of every object the driver writes,
	// e.g. "locks/". Empty by default: the lock objects are at
	// mutex/<name> in the bucket.
	Prefix string
	// NoProbe skips the check NewDriver makes that the store refuses
	// conditional writes whose condition fails. Leave it off unless the
	// driver's credentials may not write under Prefix before the first
	// lock.
	NoProbe bool
}

// Driver is the Google Cloud Storage driver: a dlock driver.Driver over
// one bucket; see the package documentation.
type Driver struct {
	*objlock.Driver
}

// NewDriver returns a driver over bucket through client. Unless
// o.NoProbe, it first checks that the store honours conditional writes
// (see the package documentation) and refuses one that does not.
func NewDriver(ctx context.Context, client *storage.Client, bucket string, o *Options) (*Driver, error) {
	if client == nil {
		return nil, errors.New("gcslock: nil client")
	}
	if bucket == "" {
		return nil, errors.New("gcslock: empty bucket name")
	}
	var opt Options
	if o != nil {
		opt = *o
	}
	s := &store{b: client.Bucket(bucket), clockKey: opt.Prefix + "clock/"}
	d, err := objlock.Open(ctx, s,
		objlock.Config{Scheme: "gs", Package: "gcslock", Prefix: opt.Prefix, Grain: time.Second},
		opt.NoProbe, "1")
	if err != nil {
		return nil, err
	}
	return &Driver{d}, nil
}

// New returns a Locker over NewDriver(ctx, client, bucket, o).
func New(ctx context.Context, client *storage.Client, bucket string, o *Options, opts ...dlock.Option) (*dlock.Locker, error) {
	d, err := NewDriver(ctx, client, bucket, o)
	if err != nil {
		return nil, err
	}
	return dlock.New(d, opts...)
}

// store is objlock.Store over a bucket. The client tells no response's
// Date, so the store's time is reckoned from the driver's own writes:
// each returns the time the store gave the object (updated), which lies
// between the local times before and after the write.
type store struct {
	b        *storage.BucketHandle
	clockKey string // prefix of the objects written to read the store's time

	mu      sync.Mutex
	updated time.Time // the store's time of the last write measured
	before  time.Time // local time, with its monotonic reading, before it
	after   time.Time // and after it
}

// measureEvery is how long a measurement of the store's time serves: its
// bounds widen by 1% of the time since, for clocks that run at different
// rates.
const measureEvery = time.Minute

// now returns the store's time now, as bounds, from the last write
// measured; without one, or with one older than measureEvery, it first
// writes an object of its own (and deletes it) to measure.
func (s *store) now(ctx context.Context) (objlock.Now, error) {
	s.mu.Lock()
	fresh := !s.after.IsZero() && time.Since(s.after) < measureEvery
	s.mu.Unlock()
	if !fresh {
		key := s.clockKey + rand.Text()
		if _, err := s.Write(ctx, key, []byte("{}"), ""); err != nil {
			return objlock.Now{}, err
		}
		if err := s.Delete(ctx, key); err != nil {
			return objlock.Now{}, err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	lo, hi := time.Since(s.after), time.Since(s.before)
	// updated is in milliseconds: the true time may be a millisecond later.
	return objlock.Now{Min: s.updated.Add(lo - lo/100), Max: s.updated.Add(hi + hi/100 + time.Millisecond)}, nil
}

func (s *store) Read(ctx context.Context, key string) (objlock.Object, bool, objlock.Now, error) {
	r, err := s.b.Object(key).NewReader(ctx)
	if errors.Is(err, storage.ErrObjectNotExist) {
		now, err := s.now(ctx)
		return objlock.Object{}, false, now, err
	}
	if err != nil {
		return objlock.Object{}, false, objlock.Now{}, err
	}
	defer r.Close()
	body, err := io.ReadAll(r)
	if err != nil {
		return objlock.Object{}, false, objlock.Now{}, err
	}
	now, err := s.now(ctx)
	o := objlock.Object{Body: body, Version: strconv.FormatInt(r.Attrs.Generation, 10), Modified: r.Attrs.LastModified}
	return o, true, now, err
}

func (s *store) Write(ctx context.Context, key string, body []byte, version string) (string, error) {
	cond := storage.Conditions{DoesNotExist: true}
	if version != "" {
		gen, err := strconv.ParseInt(version, 10, 64)
		if err != nil || gen <= 0 {
			return "", errors.Join(objlock.ErrCondition, errors.New("gcslock: not a generation: "+version))
		}
		cond = storage.Conditions{GenerationMatch: gen}
	}
	before := time.Now()
	w := s.b.Object(key).If(cond).NewWriter(ctx)
	w.ContentType = "application/json"
	w.ChunkSize = 0 // one request: a lock object is small
	_, err := w.Write(body)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		// 412: the condition failed; 404: a replace of an object that is
		// gone.
		var ge *googleapi.Error
		if errors.As(err, &ge) && (ge.Code == http.StatusPreconditionFailed || ge.Code == http.StatusNotFound) {
			return "", errors.Join(objlock.ErrCondition, err)
		}
		return "", err
	}
	after := time.Now()
	a := w.Attrs()
	if a == nil || a.Updated.IsZero() {
		return "", errors.New("gcslock: the store's answer to a write lacks the object's update time, which the lock's expiry is judged by")
	}
	s.mu.Lock()
	if s.after.IsZero() || after.After(s.after) {
		s.updated, s.before, s.after = a.Updated, before, after
	}
	s.mu.Unlock()
	return strconv.FormatInt(a.Generation, 10), nil
}

func (s *store) Delete(ctx context.Context, key string) error {
	return s.b.Object(key).Delete(ctx)
}

func (s *store) List(ctx context.Context, prefix string) ([]string, error) {
	var keys []string
	it := s.b.Objects(ctx, &storage.Query{Prefix: prefix})
	for {
		a, err := it.Next()
		if errors.Is(err, iterator.Done) {
			return keys, nil
		}
		if err != nil {
			return nil, err
		}
		keys = append(keys, a.Name)
	}
}

var _ driver.Driver = (*Driver)(nil)
