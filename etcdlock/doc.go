// Package etcdlock is dlock's etcd backend (scheme etcd://), built on
// go.etcd.io/etcd/client/v3. Its locks are as strong as etcd's
// linearizable reads and writes: a lock is granted by a Raft-committed
// transaction, and survives the loss of any minority of the cluster's
// members, leader included.
//
// # How a lock works
//
// Every acquisition writes one key under <prefix>/<name>/#, attached to
// the driver's session lease (see below); the key's value is the
// acquisition's random owner value. Among the keys under a name, the one
// with the lowest create revision holds the lock. ('#' cannot occur in
// lock names, so the keys of "a" and "a/b" never mix.)
//
//   - The key is <prefix>/<name>/#<lease ID in hex>, with ".<n>" appended
//     while the same driver holds or awaits the same name n times over.
//     A process that takes a name again and again thus writes the same
//     key, as etcd's concurrency.Mutex does: a new key name per
//     acquisition would leave an index entry under the name until the
//     server compacts, and every acquisition reads that whole range.
//   - The fencing token is the holder's create revision: etcd's global
//     revision, which only grows, so every later holder of any name gets a
//     greater token.
//   - An uncontended acquisition is one transaction: "count the keys
//     under the name, put mine", the lock granted when there were none.
//     TryAcquire's is "if no key exists under the name, put mine": on a
//     held lock it writes nothing.
//   - A waiting Acquire's key is queued by that same transaction; it then
//     reads the key just before it (by create revision), off etcd's apply
//     loop, which would otherwise read the whole queue for every waiter
//     queued (see docs/ETCD.md, "Long queues"). It watches only that
//     key's deletion, so a release wakes one waiter, not all.
//     After each deletion it reads, in one request, whether its own key
//     still exists with its create revision — which proves its lease alive
//     — and whether an older key is left. A waiter never reports a lock
//     whose lease has expired (the fault etcd-io/etcd#11456 and #19597
//     describe); if its key or session is gone, it queues again with a
//     live session. That read is serializable, at the revision the watch
//     reported: state at a committed revision is the same on every member
//     that applied it, so the handoff costs no round of Raft. A member
//     that has not applied that revision yet answers with an error, and the
//     waiter reads linearizably instead.
//   - etcd registers a new watch at its revision + 1 after reading that
//     revision; a write landing in between leaves the watch "unsynced",
//     and etcd catches such watches up only every 100ms. So for its first
//     110ms, unless a read shows no write slipped in, a waiter also probes
//     its predecessor with a serializable read at 5, 10, 20, 40, 80 and
//     110ms. Without the probes, about 1.5% of handoffs under contention
//     took 75-100ms.
//   - Release deletes the key. A key slot is reused only once its key is
//     known gone and no deletion of it is in flight, so the deletion needs
//     no condition. A cancelled or timed-out Acquire deletes its key before
//     it returns; a deletion that fails is retried at the session's next
//     keep-alive.
//
// # Other kinds of locks
//
// The driver implements driver.Moder for every mode (in LayoutDlock; see
// Layouts for LayoutConcurrency) and driver.Elector.
// Readers-writer locks, semaphores and elections queue keys exactly as the
// mutex does, on the same sessions, each kind under a prefix of its own:
// <prefix>/#rw/<name>/#, <prefix>/#sem/<name>/# and
// <prefix>/#elect/<name>/#. ('#' cannot occur in names, so the mutex "x"
// and these never share a key range.) Refresh, loss and release are the
// mutex's; a waiter's re-check after each wake-up proves its key and
// lease alive, as the mutex's does.
//
//   - Readers-writer lock: a reader's key is "r<lease>", a writer's
//     "w<lease>", so the write keys are a range of their own. A writer
//     holds when its key is the oldest and waits for the key just ahead of
//     it, of either kind; a reader holds when no write key is older than
//     its own and waits for the newest older write key. Waiters are served
//     in order of arrival, a waiting writer blocks the readers after it,
//     and the readers between two writers are admitted together.
//     TryAcquireRead fails while any write key exists.
//   - Semaphore: a key holds a permit when fewer than Limit keys are older.
//     The first waiter (Limit keys ahead) watches the semaphore's whole
//     prefix for deletions; each later waiter watches only the key just
//     ahead of it, for its deletion or a put. A waiter admitted puts its
//     key again, which tells the next waiter it is now first. Watching
//     the key Limit places ahead would miss releases: holders leave in
//     any order. TryAcquirePermit on a full semaphore writes its key and
//     deletes it (etcd's comparisons cannot count keys).
//   - Election: the mutex, with the candidate's value in its key. Leader
//     reads the oldest key; Observe watches the prefix and reads the
//     leader again only when an event can change it.
//
// Tokens: a mutex's or a leader's token is its key's create revision, as
// only the oldest key holds. Readers and permits are not granted in
// create-revision order (a reader that arrives once a writer has gone
// holds at once, before an older reader has woken), so a reader, writer
// or permit holder that waited puts its key again when admitted, and its
// token is the revision of that put; one granted at once has its key's
// create revision. Either is a revision the grant wrote, so tokens are
// distinct and grow with the order of grants.
//
// # Layouts
//
// Options.Layout (URL parameter layout) chooses the format of the keys.
// LayoutDlock, the default, is the format described above. With
// LayoutConcurrency the driver writes exactly the keys of etcd's
// concurrency package (concurrency.Mutex, concurrency.Election), which
// `etcdctl lock` and `etcdctl elect` use too, so that dlock and they
// exclude each other on one name and agree on one leader. The two
// layouts do not exclude each other: every client of a name must use the
// same one. (On one prefix they half-see each other: LayoutDlock's key
// <prefix>/x/#<lease> lies under LayoutConcurrency's queue <prefix>/x/,
// so the concurrency side waits for it, but LayoutDlock reads only
// <prefix>/x/# and ignores the concurrency side's keys.)
//
// What the concurrency package calls a lock's prefix (pfx in
// concurrency.NewMutex(s, pfx), NAME in `etcdctl lock NAME`) is the
// driver's prefix and the lock's name joined by a slash, unless the
// prefix is empty or ends with one. The prefix is taken as given, the
// empty one included; in a URL it is the path without the slash that
// ends the host part:
//
//	URL path (?layout=concurrency)  prefix   name      concurrency's pfx   its peer
//	"" or "/"                       ""       jobs/x    jobs/x              etcdctl lock jobs/x
//	"//"                            "/"      my-lock   /my-lock            concurrency.NewMutex(s, "/my-lock")
//	"/app" or "/app/"               "app"    x         app/x               etcdctl lock app/x
//
// On the store, for the lock or election called name, with pfx as above:
//
//   - every holder and waiter has one key, pfx/<lease>, where <lease> is
//     its session lease's ID in lower-case hex (fmt's %x), attached to
//     that lease. A driver that holds or awaits the name n times over
//     adds pfx/<lease>.<n> (n = 1, 2, ...): its acquisitions exclude one
//     another, and the concurrency package, which counts every key under
//     pfx/, sees each as a holder or waiter of its own;
//   - a mutex's key holds the empty value, as concurrency.Mutex writes; a
//     candidate's key holds its value (its proposal);
//   - the key with the lowest create revision under pfx/ holds the lock
//     or leads; a waiter waits for the keys under pfx/ created before its
//     own. The fencing token is the holder's create revision, as in
//     LayoutDlock. (etcdctl lock hands its command ETCD_LOCK_REV, the
//     revision at which it got the lock: the create revision of
//     ETCD_LOCK_KEY only when it did not wait. To fence dlock holders
//     and etcdctl lock's commands on one resource, use that key's create
//     revision.)
//
// The format has no room for the rest, so in this layout:
//
//   - the mutex and the election of one name are one queue, as `etcdctl
//     lock x` and `etcdctl elect x` are: a mutex holder is the election's
//     leader (with the empty value), and a candidate holds the mutex;
//   - readers-writer locks and semaphores are unsupported: Supports
//     reports false and their methods fail with dlock.ErrUnsupported;
//   - names nest: the keys of "a/b" lie under "a/", so a holder or an
//     older waiter of "a/b" keeps "a" from being taken (and the
//     concurrency package behaves the same), while "a" does not block
//     "a/b". Do not use a name and a name below it in this layout;
//   - Inspect lists every queue as a mutex: the keys do not tell a
//     mutex's from an election's. It counts only keys of the form above
//     (a valid name, a lease, the lease's hex), and gives the owner of
//     the driver's own locks, "lease <hex>" for the others'. Without a
//     prefix, it reads the names of every key in the store.
//
// With RBAC, the role needs readwrite on each lock's range pfx/ (with a
// prefix, on the prefix: --prefix=true readwrite app). With the empty
// prefix, Open's first read is of the key "/", and a permission denial
// there does not fail Open: each acquisition checks its own range.
//
// # Sessions and TTL
//
// A driver keeps one lease (a session) per lock TTL in use, and attaches
// the keys of every acquisition with that TTL to it, so that taking a lock
// needs no lease grant. The driver keeps the lease alive itself, every
// third of its TTL; dlock's watchdog does not renew etcd locks (their
// Lease.Expires is the zero time), and WithAutoRenew(false) changes
// nothing: a lock is held until it is released, or until its session is
// lost. A process that dies without releasing frees its locks once its
// lease expires: after the TTL.
//
// etcd leases count whole seconds: a TTL is rounded up to seconds, and
// the server raises it to its minimum, 1.5 × its election timeout rounded
// up (2s with etcd's default 1s election timeout). etcd checks for
// expired leases every 500ms, so a crashed holder's lock is free between
// TTL and TTL + 0.5s after its last keep-alive.
//
// # Loss
//
// A lease's validity is counted from the moment each successful
// keep-alive was sent, not from its reply, so the driver's count ends no
// later than the server's. When no keep-alive succeeds until 2% of the TTL
// (plus 5ms) before that end, or a keep-alive finds the lease gone
// (expired or revoked), the session ends: the Done of every dlock lease
// on it closes and Err matches dlock.ErrLost, before the server can give
// the lock to anyone else. That deadline is also each grant's
// driver.Grant.Check, which dlock consults at every Lease.Err: the clock
// is compared with it at the call, so a holder whose goroutines did not
// run meanwhile (a process resumed after a SIGSTOP longer than the TTL, a
// stalled scheduler) sees the loss at its first look, before the
// session's goroutine has noticed; a keep-alive answered after such a
// look no longer revives the session. The driver also checks after each keep-alive, in one read,
// that the keys of its held locks still exist, so a key deleted behind
// the holder's back (by an operator) is reported lost within a third of
// the TTL; nothing can make that case safe before the fact.
//
// # URL
//
//	etcd://host1:2379,host2:2379,host3:2379/prefix?dial_timeout=5s&request_timeout=1s
//	etcds://user:password@host1:2379,host2:2379/prefix?cacert=/etc/dlock/ca.pem&cert=/etc/dlock/client.pem&key=/etc/dlock/client-key.pem
//
// The host part is a comma-separated list of endpoints (host or
// host:port, port 2379 by default; 127.0.0.1:2379 when empty). The path,
// without its slashes, is the key prefix (Options.Prefix), "dlock" when
// empty; with layout=concurrency, the path without its first slash, so
// that it can be empty. etcds:// (or tls=true) speaks TLS to every endpoint; user
// information is the etcd user and password the client authenticates as
// (RBAC). Parameters:
//
//	dial_timeout=5s     how long Open waits for a member to answer
//	                    (DefaultDialTimeout); a duration above zero. A
//	                    shorter deadline of Open's context ends the wait
//	                    first; the error then says so
//	request_timeout=1s  how long each request may take before the driver
//	                    tries again (Options.RequestTimeout,
//	                    DefaultRequestTimeout); a duration above zero
//	layout=dlock        the key format (Options.Layout): dlock, the
//	                    driver's own, or concurrency, that of etcd's
//	                    concurrency package and etcdctl lock/elect (see
//	                    Layouts, which also says how the path maps to the
//	                    prefix then)
//
//	tls=false           TLS on an etcd:// URL (etcds:// always uses it)
//	cacert=             PEM file of the authorities to trust; default the system's
//	cert=, key=         PEM files of the client's certificate and key, for members
//	                    started with --client-cert-auth
//	server_name=        the name the members' certificates must carry; default
//	                    the host dialled
//	insecure_skip_verify=false   accept any certificate: for tests only
//
// and dlock's shared ones, ttl and renew (renew has no effect here). For
// example, etcd://127.0.0.1:2379/jobs?ttl=10s, or
// etcd://127.0.0.1:2379?layout=concurrency for the locks of `etcdctl
// lock NAME`. The certificate files are read when the URL is opened; a
// missing or unreadable one, and a layout other than dlock or
// concurrency, is a *dlock.ParamError naming its parameter. For anything else a
// *clientv3.Client can do, configure one and use New.
//
// # Securing the store
//
// With authentication on, give dlock a user whose role may read and write
// its prefix's key range and nothing else:
//
//	etcdctl role add locks
//	etcdctl role grant-permission locks --prefix=true readwrite dlock
//	etcdctl user add locks
//	etcdctl user grant-role locks locks
//
// (the range "dlock" covers the key "dlock" that Open reads and every
// "dlock/..." key of the locks). Leases and watches need no permission of
// their own; a watch needs read on its range, which the role gives. Over
// a network, use etcds:// and, when the members require client
// certificates (--client-cert-auth), cert and key. A user whose role
// does not cover the prefix fails Open with "permission denied" naming
// the user; a TLS failure (an unknown authority, a missing client
// certificate), which the etcd client reports as a timeout, is named in
// Open's error, and so is a plain URL that reached a TLS member.
// TestSecured runs the conformance suite through such a user against a
// TLS-only etcd requiring client certificates, and checks each of those
// errors, none of which shows the password.
//
// The driver uses only KV ranges, puts and deletes, transactions with
// range comparisons (etcd 3.3 and later), leases and watches. It is tested
// against etcd 3.4.23, the server Debian ships, through client v3.6.
package etcdlock
