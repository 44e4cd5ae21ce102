/*
 * wire_client.c - build/tests/wire-client: a small client of include/nessie/wire.h for tests and
 * for poking at a daemon by hand, until (and besides) the shim.
 *
 *   wire-client -s SOCK get KEY... | set KEY VALUE | delete KEY | incr KEY N | decr KEY N
 *   wire-client -s SOCK dump [PART [CURSOR]]
 *   wire-client -s SOCK stats
 *   wire-client -s SOCK load --id P --keys K --ops N [--max-value B] [--seed S] [--seconds S]
 *                            [--may-lose]
 *
 * load: this process owns the keys "p<P>-k<i>". It writes, deletes and reads them at random,
 * checks every read against what it was told, survives its daemon's death (it reconnects, and
 * counts the operations cut off as possibly applied), and at the end reads every key back. Its
 * last line: "load: ops=N acked=A unknown=U errors=E reconnects=R violations=V lost=M max_ms=T"
 * (T: the slowest call); exit 1 if V > 0. --seconds stops it after S seconds if --ops has not
 * already; --may-lose accepts a miss of a written value (M counts them: a node lost from the view
 * takes its values along), never an older value.
 *
 * get of several keys: a line each, "KEY VALUE", or "KEY !STATUS" (exit 1 if any failed).
 *
 * dump: the keys of the daemon's node, one a line (shim_ch_dump), each request using PART bytes
 * of the arena at most (default: all of the blocking slot's part), from CURSOR (default 0), so a
 * test can make a walk take many chunks, or send what no client would.
 */
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "channel.h"

static const char *sock_path;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: wire-client -s SOCKET COMMAND ...\n"
            "  get KEY... | set KEY VALUE | delete KEY | incr KEY N | decr KEY N | stats\n"
            "  dump [PART [CURSOR]]\n"
            "  load --id P --keys K --ops N [--max-value BYTES] [--seed S] [--seconds S] "
            "[--may-lose]\n");
}

static struct shim_ch *open_or_die(void)
{
    struct shim_ch *ch;
    int rc = shim_ch_open(sock_path, &ch);
    if (rc != WIRE_OK) {
        fprintf(stderr, "wire-client: %s: %s\n", sock_path,
                rc < 0 ? strerror(-rc) : "refused by the daemon");
        exit(2);
    }
    return ch;
}

static const char *status_name(int rc)
{
    static const char *const names[] = {"OK", "NOT_FOUND", "NOT_STORED", "EXISTS", "NON_NUMERIC",
                                        "TOO_BIG", "NO_MEMORY", "INDEX_FULL", "TIMEOUT",
                                        "BAD_KEY", "INVALID", "FABRIC_ERROR"};
    if (rc >= 0 && rc < (int)(sizeof(names) / sizeof(names[0])))
        return names[rc];
    if (rc < 0)
        return strerror(-rc);
    if (rc == WIRE_E_MALFORMED)
        return "E_MALFORMED";
    if (rc == WIRE_E_UNKNOWN_OP)
        return "E_UNKNOWN_OP";
    return "PROTOCOL_ERROR";
}

static bool print_key(void *user, const char *key, size_t klen)
{
    (void)user;
    fwrite(key, 1, klen, stdout);
    putchar('\n');
    return true;
}

/* ---- load ---------------------------------------------------------------------------------- */

/* What a key may hold: the last acknowledged value (NULL: absent), and values written since by
 * calls whose outcome is unknown (cut off by the daemon's death, or timed out). */
struct model {
    char *acked;
    char **unknown; /* NULL entries stand for a delete */
    size_t nunknown;
};

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static uint64_t rnd_state;
static uint64_t rnd(void)
{
    rnd_state ^= rnd_state << 13;
    rnd_state ^= rnd_state >> 7;
    rnd_state ^= rnd_state << 17;
    return rnd_state;
}

static bool same(const char *a, const char *b, size_t blen)
{
    if (!a)
        return false;
    return strlen(a) == blen && memcmp(a, b, blen) == 0;
}

