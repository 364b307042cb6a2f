/* A wall clock offset for one process, loaded with LD_PRELOAD (libfaketime
 * hangs Debian's redis-server 7.0 at start): CLOCK_REALTIME and
 * gettimeofday() are moved by the milliseconds written in the file
 * `clock-skew-ms` of the process's working directory (a redis-server's
 * `dir`), or the file $CLOCK_SKEW_FILE names, read again once a second, so
 * a test skews a running server, or makes its clock jump. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>

static int (*real_clock_gettime)(clockid_t, struct timespec *);
static long long skew_ns;
static time_t read_at = -1;

static void refresh(void) {
    struct timespec mono;
    real_clock_gettime(CLOCK_MONOTONIC, &mono);
    if (mono.tv_sec == read_at) return;
    read_at = mono.tv_sec;
    long long ms = 0;
    const char *path = getenv("CLOCK_SKEW_FILE");
    FILE *f = fopen(path ? path : "clock-skew-ms", "r");
    if (f) {
        if (fscanf(f, "%lld", &ms) != 1) ms = 0;
        fclose(f);
    }
    skew_ns = ms * 1000000LL;
}

int clock_gettime(clockid_t id, struct timespec *ts) {
    if (!real_clock_gettime)
        real_clock_gettime = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT, "clock_gettime");
    int r = real_clock_gettime(id, ts);
    if (r == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) {
        refresh();
        long long ns = (long long)ts->tv_sec * 1000000000LL + ts->tv_nsec + skew_ns;
        ts->tv_sec = ns / 1000000000LL;
        ts->tv_nsec = ns % 1000000000LL;
    }
    return r;
}

int gettimeofday(struct timeval *tv, void *tz) {
    (void)tz;
    struct timespec ts;
    int r = clock_gettime(CLOCK_REALTIME, &ts);
    if (r == 0 && tv) {
        tv->tv_sec = ts.tv_sec;
        tv->tv_usec = ts.tv_nsec / 1000;
    }
    return r;
}

time_t time(time_t *t) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (t) *t = ts.tv_sec;
    return ts.tv_sec;
}
