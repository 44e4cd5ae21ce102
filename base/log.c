/* log.c - see log.h. */
#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* -1 until set or read from NESSIE_LOG; relaxed is enough: a level is a hint, not a fence. */
static _Atomic int log_level = -1;

static const char *const level_names[] = {"error", "warn", "info", "debug"};

int nessie_log_parse_level(const char *name)
{
    for (int i = 0; i <= NESSIE_LOG_DEBUG; i++)
        if (name && strcmp(name, level_names[i]) == 0)
            return i;
    return -1;
}

void nessie_log_set_level(enum nessie_log_level level)
{
    atomic_store_explicit(&log_level, (int)level, memory_order_relaxed);
}

int nessie_log_enabled(enum nessie_log_level level)
{
    int cur = atomic_load_explicit(&log_level, memory_order_relaxed);
    if (cur < 0) {
        int parsed = nessie_log_parse_level(getenv("NESSIE_LOG"));
        cur = parsed < 0 ? NESSIE_LOG_INFO : parsed;
        atomic_store_explicit(&log_level, cur, memory_order_relaxed);
    }
    return (int)level <= cur;
}

void nessie_log(enum nessie_log_level level, const char *fmt, ...)
{
    if (!nessie_log_enabled(level))
        return;
    int saved_errno = errno;
    char line[1024];
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    localtime_r(&ts.tv_sec, &tm);
    int n = snprintf(line, sizeof(line), "%02d:%02d:%02d.%03ld %s[%d] %s: ", tm.tm_hour, tm.tm_min,
                     tm.tm_sec, ts.tv_nsec / 1000000L, program_invocation_short_name, (int)getpid(),
                     level_names[level]);
    if (n < 0)
        n = 0;
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
    va_end(ap);
    size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
    if (len > sizeof(line) - 2)
        len = sizeof(line) - 2;
    line[len++] = '\n';
    /* One write(2) per line so lines of concurrent threads and processes never interleave. */
    ssize_t w = write(STDERR_FILENO, line, len);
    (void)w;
    errno = saved_errno;
}