static void forget_unknown(struct model *m, size_t upto)
{
    for (size_t i = 0; i < upto; i++)
        free(m->unknown[i]);
    if (upto < m->nunknown)
        memmove(m->unknown, m->unknown + upto, (m->nunknown - upto) * sizeof(char *));
    m->nunknown -= upto;
}

static void set_acked(struct model *m, char *v)
{
    free(m->acked);
    m->acked = v;
    forget_unknown(m, m->nunknown); /* an acknowledged write orders everything before it */
}

static void add_unknown(struct model *m, char *v)
{
    m->unknown = realloc(m->unknown, (m->nunknown + 1) * sizeof(char *));
    m->unknown[m->nunknown++] = v;
}

/* --may-lose: the cluster may lose values (a node lost from the view takes the values it held
 * with it, issue 28), so a miss is always an answer a cache may give; counted. A value older
 * than the newest acknowledged one is still a violation. */
static bool may_lose;
static unsigned long lost_reads;

/* Check a read: hit (v, len) or miss (v NULL). Updates the model; returns false on a violation. */
static bool observe(struct model *m, const char *v, size_t len)
{
    if (v ? same(m->acked, v, len) : m->acked == NULL)
        return true;
    if (!v && may_lose) {
        lost_reads++;
        set_acked(m, NULL); /* absent from now on, until written again */
        return true;
    }
    for (size_t i = 0; i < m->nunknown; i++) {
        if (v ? same(m->unknown[i], v, len) : m->unknown[i] == NULL) {
            char *x = m->unknown[i];
            m->unknown[i] = NULL;
            forget_unknown(m, i + 1);
            free(m->acked);
            m->acked = x;
            return true;
        }
    }
    return false;
}

static struct shim_ch *reconnect(unsigned *reconnects)
{
    struct shim_ch *ch;
    for (int i = 0; i < 600; i++) { /* up to a minute: the operator restarts the daemon */
        if (shim_ch_open(sock_path, &ch) == WIRE_OK) {
            (*reconnects)++;
            return ch;
        }
        struct timespec ts = {0, 100 * 1000000};
        nanosleep(&ts, NULL);
    }
    fprintf(stderr, "wire-client: %s: daemon did not come back within a minute\n", sock_path);
    exit(2);
}

