/*
 * stats.c - the calls about the servers: memcached_stat and memcached_stat_execute (the daemon's
 * statistics, as if each of the handle's servers gave them), memcached_dump (the keys the node
 * holds), memcached_version and the servers' version getters (which read the versions
 * remembered in common.c).
 *
 * May call: common.h, the core (shim.h) and the channel (channel.h); no other family.
 */
#include <ctype.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include <libmemcached/memcached.h>

#include "channel.h"
#include "common.h"
#include "shim.h"

/* ---- statistics --------------------------------------------------------------------------------- */

/* memcstat's call: the daemon's stats ("STAT name value" lines, memcached's names first, then
 * Nessie's), reported as if they came from the handle's first server. Sub-commands ("slabs",
 * "items"...) are memcached's own: not supported. */
memcached_return_t memcached_stat_execute(memcached_st *memc, const char *args,
                                          memcached_stat_fn func, void *context)
{
    NOT_SERVED(memcached_stat_execute, memc, args, func, context);
    if (!memc || !func)
        return MEMCACHED_INVALID_ARGUMENTS;
    if (args && *args)
        return MEMCACHED_NOT_SUPPORTED;
    const memcached_instance_st *inst = REAL(memcached_server_instance_by_position)(memc, 0);
    if (!inst)
        return MEMCACHED_NO_SERVERS;
    shim_drain_writes(memc);
    char *text;
    int rc = shim_stats(shim_socket_path(), &text);
    if (rc != WIRE_OK)
        return MEMCACHED_CONNECTION_FAILURE;
    memcached_return_t ret = MEMCACHED_SUCCESS;
    char *save = NULL;
    for (char *line = strtok_r(text, "\r\n", &save); line; line = strtok_r(NULL, "\r\n", &save)) {
        if (strncmp(line, "STAT ", 5) != 0)
            continue;
        char *name = line + 5;
        char *sp = strchr(name, ' ');
        if (!sp)
            continue;
        *sp = '\0';
        const char *value = sp + 1;
        if (func(inst, name, strlen(name), value, strlen(value), context) != MEMCACHED_SUCCESS) {
            ret = MEMCACHED_FAILURE;
            break;
        }
    }
    free(text);
    return ret;
}

/* One "STAT name value" of the daemon into st, as the library fills it from a server's answer:
 * memcached's names; Nessie's own have no field and are skipped. */
static void stat_set(memcached_stat_st *st, const char *name, const char *value)
{
    static const struct {
        const char *name;
        size_t off;
        bool wide; /* unsigned long long, else unsigned long */
    } fields[] = {
#define F(n, w) {#n, offsetof(memcached_stat_st, n), w}
        F(connection_structures, false), F(curr_connections, false), F(curr_items, false),
        F(pointer_size, false), F(threads, false), F(time, false), F(total_connections, false),
        F(total_items, false), F(uptime, false), F(bytes, true), F(bytes_read, true),
        F(bytes_written, true), F(cmd_get, true), F(cmd_set, true), F(evictions, true),
        F(get_hits, true), F(get_misses, true), F(limit_maxbytes, true),
#undef F
    };
    unsigned long long v = strtoull(value, NULL, 10);
    if (strcmp(name, "pid") == 0) {
        st->pid = (pid_t)v;
    } else if (strcmp(name, "version") == 0) {
        snprintf(st->version, sizeof(st->version), "%s", value);
    } else if (strcmp(name, "rusage_user") == 0 || strcmp(name, "rusage_system") == 0) {
        bool user = name[7] == 'u';
        const char *dot = strchr(value, '.');
        unsigned long us = dot ? strtoul(dot + 1, NULL, 10) : 0;
        *(user ? &st->rusage_user_seconds : &st->rusage_system_seconds) = (unsigned long)v;
        *(user ? &st->rusage_user_microseconds : &st->rusage_system_microseconds) = us;
    } else {
        for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
            if (strcmp(name, fields[i].name) != 0)
                continue;
            char *f = (char *)st + fields[i].off;
            if (fields[i].wide)
                *(unsigned long long *)(void *)f = v;
            else
                *(unsigned long *)(void *)f = (unsigned long)v;
            break;
        }
    }
}

