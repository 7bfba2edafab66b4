/*
 * clockshim: an LD_PRELOAD library that shifts a process's wall clock
 * (CLOCK_REALTIME, gettimeofday, time) by a rule the test sets at run
 * time, for the safety suite's clock faults. Monotonic clocks are left
 * alone.
 *
 * The rule lives in a small file named by DLOCK_CLOCK_FILE, mapped shared:
 *
 *   fake(t) = t + offset + (t - base) * (rate - 1)
 *
 * with a sequence number the writer makes odd while it writes (a seqlock),
 * so that a reader never mixes two rules. The real time comes from the
 * clock_gettime system call, not from libc: calling back into libc (as
 * dlsym would) allocates, and an allocator that reads the clock while it
 * starts (redis-server's jemalloc) would then recurse.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

struct rule {
	uint64_t seq;
	int64_t base;
	int64_t offset;
	double rate;
};

static struct rule *rule;

__attribute__((constructor)) static void load(void)
{
	const char *path = getenv("DLOCK_CLOCK_FILE");
	if (path == NULL)
		return;
	int fd = open(path, O_RDONLY);
	if (fd < 0)
		return;
	void *m = mmap(NULL, sizeof(struct rule), PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (m != MAP_FAILED)
		rule = m;
}

static int64_t shift(int64_t ns)
{
	if (rule == NULL)
		return ns;
	uint64_t s1, s2;
	int64_t base, offset;
	double rate;
	do {
		s1 = __atomic_load_n(&rule->seq, __ATOMIC_ACQUIRE);
		base = __atomic_load_n(&rule->base, __ATOMIC_RELAXED);
		offset = __atomic_load_n(&rule->offset, __ATOMIC_RELAXED);
		uint64_t r = __atomic_load_n((uint64_t *)&rule->rate, __ATOMIC_RELAXED);
		__builtin_memcpy(&rate, &r, sizeof rate);
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		s2 = __atomic_load_n(&rule->seq, __ATOMIC_RELAXED);
	} while (s1 != s2 || (s1 & 1));
	if (rate == 0)
		rate = 1;
	return ns + offset + (int64_t)((double)(ns - base) * (rate - 1));
}

int clock_gettime(clockid_t id, struct timespec *ts)
{
	long r = syscall(SYS_clock_gettime, id, ts);
	if (r == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) {
		int64_t ns = shift((int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec);
		ts->tv_sec = ns / 1000000000;
		ts->tv_nsec = ns % 1000000000;
	}
	return (int)r;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz)
{
	(void)tz;
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	tv->tv_sec = ts.tv_sec; /* glibc declares tv nonnull */
	tv->tv_usec = ts.tv_nsec / 1000;
	return 0;
}

time_t time(time_t *t)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	if (t != NULL)
		*t = ts.tv_sec;
	return ts.tv_sec;
}
