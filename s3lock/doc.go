// Package s3lock is the dlock backend for Amazon S3 and S3-compatible
// object stores: a lock is one object per name, changed only by writes
// the store makes conditional on the object's ETag (If-None-Match: * to
// create, If-Match to replace), over github.com/aws/aws-sdk-go-v2. It
// needs a store that honours those conditions: S3 since 2024-11,
// versitygw, and others; NewDriver refuses one that ignores them.
//
// # Use
//
// From a URL, with the package imported for its side effect:
//
//	import _ "github.com/dlockgo/dlock/s3lock"
//
//	locker, err := dlock.Open(ctx, "s3://my-bucket/locks?region=eu-west-1")
//
// or with a client of your own (New, NewDriver):
//
//	cfg, err := config.LoadDefaultConfig(ctx)
//	locker, err := s3lock.New(ctx, s3.NewFromConfig(cfg), "my-bucket", &s3lock.Options{Prefix: "locks/"})
//
// # URL
//
//	s3://bucket[/prefix][?param=value&...]
//
// The path is the key prefix of the lock objects (Options.Prefix; a
// slash is added). Credentials and, unless given, the region come from
// the AWS SDK's default chain (AWS_ACCESS_KEY_ID and
// AWS_SECRET_ACCESS_KEY, AWS_PROFILE and the shared config files, an
// instance or task role), never from the URL. Parameters, besides dlock's
// own ttl (30s by default, 2s at least), renew, and poll_min and
// poll_max (the bounds of a waiter's polls, 2ms and 250ms by default):
//
//	region=        the bucket's region
//	endpoint=      the store's URL, for S3-compatible stores (http://127.0.0.1:7070)
//	path_style=false  bucket in the path, not the host name: most S3-compatible stores want true
//	probe=true     check at Open that the store refuses failed conditions (Options.NoProbe)
//
// # How a lock works
//
// The lock "x" is the object <prefix>mutex/x (a slash in a name is
// written %2F), whose JSON body holds the owner, the fencing token and
// the TTL. An acquisition reads it and, if it is missing, free, or
// expired, writes the holder's record on the condition that the object
// is still as read: of two racing acquirers one succeeds. Expiry is
// judged on the store's clock (the object's Last-Modified plus the TTL,
// plus a second for the precision of HTTP dates, against the response's
// Date), so that clients' clocks need not agree; the holder counts its
// lease from before its write, on its own clock, less 1%. Renewal and
// release are writes on the ETag of the holder's last write; release
// leaves a free record, which keeps the token counter. A token is the
// last one plus one; a missing object (a new name, or one an operator
// deleted) is created one second after the read that found it missing,
// with that second in microseconds as its token, above every token of
// an earlier object of the name: the first acquisition of a name takes
// a second longer. See internal/objlock.
//
// Waiting is polling (S3 cannot notify): Acquire retries with the
// Locker's backoff (WithBackoff), never later than the holder's expiry.
// Requests: an uncontended acquisition is a GET and a PUT, a renewal one
// PUT (a GET more for a lock resumed from a handle), a release one PUT,
// a waiter a GET per retry. Only the mutex and multi-locks are
// supported: readers-writer locks, semaphores and elections return
// dlock.ErrUnsupported.
//
// # Settings of the bucket
//
// Versioning, lifecycle rules, storage classes and the least privileges
// the driver needs are in docs/OBJECTSTORES.md of the module's
// repository, under "Settings".
package s3lock