/* pylibmc's get_stats() and the library's own stats array: one entry per server of the handle,
 * each holding the daemon's stats (every server of the handle is served by this Nessie node),
 * allocated with the handle's allocators so that memcached_stat_free frees it, read with the
 * library's memcached_stat_get_keys and memcached_stat_get_value. Sub-commands ("slabs",
 * "items"...) are memcached's own: NOT SUPPORTED. Without an answer from the daemon, every entry
 * keeps pid -1 and the call says SOME ERRORS, as the library does for servers that fail. */
memcached_stat_st *memcached_stat(memcached_st *ptr, char *args, memcached_return_t *error)
{
    memcached_return_t unused;
    if (!error)
        error = &unused;
    if (!shim_serving() || shim_no_servers(ptr)) {
        if (shim_refusing() && !shim_no_servers(ptr)) {
            *error = MEMCACHED_CONNECTION_FAILURE;
            return NULL;
        }
        return REAL(memcached_stat)(ptr, args, error);
    }
    shim_reconnect_due(ptr);
    if (!ptr) {
        *error = MEMCACHED_INVALID_ARGUMENTS;
        return NULL;
    }
    if (args && *args) {
        *error = MEMCACHED_NOT_SUPPORTED;
        return NULL;
    }
    uint32_t n = REAL(memcached_server_count)(ptr);
    memcached_malloc_fn m;
    memcached_free_fn f;
    memcached_realloc_fn r;
    memcached_calloc_fn c;
    REAL(memcached_get_memory_allocators)(ptr, &m, &f, &r, &c);
    void *actx = REAL(memcached_get_memory_allocators_context)(ptr);
    memcached_stat_st *stats = c ? c(ptr, n, sizeof(*stats), actx) : NULL;
    if (!stats) {
        *error = MEMCACHED_MEMORY_ALLOCATION_FAILURE;
        return NULL;
    }
    for (uint32_t i = 0; i < n; i++) {
        stats[i].pid = -1;
        stats[i].root = ptr;
    }
    shim_drain_writes(ptr);
    char *text;
    if (shim_stats(shim_socket_path(), &text) != WIRE_OK) {
        *error = MEMCACHED_SOME_ERRORS;
        return stats;
    }
    char *save = NULL;
    for (char *line = strtok_r(text, "\r\n", &save); line; line = strtok_r(NULL, "\r\n", &save)) {
        if (strncmp(line, "STAT ", 5) != 0)
            continue;
        char *name = line + 5, *sp = strchr(name, ' ');
        if (!sp)
            continue;
        *sp = '\0';
        stat_set(&stats[0], name, sp + 1);
    }
    free(text);
    for (uint32_t i = 1; i < n; i++)
        stats[i] = stats[0];
    *error = MEMCACHED_SUCCESS;
    return stats;
}

/* ---- dump ------------------------------------------------------------------------------------ */

/* A dump's callbacks and what they answered. */
struct dump_call {
    memcached_st *ptr;
    memcached_dump_fn *fn;
    uint32_t nfn;
    void *context;
    bool failed; /* a callback answered an error (memcached_fatal) */
};

/* One key of the daemon's walk to the callbacks, as the library hands over each key memcached
 * lists: the key ends at its first byte that is not isgraph() (the library parses memcached's
 * "ITEM <key> [...]" line so; a key stored through the binary protocol may hold any byte), NUL
 * terminated; a callback that answers anything but SUCCESS ends this key's callbacks, and the
 * walk goes on. */