static int cmd_load(int argc, char **argv)
{
    unsigned id = 0, keys = 64, max_value = 4096;
    unsigned long ops = 10000, seed = 1, seconds = 0;
    static const struct option lo[] = {{"id", 1, 0, 'i'},        {"keys", 1, 0, 'k'},
                                       {"ops", 1, 0, 'o'},       {"max-value", 1, 0, 'm'},
                                       {"seed", 1, 0, 'S'},      {"seconds", 1, 0, 's'},
                                       {"may-lose", 0, 0, 'L'},  {0, 0, 0, 0}};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (c) {
        case 'i': id = (unsigned)strtoul(optarg, NULL, 0); break;
        case 'k': keys = (unsigned)strtoul(optarg, NULL, 0); break;
        case 'o': ops = strtoul(optarg, NULL, 0); break;
        case 'm': max_value = (unsigned)strtoul(optarg, NULL, 0); break;
        case 'S': seed = strtoul(optarg, NULL, 0); break;
        case 's': seconds = strtoul(optarg, NULL, 0); break;
        case 'L': may_lose = true; break;
        default: usage(stderr); return 2;
        }
    }
    if (keys == 0 || max_value < 32) {
        usage(stderr);
        return 2;
    }
    rnd_state = seed * 0x9e3779b97f4a7c15ULL + id + 1;
    struct model *mod = calloc(keys, sizeof(*mod));
    struct shim_ch *ch = open_or_die();
    unsigned reconnects = 0;
    unsigned long acked = 0, unknown = 0, violations = 0, errors = 0;
    char key[64];
    char *buf = malloc(max_value + 1);
    uint64_t t_start = mono_ns(), max_ns = 0;
    unsigned long n;
    for (n = 0; n < ops; n++) {
        uint64_t t_op = mono_ns();
        if (seconds && t_op - t_start >= seconds * 1000000000ULL)
            break;
        unsigned k = (unsigned)(rnd() % keys);
        struct model *m = &mod[k];
        int klen = snprintf(key, sizeof(key), "p%u-k%u", id, k);
        unsigned dice = (unsigned)(rnd() % 100);
        int rc;
        if (dice < 50) {
            /* Mostly small values; one in 20 up to max_value, to cross the arena in chunks. */
            size_t len = 16 + (size_t)(rnd() % 200);
            if (rnd() % 20 == 0)
                len = 32 + (size_t)(rnd() % (max_value - 31));
            int h = snprintf(buf, max_value + 1, "%u:%u:%lu:", id, k, n);
            for (size_t i = (size_t)h; i < len; i++)
                buf[i] = (char)('a' + (n + i) % 26);
            buf[len > (size_t)h ? len : (size_t)h] = '\0';
            char *v = strdup(buf);
            rc = shim_ch_store(ch, WIRE_SET, key, (size_t)klen, v, strlen(v), k, 0, 0, NULL);
            if (rc == WIRE_OK) {
                set_acked(m, v);
                acked++;
            } else if (rc == WIRE_TIMEOUT || rc < 0) {
                add_unknown(m, v); /* may have taken effect, now or later */
                unknown++;
            } else if (rc == WIRE_TOO_BIG || rc == WIRE_NO_MEMORY) {
                /* Refused for want of room: the daemon takes the old value out, as memcached
                 * does for a SET (reception/channel.c), unless that DELETE failed: a delete
                 * that may have happened. */
                free(v);
                add_unknown(m, NULL);
            } else {
                free(v); /* refused otherwise: changed nothing */
            }
        } else if (dice < 60) {
            rc = shim_ch_delete(ch, key, (size_t)klen);
            if (rc == WIRE_OK || rc == WIRE_NOT_FOUND) {
                if (rc == WIRE_NOT_FOUND && !observe(m, NULL, 0)) {
                    fprintf(stderr, "load: %s: delete said absent, expected a value\n", key);
                    violations++;
                }
                set_acked(m, NULL);
                acked++;
            } else if (rc == WIRE_TIMEOUT || rc < 0) {
                add_unknown(m, NULL);
                unknown++;
            }
        } else {
            struct shim_value v;
            rc = shim_ch_get(ch, key, (size_t)klen, NULL, &v);
            if (rc == WIRE_OK || rc == WIRE_NOT_FOUND) {
                bool ok = rc == WIRE_OK ? observe(m, v.data, v.len) : observe(m, NULL, 0);
                if (!ok) {
                    fprintf(stderr, "load: %s: read %s%.*s%s, which was never written last\n",
                            key, rc == WIRE_OK ? "\"" : "", rc == WIRE_OK ? 40 : 7,
                            rc == WIRE_OK ? (const char *)v.data : "nothing",
                            rc == WIRE_OK ? "\"" : "");
                    violations++;
                }
                if (rc == WIRE_OK)
                    free(v.data);
            }
        }
        if (mono_ns() - t_op > max_ns)
            max_ns = mono_ns() - t_op;
        if (rc < 0) {
            shim_ch_close(ch);
            ch = reconnect(&reconnects);
        } else if (rc != WIRE_OK && rc != WIRE_NOT_FOUND) {
            errors++;
            fprintf(stderr, "load: %s: %s\n", key, status_name(rc));
        }
    }
    /* Read everything back: every acknowledged write still there (or a later unknown one). */
    for (unsigned k = 0; k < keys; k++) {
        int klen = snprintf(key, sizeof(key), "p%u-k%u", id, k);
        struct shim_value v;
        int rc;
        while ((rc = shim_ch_get(ch, key, (size_t)klen, NULL, &v)) < 0) {
            shim_ch_close(ch);
            ch = reconnect(&reconnects);
        }
        bool ok = rc == WIRE_OK ? observe(&mod[k], v.data, v.len)
                                : rc == WIRE_NOT_FOUND && observe(&mod[k], NULL, 0);
        if (!ok) {
            fprintf(stderr, "load: final read of %s: status %d, not what was written\n", key, rc);
            violations++;
        }
        if (rc == WIRE_OK)
            free(v.data);
        free(mod[k].acked);
        forget_unknown(&mod[k], mod[k].nunknown);
        free(mod[k].unknown);
    }
    shim_ch_close(ch);
    free(mod);
    free(buf);
    printf("load: ops=%lu acked=%lu unknown=%lu errors=%lu reconnects=%u violations=%lu "
           "lost=%lu max_ms=%.1f\n", n, acked, unknown, errors, reconnects, violations, lost_reads,
           (double)max_ns / 1e6);
    return violations ? 1 : 0;
}

