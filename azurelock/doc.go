// Package azurelock is the dlock backend for Azure Blob Storage: a lock
// is one block blob per name, changed only by writes the service makes
// conditional on the blob's ETag (If-None-Match: * to create, If-Match to
// replace), over github.com/Azure/azure-sdk-for-go/sdk/storage/azblob.
// The design is the one s3lock uses, shared in internal/objlock; NewDriver
// refuses a service that ignores the conditions.
//
// # Use
//
// From a URL, with the package imported for its side effect:
//
//	import _ "github.com/dlockgo/dlock/azurelock"
//
//	locker, err := dlock.Open(ctx, "azblob://my-container/locks")
//
// or with a client of your own (New, NewDriver), for instance one with a
// Microsoft Entra ID credential:
//
//	client, err := azblob.NewClient("https://account.blob.core.windows.net/", cred, nil)
//	locker, err := azurelock.New(ctx, client, "my-container", &azurelock.Options{Prefix: "locks/"})
//
// # URL
//
//	azblob://container[/prefix][?param=value&...]
//
// The path is the name prefix of the lock blobs (Options.Prefix; a slash
// is added). Credentials come from the environment, as the Azure CLI
// names them, never from the URL: AZURE_STORAGE_CONNECTION_STRING, or
// else AZURE_STORAGE_ACCOUNT and AZURE_STORAGE_KEY (a shared key).
// Parameters, besides dlock's own ttl (30s by default, 2s at least),
// renew, and poll_min and poll_max (the bounds of a waiter's polls, 2ms
// and 250ms by default):
//
//	account=       the storage account, instead of AZURE_STORAGE_ACCOUNT
//	endpoint=      the service URL, by default https://<account>.blob.core.windows.net/
//	               (Azurite: http://127.0.0.1:10000/devstoreaccount1); not with a
//	               connection string, which names it
//	probe=true     check at Open that the service refuses failed conditions (Options.NoProbe)
//
// # How a lock works
//
// The lock "x" is the blob <prefix>mutex/x (a slash in a name is written
// %2F), whose JSON body holds the owner, the fencing token and the TTL.
// An acquisition reads it and, if it is missing, free, or expired,
// writes the holder's record on the condition that the blob is still as
// read: of two racing acquirers one succeeds. Expiry is judged on the
// service's clock (the blob's Last-Modified plus the TTL, plus a second
// for the precision of HTTP dates, against the response's Date); the
// holder counts its lease from before its write, on its own clock, less
// 1%. Renewal and release are writes on the ETag of the holder's last
// write; release leaves a free record, which keeps the token counter. A
// token is the last one plus one; a missing blob (a new name, or one an
// operator deleted) is created one second after the read that found it
// missing, with that second in microseconds as its token: the first
// acquisition of a name takes a second longer.
//
// Blob leases, Azure's own locks, are not used: a lease lasts 15 to 60
// seconds or forever, which fits neither a TTL of a few seconds nor one
// of minutes, and an infinite lease outlives a crashed holder. A lease
// would also cost the same requests (a lease call, and a write of the
// token counter into the blob's metadata) for no stronger guarantee. A
// blob under someone else's lease refuses the driver's writes, which then
// count as the lock being held.
//
// Waiting is polling (the service cannot notify): Acquire retries with
// the Locker's backoff (WithBackoff), never later than the holder's
// expiry. Requests: an uncontended acquisition is a Get Blob and a Put
// Blob, a renewal one Put Blob (a Get Blob more for a lock resumed from a
// handle), a release one Put Blob, a waiter a Get Blob per retry. Only
// the mutex and multi-locks are supported: readers-writer locks,
// semaphores and elections return dlock.ErrUnsupported.
//
// # Settings of the storage account
//
// Versioning, lifecycle rules, storage classes and the least privileges
// the driver needs are in docs/OBJECTSTORES.md of the module's
// repository, under "Settings".
package azurelock
