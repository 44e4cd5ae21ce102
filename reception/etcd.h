/*
 * etcd.h - etcd's v3 JSON gateway (POST /v3/...) through libcurl, for the daemon's membership:
 * its views (members.c) and its changes of membership (changes.c). Keys and values are strings;
 * the gateway's base64 is done here. Each call takes the calling thread's CURL handle and tries
 * the endpoints in turn, starting with the one that answered last.
 */
#ifndef NESSIE_RECEPTION_ETCD_H
#define NESSIE_RECEPTION_ETCD_H

#include <curl/curl.h>
#include <glib.h>
#include <json-glib/json-glib.h>
#include <stdint.h>

#include "log.h"

/* Connecting to an endpoint: a listening etcd on a LAN answers in well under this. */
#define ETCD_CONNECT_MS 300

/* Take the endpoints from a comma-separated list of URLs (blanks ignored). Returns 0, or -1
 * when it names none (nothing kept). Before any other call; once, until etcd_close. */
int etcd_open(const char *csv);
void etcd_close(void);

/* The daemon's lease (seconds): a slow endpoint's second wait is at most half of it. */
void etcd_set_lease(uint32_t lease_s);

/* The endpoint to try first (*i: its index), and the report that it failed (the next one is
 * tried first from then on, unless another thread moved on already): for the watcher, which
 * holds a stream rather than calling etcd_call. */
const char *etcd_endpoint(guint *i);
void etcd_endpoint_failed(guint i);

/* POST body to path on the endpoints, starting with the last that answered, and parse the
 * answer; an endpoint that only timed out is asked once more, patiently, after the others (a
 * loaded etcd answers late). Returns the parsed JSON (g_object_unref it), or NULL after logging
 * at `level` what each endpoint said (unreachable, an HTTP error, or not JSON). */
JsonParser *etcd_call(CURL *curl, const char *path, const char *body, enum nessie_log_level level);
/* The answer's root object. */
JsonObject *etcd_root(JsonParser *p);
/* An int64 member of o (0 when absent): the gateway writes them as strings ("42"), proto3 JSON
 * omits zeros. */
int64_t etcd_jint(JsonObject *o, const char *name);
/* Base64 of a string, as the gateway wants keys and values (g_free it). */
char *etcd_b64(const char *s);
/* The end of the range of keys that start with prefix: prefix with its last byte plus one
 * (g_free it). */
char *etcd_prefix_end(const char *prefix);

/* Put key = val, under the etcd lease (it goes when the lease lapses), or none with lease 0.
 * Returns 0, or -1 (logged at level). */
int etcd_put(CURL *curl, const char *key, const char *val, int64_t lease,
             enum nessie_log_level level);

/* Range [key, end) (end NULL: key alone). Calls fn(arg, key, value, mod_revision, lease) for each
 * key (lease: the ID of the etcd lease it is under, 0 for none). Returns 0, or -1 (logged). */
int etcd_range(CURL *curl, const char *key, const char *end,
               void (*fn)(void *arg, const char *k, const char *v, int64_t mod, int64_t lease),
               void *arg);

#endif