/* ---- one-shot commands ---------------------------------------------------------------------- */

int main(int argc, char **argv)
{
    int c;
    while ((c = getopt(argc, argv, "+s:h")) != -1) {
        switch (c) {
        case 's': sock_path = optarg; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (!sock_path)
        sock_path = getenv("NESSIE_SOCKET");
    if (!sock_path || optind >= argc) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[optind];
    char **a = argv + optind + 1;
    int na = argc - optind - 1;
    if (strcmp(cmd, "load") == 0)
        return cmd_load(argc - optind, argv + optind);
    if (strcmp(cmd, "stats") == 0) {
        char *text;
        int rc = shim_stats(sock_path, &text);
        if (rc != WIRE_OK) {
            fprintf(stderr, "wire-client: stats: %s\n", status_name(rc));
            return 1;
        }
        fputs(text, stdout);
        free(text);
        return 0;
    }
    struct shim_ch *ch = open_or_die();
    int rc;
    if (strcmp(cmd, "get") == 0 && na > 1) {
        /* Several keys: one line each, "KEY VALUE", or "KEY !STATUS" for one that failed (a
         * test reads many keys in one process: each process start costs seconds in a TCG guest). */
        int failed = WIRE_OK;
        for (int k = 0; k < na; k++) {
            struct shim_value v;
            int r = shim_ch_get(ch, a[k], strlen(a[k]), NULL, &v);
            printf("%s ", a[k]);
            if (r == WIRE_OK) {
                fwrite(v.data, 1, v.len, stdout);
                free(v.data);
            } else {
                printf("!%s", status_name(r));
                failed = r;
            }
            putchar('\n');
        }
        rc = failed;
    } else if (strcmp(cmd, "get") == 0 && na == 1) {
        struct shim_value v;
        rc = shim_ch_get(ch, a[0], strlen(a[0]), NULL, &v);
        if (rc == WIRE_OK) {
            fwrite(v.data, 1, v.len, stdout);
            putchar('\n');
            free(v.data);
        }
    } else if (strcmp(cmd, "set") == 0 && na == 2) {
        rc = shim_ch_store(ch, WIRE_SET, a[0], strlen(a[0]), a[1], strlen(a[1]), 0, 0, 0, NULL);
    } else if (strcmp(cmd, "dump") == 0 && na <= 2) {
        rc = shim_ch_dump(ch, na > 1 ? strtoull(a[1], NULL, 0) : 0,
                          na > 0 ? (uint32_t)strtoul(a[0], NULL, 0) : 0, print_key, NULL);
    } else if (strcmp(cmd, "delete") == 0 && na == 1) {
        rc = shim_ch_delete(ch, a[0], strlen(a[0]));
    } else if ((strcmp(cmd, "incr") == 0 || strcmp(cmd, "decr") == 0) && na == 2) {
        uint64_t r;
        rc = shim_ch_arith(ch, a[0], strlen(a[0]), cmd[0] == 'i', strtoull(a[1], NULL, 10), &r);
        if (rc == WIRE_OK)
            printf("%llu\n", (unsigned long long)r);
    } else {
        usage(stderr);
        shim_ch_close(ch);
        return 2;
    }
    shim_ch_close(ch);
    if (rc != WIRE_OK) {
        fprintf(stderr, "%s\n", status_name(rc));
        return 1;
    }
    return 0;
}
