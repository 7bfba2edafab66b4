"""The interop tests' kazoo side: it takes locks with kazoo's own recipes
and marks the shared resource (see interop/holders_test.go) while it
holds them. Run with Debian's /usr/bin/python3 (python3-kazoo).

    kazoo_peer.py loop CONNECT KIND PATH ROUNDS DIR WHO HOLD_MS
        takes the lock ROUNDS times, holding it HOLD_MS each time
    kazoo_peer.py hold CONNECT KIND PATH DIR WHO
        takes the lock once, prints "acquired", holds it until a line
        arrives on stdin, then releases it and prints "released"
    kazoo_peer.py try CONNECT KIND PATH WAIT_MS
        tries the lock for WAIT_MS, prints "acquired" or "busy", releases
    kazoo_peer.py leader CONNECT PATH
        prints the identifier of the Election's leader at PATH ("" if none)

KIND is mutex (Lock), read or write (ReadLock, WriteLock) or election
(Election, with WHO as its identifier). Sessions time out after 2 s, so a
killed holder's lock frees soon.
"""
import os
import sys
import threading

from kazoo.client import KazooClient
from kazoo.exceptions import LockTimeout


def lock(client, kind, path, who=""):
    if kind == "mutex":
        return client.Lock(path, who)
    if kind == "read":
        return client.ReadLock(path, who)
    if kind == "write":
        return client.WriteLock(path, who)
    raise ValueError("unknown kind " + kind)


class Resource:
    """Marks the shared directory as interop/holders_test.go does."""

    def __init__(self, d, who):
        self.dir, self.who, self.n = d, who, 0

    def append(self, name):
        with open(os.path.join(self.dir, name), "a") as f:
            f.write(self.who + "\n")

    def enter(self, shared):
        if shared:
            os.makedirs(os.path.join(self.dir, "readers"), exist_ok=True)
            os.mkdir(os.path.join(self.dir, "readers", "%s-%d" % (self.who, self.n)))
            self.n += 1
            if os.path.exists(os.path.join(self.dir, "held")):
                self.append("overlaps")
        else:
            try:
                os.mkdir(os.path.join(self.dir, "held"))
            except FileExistsError:
                self.append("overlaps")
            readers = os.path.join(self.dir, "readers")
            if os.path.isdir(readers) and os.listdir(readers):
                self.append("overlaps")
        self.append("log")

    def exit(self, shared):
        if shared:
            os.rmdir(os.path.join(self.dir, "readers", "%s-%d" % (self.who, self.n - 1)))
        else:
            os.rmdir(os.path.join(self.dir, "held"))


def say(s):
    print(s, flush=True)


def main(args):
    cmd = args[0]
    client = KazooClient(hosts=args[1], timeout=2.0)
    client.start(timeout=10)
    try:
        if cmd == "loop":
            kind, path, rounds, d, who, hold = args[2], args[3], int(args[4]), args[5], args[6], int(args[7])
            r, l = Resource(d, who), lock(client, kind, path, who)
            for _ in range(rounds):
                with l:
                    r.enter(kind == "read")
                    threading.Event().wait(hold / 1000)
                    r.exit(kind == "read")
        elif cmd == "hold":
            kind, path, d, who = args[2], args[3], args[4], args[5]
            r = Resource(d, who)
            if kind == "election":
                done = threading.Event()

                def lead():
                    r.enter(False)
                    say("acquired")
                    sys.stdin.readline()
                    r.exit(False)
                    done.set()

                client.Election(path, who).run(lead)
            else:
                l = lock(client, kind, path, who)
                l.acquire()
                r.enter(kind == "read")
                say("acquired")
                sys.stdin.readline()
                r.exit(kind == "read")
                l.release()
            say("released")
        elif cmd == "try":
            l = lock(client, args[2], args[3])
            try:
                l.acquire(timeout=int(args[4]) / 1000)
            except LockTimeout:
                say("busy")
            else:
                say("acquired")
                l.release()
        elif cmd == "leader":
            c = client.Election(args[2]).contenders()
            say(c[0] if c else "")
        else:
            raise ValueError("unknown command " + cmd)
    finally:
        client.stop()
        client.close()


if __name__ == "__main__":
    main(sys.argv[1:])
