/*
 * log.h - leveled logging to stderr, shared by the engine, the daemon and the tools (the
 * functions are libnessie's, base/log.c; the short macros are for the project's own code).
 *
 * One line per message: "<time> <program>[<pid>] <level>: <text>". The level comes from
 * nessie_log_set_level() or, if never set, from NESSIE_LOG (error|warn|info|debug; default info).
 * Safe from any thread; never allocates, so it can be called on out-of-memory paths.
 */
#ifndef NESSIE_BASE_LOG_H
#define NESSIE_BASE_LOG_H

enum nessie_log_level {
    NESSIE_LOG_ERROR = 0,
    NESSIE_LOG_WARN = 1,
    NESSIE_LOG_INFO = 2,
    NESSIE_LOG_DEBUG = 3,
};

void nessie_log_set_level(enum nessie_log_level level);
/* Parse "error", "warn", "info", "debug". Returns -1 for anything else. */
int nessie_log_parse_level(const char *name);
int nessie_log_enabled(enum nessie_log_level level);
void nessie_log(enum nessie_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#define log_error(...) nessie_log(NESSIE_LOG_ERROR, __VA_ARGS__)
#define log_warn(...) nessie_log(NESSIE_LOG_WARN, __VA_ARGS__)
#define log_info(...) nessie_log(NESSIE_LOG_INFO, __VA_ARGS__)
#define log_debug(...) \
    do { if (nessie_log_enabled(NESSIE_LOG_DEBUG)) nessie_log(NESSIE_LOG_DEBUG, __VA_ARGS__); } while (0)

#endif
