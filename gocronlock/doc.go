// Package gocronlock runs github.com/go-co-op/gocron/v2 jobs once across
// several instances, with any dlock backend.
//
// Locker implements gocron.Locker: before each run of a job, every
// scheduler asks for the job's lock, and only the one that gets it runs
// the job; the others skip that run. Elector implements gocron.Elector:
// one instance leads and runs every job, the others wait to take over.
//
//	locker, _ := dlock.Open(ctx, "redis://127.0.0.1:6379")
//	s, _ := gocron.NewScheduler(gocron.WithDistributedLocker(gocronlock.New(locker)))
//	s.NewJob(gocron.DurationJob(time.Minute), gocron.NewTask(report), gocron.WithName("report"))
//	s.Start()
//
// # Once per run
//
// gocron releases a job's lock when the job ends. A short job on one
// instance can then end before another instance's timer fires for the
// same run (timers and clocks differ by milliseconds or more), and the
// second instance would run it again. Locker therefore keeps the lock
// for a minimum hold (DefaultMinHold unless WithMinHold says otherwise)
// from the start of the run: set it longer than the spread between the
// instances' timers and shorter than the job's interval, or runs are
// skipped. Give every job a name (gocron.WithName) that is the same on
// every instance: it is the lock's name.
//
// # Lock names
//
// A job's lock is called the prefix + the job's name (the prefix is
// DefaultPrefix unless WithPrefix; Locker.LockName tells). A job name
// that is not a valid dlock name (gocron's default names are Go function
// names, such as "main.(*T).run") is replaced by a digest: the prefix +
// "sha256/" + 32 hex digits.
//
// # Loss
//
// The lock is renewed while the job runs, as every dlock lease is. gocron
// gives the lock no way to stop a running job, so a job that must not
// outlive its lock checks a fencing token of its own, or runs under a
// dlock lease of its own instead.
package gocronlock
