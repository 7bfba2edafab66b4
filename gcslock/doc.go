// Package gcslock is the dlock backend for Google Cloud Storage: a lock
// is one object per name, changed only by writes the store makes
// conditional on the object's generation (ifGenerationMatch=0 to create,
// ifGenerationMatch=<generation> to replace), over
// cloud.google.com/go/storage. The design is the one s3lock uses, shared
// in internal/objlock; NewDriver refuses a store that ignores the
// conditions.
//
// # Use
//
// From a URL, with the package imported for its side effect:
//
//	import _ "github.com/dlockgo/dlock/gcslock"
//
//	locker, err := dlock.Open(ctx, "gs://my-bucket/locks")
//
// or with a client of your own (New, NewDriver):
//
//	client, err := storage.NewClient(ctx)
//	locker, err := gcslock.New(ctx, client, "my-bucket", &gcslock.Options{Prefix: "locks/"})
//
// # URL
//
//	gs://bucket[/prefix][?param=value&...]
//
// The path is the name prefix of the lock objects (Options.Prefix; a
// slash is added). Credentials come from Google's application default
// credentials (GOOGLE_APPLICATION_CREDENTIALS, gcloud's, the metadata
// server), never from the URL; STORAGE_EMULATOR_HOST points the client at
// an emulator. Parameters, besides dlock's own ttl (30s by default, 2s at
// least), renew, and poll_min and poll_max (the bounds of a waiter's
// polls, 2ms and 250ms by default):
//
//	endpoint=      the JSON API's URL, for a store other than Google's
//	probe=true     check at Open that the store refuses failed conditions (Options.NoProbe)
//
// # How a lock works
//
// The lock "x" is the object <prefix>mutex/x (a slash in a name is
// written %2F), whose JSON body holds the owner, the fencing token and
// the TTL. An acquisition reads it and, if it is missing, free, or
// expired, writes the holder's record on the condition that the object's
// generation is still the one read: of two racing acquirers one
// succeeds. Renewal and release are writes on the generation of the
// holder's last write; release leaves a free record, which keeps the
// token counter; a token is the last one plus one.
//
// Expiry is judged on the store's clock: the object's Last-Modified (in
// whole seconds, so a second is added) plus the TTL, against the store's
// time now. The Go client does not tell a response's Date, so the driver
// reckons the store's time from its own writes: each returns the time the
// store gave the object, which lies between the local times before and
// after the write; from there the driver counts on its own clock, 1%
// wider each way for clocks that run at different rates. Without a write
// in the last minute (a driver that only waits), it first writes and
// deletes an object of its own under <prefix>clock/ to measure. The
// holder counts its lease from before its write, on its own clock, less
// 1%. A missing object (a new name, or one an operator deleted) gets the
// latest the store's time may be, in microseconds, as its token, and is
// created once the store's time has passed it (a few milliseconds): above
// every token of an earlier object of the name.
//
// Waiting is polling (the store cannot notify): Acquire retries with the
// Locker's backoff (WithBackoff), never later than the holder's expiry.
// Requests: an uncontended acquisition is a GET (the object's media) and
// a multipart upload, a renewal one upload (a GET more for a lock resumed
// from a handle), a release one upload, a waiter a GET per retry and,
// once a minute, a clock upload and delete. Only the mutex and
// multi-locks are supported: readers-writer locks, semaphores and
// elections return dlock.ErrUnsupported.
//
// # Settings of the bucket
//
// Versioning, lifecycle rules, storage classes and the least privileges
// the driver needs are in docs/OBJECTSTORES.md of the module's
// repository, under "Settings".
package gcslock