static bool dump_key(void *user, const char *key, size_t klen)
{
    struct dump_call *d = user;
    char k[SHIM_KEY_MAX + 1];
    size_t n = 0;
    while (n < klen && isgraph((unsigned char)key[n]))
        n++;
    memcpy(k, key, n);
    k[n] = '\0';
    for (uint32_t i = 0; i < d->nfn; i++) {
        if (!d->fn[i])
            continue;
        memcached_return_t rc = d->fn[i](d->ptr, k, n, d->context);
        if (rc != MEMCACHED_SUCCESS) {
            d->failed |= memcached_fatal(rc);
            break;
        }
    }
    return true;
}

/*
 * memcached_dump (memcdump): the keys of the items the daemon's node holds, which are the values
 * written through it (nessie_dump_local; memcached's dump likewise lists what each server holds,
 * and that node is the one server this process talks to), each once however many servers the
 * handle names. Outcomes and side effects are the library's against memcached:
 * - binary protocol: NOT SUPPORTED, answered here. The library answers so too without talking to
 *   anyone, but a served call is never left to code that could reach a server.
 * - ascii: the library asks the servers' versions first (memcached_version), so the handle's
 *   servers report theirs from then on (shim_versioned_mark); then each key goes to the
 *   callbacks (dump_key), and the result is SUCCESS, or SOME ERRORS if a callback answered an
 *   error.
 * - keys are raw, as memcached lists them and the library reports them: with the namespace
 *   prefix they were stored under, whatever the handle's namespace (none is stripped, no key is
 *   filtered out).
 * A node the daemon could not reach to judge some items makes it SOME ERRORS, after every other
 * key was reported; a daemon without the dump (an older one: unknown op) makes it NOT SUPPORTED.
 * The library's error message for these (memcached_last_error_message) is not set: only the
 * library sets it.
 */
memcached_return_t memcached_dump(memcached_st *ptr, memcached_dump_fn *function, void *context,
                                  uint32_t number_of_callbacks)
{
    NOT_SERVED(memcached_dump, ptr, function, context, number_of_callbacks);
    if (!ptr)
        return MEMCACHED_INVALID_ARGUMENTS;
    if (shim_binary_mode(ptr))
        return MEMCACHED_NOT_SUPPORTED;
    shim_drain_writes(ptr);
    shim_versioned_mark(ptr, true);
    struct shim_ch *ch = shim_channel();
    if (!ch)
        return MEMCACHED_CONNECTION_FAILURE;
    struct dump_call d = {.ptr = ptr, .fn = function, .context = context,
                          .nfn = function ? number_of_callbacks : 0};
    /* The callbacks may make calls on this channel; one that fails must not free it under us. */
    shim_channel_hold(true);
    int rc = shim_ch_dump(ch, 0, 0, dump_key, &d);
    shim_channel_hold(false);
    if (rc == WIRE_E_UNKNOWN_OP)
        return MEMCACHED_NOT_SUPPORTED;
    if (rc != WIRE_OK && rc != WIRE_FABRIC_ERROR)
        return shim_status(rc);
    return d.failed || rc == WIRE_FABRIC_ERROR ? MEMCACHED_SOME_ERRORS : MEMCACHED_SUCCESS;
}

/* ---- versions: the instances that asked are remembered in common.c (shim_versioned_mark) ---- */

memcached_return_t memcached_version(memcached_st *ptr)
{
    NOT_SERVED(memcached_version, ptr);
    shim_drain_writes(ptr);
    shim_versioned_mark(ptr, true);
    return MEMCACHED_SUCCESS;
}

uint8_t memcached_server_major_version(const memcached_instance_st *in)
{
    return shim_serving() && shim_versioned_has(in) ? WIRE_COMPAT_MAJOR
                                                    : REAL(memcached_server_major_version)(in);
}

uint8_t memcached_server_minor_version(const memcached_instance_st *in)
{
    return shim_serving() && shim_versioned_has(in) ? WIRE_COMPAT_MINOR
                                                    : REAL(memcached_server_minor_version)(in);
}

uint8_t memcached_server_micro_version(const memcached_instance_st *in)
{
    return shim_serving() && shim_versioned_has(in) ? WIRE_COMPAT_MICRO
                                                    : REAL(memcached_server_micro_version)(in);
}
