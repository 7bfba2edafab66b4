// Curator is the interop tests' Apache Curator side: it takes locks with
// Curator's own recipes and marks the shared resource (see
// interop/holders_test.go) while it holds them.
//
//   java Curator loop CONNECT KIND PATH ROUNDS DIR WHO HOLD_MS
//       takes the lock ROUNDS times, holding it HOLD_MS each time
//   java Curator hold CONNECT KIND PATH DIR WHO
//       takes the lock once, prints "acquired", holds it until a line
//       arrives on stdin, then releases it and prints "released"
//   java Curator try CONNECT KIND PATH WAIT_MS
//       tries the lock for WAIT_MS, prints "acquired" or "busy", releases
//   java Curator leader CONNECT PATH
//       prints the id of LeaderLatch's current leader at PATH ("" if none)
//
// KIND is mutex (InterProcessMutex), read or write (the two sides of
// InterProcessReadWriteLock) or latch (LeaderLatch, with WHO as its id).
// Sessions time out after 2 s, so a killed holder's lock frees soon.
import java.io.BufferedReader;
import java.io.File;
import java.io.FileWriter;
import java.io.InputStreamReader;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.locks.InterProcessLock;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.retry.RetryNTimes;

public class Curator {
    public static void main(String[] args) throws Exception {
        String cmd = args[0];
        CuratorFramework client = CuratorFrameworkFactory.newClient(args[1], 2000, 5000, new RetryNTimes(50, 100));
        client.start();
        client.blockUntilConnected();
        switch (cmd) {
            case "loop": {
                Resource r = new Resource(args[5], args[6]);
                int rounds = Integer.parseInt(args[4]);
                long hold = Long.parseLong(args[7]);
                if (args[2].equals("latch")) {
                    throw new IllegalArgumentException("loop takes a lock kind, not latch");
                }
                InterProcessLock lock = lock(client, args[2], args[3]);
                for (int i = 0; i < rounds; i++) {
                    lock.acquire();
                    r.enter(args[2].equals("read"));
                    Thread.sleep(hold);
                    r.exit(args[2].equals("read"));
                    lock.release();
                }
                break;
            }
            case "hold": {
                Resource r = new Resource(args[4], args[5]);
                BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
                if (args[2].equals("latch")) {
                    LeaderLatch latch = new LeaderLatch(client, args[3], args[5]);
                    latch.start();
                    latch.await();
                    r.enter(false);
                    say("acquired");
                    in.readLine();
                    r.exit(false);
                    latch.close();
                } else {
                    InterProcessLock lock = lock(client, args[2], args[3]);
                    lock.acquire();
                    r.enter(args[2].equals("read"));
                    say("acquired");
                    in.readLine();
                    r.exit(args[2].equals("read"));
                    lock.release();
                }
                say("released");
                break;
            }
            case "try": {
                InterProcessLock lock = lock(client, args[2], args[3]);
                if (lock.acquire(Long.parseLong(args[4]), TimeUnit.MILLISECONDS)) {
                    say("acquired");
                    lock.release();
                } else {
                    say("busy");
                }
                break;
            }
            case "leader": {
                LeaderLatch latch = new LeaderLatch(client, args[2], "observer");
                // getLeader reads the participants without joining.
                say(latch.getLeader().getId());
                break;
            }
            default:
                throw new IllegalArgumentException("unknown command " + cmd);
        }
        client.close();
    }

    static InterProcessLock lock(CuratorFramework client, String kind, String path) {
        switch (kind) {
            case "mutex":
                return new InterProcessMutex(client, path);
            case "read":
                return new InterProcessReadWriteLock(client, path).readLock();
            case "write":
                return new InterProcessReadWriteLock(client, path).writeLock();
        }
        throw new IllegalArgumentException("unknown kind " + kind);
    }

    static void say(String s) {
        System.out.println(s);
        System.out.flush();
    }

    // Resource marks the shared directory as interop/holders_test.go does.
    static class Resource {
        final Path dir;
        final String who;
        int n;

        Resource(String dir, String who) {
            this.dir = Paths.get(dir);
            this.who = who;
        }

        void enter(boolean shared) throws Exception {
            if (shared) {
                Files.createDirectories(dir.resolve("readers"));
                Files.createDirectory(dir.resolve("readers").resolve(who + "-" + (n++)));
                if (Files.exists(dir.resolve("held"))) {
                    append("overlaps");
                }
            } else {
                try {
                    Files.createDirectory(dir.resolve("held"));
                } catch (FileAlreadyExistsException e) {
                    append("overlaps");
                }
                File[] readers = dir.resolve("readers").toFile().listFiles();
                if (readers != null && readers.length > 0) {
                    append("overlaps");
                }
            }
            append("log");
        }

        void exit(boolean shared) throws Exception {
            if (shared) {
                Files.delete(dir.resolve("readers").resolve(who + "-" + (n - 1)));
            } else {
                Files.delete(dir.resolve("held"));
            }
        }

        void append(String file) throws Exception {
            try (FileWriter w = new FileWriter(dir.resolve(file).toFile(), true)) {
                w.write(who + "\n");
            }
        }
    }
}
