/*
 * etcd.c - etcd's v3 JSON gateway, as the daemon's membership uses it (etcd.h).
 *
 * Apart from members.c (the views) and changes.c (changes of membership) because both speak to
 * etcd the same way, through the same endpoints: one list, and the one that answered last tried
 * first by every thread.
 */
#include "etcd.h"

#include <glib.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#include "log.h"

/* Tunables, with their reasons. */
/* A unary request (grant, keep-alive, range, txn) that takes longer than this is a failure and
 * the next endpoint is tried: far below a lease, so a dead endpoint costs the lease little. */
#define ETCD_REQUEST_MS 500
/* An endpoint that let ETCD_REQUEST_MS pass without answering is taken to be up and slow: once
 * the others were tried, it is asked once more with this much patience, at
 * most half the daemon's lease (etcd_set_lease): an etcd on a loaded host (a member fsyncing
 * its log, a CPU shared with the daemons, the 1-vCPU guests of `make test-rxe`) answers in a
 * second or two, and failing at 500 ms there lost joins and leases that a wait would have kept;
 * a keep-alive that waits half a lease still renews it before it lapses. */
#define ETCD_PATIENT_MS 2000

/* The endpoints: file-static because a daemon speaks to one etcd cluster, from its membership's
 * threads, which share the last endpoint that answered (any of them may move it). */
static struct {
    char **endpoints; /* NULL-terminated, from [membership] endpoints */
    guint nendpoints;
    atomic_uint endpoint; /* the one that answered last: tried first */
    long patient_ms;      /* the second wait (ETCD_PATIENT_MS, or half the lease) */
} gw;

void etcd_set_lease(uint32_t lease_s)
{
    long half = (long)lease_s * 1000 / 2;
    gw.patient_ms = half < ETCD_PATIENT_MS ? half : ETCD_PATIENT_MS;
}

int etcd_open(const char *csv)
{
    gw.endpoints = g_strsplit(csv, ",", -1);
    guint n = 0;
    for (guint i = 0; gw.endpoints[i]; i++) {
        g_strstrip(gw.endpoints[i]);
        if (gw.endpoints[i][0]) /* keep the non-empty ones, in order */
            gw.endpoints[n++] = gw.endpoints[i];
        else
            g_free(gw.endpoints[i]);
    }
    gw.endpoints[n] = NULL;
    gw.nendpoints = n;
    atomic_init(&gw.endpoint, 0);
    gw.patient_ms = ETCD_PATIENT_MS;
    if (n == 0) {
        etcd_close();
        return -1;
    }
    return 0;
}

void etcd_close(void)
{
    g_strfreev(gw.endpoints);
    gw.endpoints = NULL;
    gw.nendpoints = 0;
}

const char *etcd_endpoint(guint *i)
{
    *i = atomic_load(&gw.endpoint);
    return gw.endpoints[*i];
}

void etcd_endpoint_failed(guint i)
{
    atomic_compare_exchange_strong(&gw.endpoint, &i, (i + 1) % gw.nendpoints);
}

static size_t collect(char *data, size_t size, size_t n, void *arg)
{
    g_string_append_len((GString *)arg, data, (gssize)(size * n));
    return size * n;
}

char *etcd_b64(const char *s)
{
    return g_base64_encode((const guchar *)s, strlen(s));
}

char *etcd_prefix_end(const char *prefix)
{
    char *e = g_strdup(prefix);
    e[strlen(e) - 1]++;
    return e;
}

/* One request to endpoint i, waiting at most timeout_ms for its answer. Returns the parsed
 * answer, or NULL with what went wrong appended to errs and *timed_out set when the endpoint
 * let the time pass without answering. */
static JsonParser *ask(CURL *curl, guint i, const char *path, const char *body, long timeout_ms,
                       GString *resp, GString *errs, bool *timed_out)
{
    char *url = g_strconcat(gw.endpoints[i], path, NULL);
    g_string_truncate(resp, 0);
    curl_easy_reset(curl);
    curl_easy_setopt(curl, CURLOPT_URL, url);
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, resp);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, (long)ETCD_CONNECT_MS);
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    CURLcode rc = curl_easy_perform(curl);
    long http = 0;
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &http);
    g_free(url);
    /* Connected or not: curl does not report the connect time of a transfer that timed out
     * (a test on connect time took the second wait from every endpoint, and make test-rxe's
     * guests failed again). A dead endpoint costs the second wait only once all failed. */
    *timed_out = rc == CURLE_OPERATION_TIMEDOUT;
    if (rc != CURLE_OK || http != 200) {
        g_string_append_printf(errs, "%s%s: %s", errs->len ? "; " : "", gw.endpoints[i],
                               rc != CURLE_OK ? curl_easy_strerror(rc) : resp->str);
        if (rc == CURLE_OK && http != 200)
            g_string_append_printf(errs, " (HTTP %ld)", http);
        if (timeout_ms != ETCD_REQUEST_MS)
            g_string_append_printf(errs, " (after %ld ms)", timeout_ms);
        return NULL;
    }
    JsonParser *p = json_parser_new();
    if (!json_parser_load_from_data(p, resp->str, (gssize)resp->len, NULL) ||
        !JSON_NODE_HOLDS_OBJECT(json_parser_get_root(p))) {
        g_string_append_printf(errs, "%s%s: not a JSON object: %.80s", errs->len ? "; " : "",
                               gw.endpoints[i], resp->str);
        g_object_unref(p);
        return NULL;
    }
    return p;
}

JsonParser *etcd_call(CURL *curl, const char *path, const char *body,
                        enum nessie_log_level level)
{
    GString *resp = g_string_new(NULL);
    GString *errs = g_string_new(NULL);
    guint first = atomic_load(&gw.endpoint);
    JsonParser *p = NULL;
    /* Each endpoint briefly, from the one that answered last; then once more, patiently, each
     * that only timed out (ETCD_PATIENT_MS). slow: bit k for endpoint first + k. */
    uint64_t slow = 0;
    guint i = first;
    for (guint k = 0; k < gw.nendpoints && !p; k++) {
        bool timed_out;
        i = (first + k) % gw.nendpoints;
        p = ask(curl, i, path, body, ETCD_REQUEST_MS, resp, errs, &timed_out);
        if (!p && timed_out && k < 64)
            slow |= 1ULL << k;
    }
    for (guint k = 0; k < gw.nendpoints && k < 64 && !p; k++) {
        bool timed_out;
        i = (first + k) % gw.nendpoints;
        if (slow >> k & 1)
            p = ask(curl, i, path, body, gw.patient_ms, resp, errs, &timed_out);
    }
    if (p)
        atomic_store(&gw.endpoint, i);
    else
        nessie_log(level, "members: etcd %s failed at every endpoint: %s", path, errs->str);
    g_string_free(resp, TRUE);
    g_string_free(errs, TRUE);
    return p;
}

JsonObject *etcd_root(JsonParser *p)
{
    return json_node_get_object(json_parser_get_root(p));
}

int64_t etcd_jint(JsonObject *o, const char *name)
{
    if (!o || !json_object_has_member(o, name))
        return 0;
    JsonNode *n = json_object_get_member(o, name);
    if (!JSON_NODE_HOLDS_VALUE(n))
        return 0;
    if (json_node_get_value_type(n) == G_TYPE_STRING)
        return g_ascii_strtoll(json_node_get_string(n), NULL, 10);
    return json_node_get_int(n);
}

/* Member name of o decoded from base64 into a NUL-terminated string (g_free it), or NULL. */
static char *jb64(JsonObject *o, const char *name)
{
    if (!json_object_has_member(o, name))
        return g_strdup(""); /* proto3 JSON omits an empty value */
    const char *s = json_object_get_string_member(o, name);
    if (!s)
        return NULL;
    gsize len = 0;
    guchar *raw = g_base64_decode(s, &len);
    char *out = g_strndup((const char *)raw, len);
    g_free(raw);
    return out;
}


int etcd_put(CURL *curl, const char *key, const char *val, int64_t lease,
             enum nessie_log_level level)
{
    char *k64 = etcd_b64(key), *v64 = etcd_b64(val);
    char *body = lease ? g_strdup_printf("{\"key\": \"%s\", \"value\": \"%s\", \"lease\": \"%" PRId64
                                         "\"}", k64, v64, lease)
                       : g_strdup_printf("{\"key\": \"%s\", \"value\": \"%s\"}", k64, v64);
    JsonParser *p = etcd_call(curl, "/v3/kv/put", body, level);
    g_free(body), g_free(k64), g_free(v64);
    if (!p)
        return -1;
    g_object_unref(p);
    return 0;
}


int etcd_range(CURL *curl, const char *key, const char *end,
                 void (*fn)(void *arg, const char *k, const char *v, int64_t mod, int64_t lease),
                 void *arg)
{
    char *k64 = etcd_b64(key), *e64 = end ? etcd_b64(end) : NULL;
    char *body = e64 ? g_strdup_printf("{\"key\": \"%s\", \"range_end\": \"%s\"}", k64, e64)
                     : g_strdup_printf("{\"key\": \"%s\"}", k64);
    JsonParser *p = etcd_call(curl, "/v3/kv/range", body, NESSIE_LOG_WARN);
    g_free(body), g_free(k64), g_free(e64);
    if (!p)
        return -1;
    JsonObject *o = etcd_root(p);
    if (json_object_has_member(o, "kvs")) {
        JsonArray *kvs = json_object_get_array_member(o, "kvs");
        for (guint i = 0; kvs && i < json_array_get_length(kvs); i++) {
            JsonObject *kv = json_array_get_object_element(kvs, i);
            char *k = kv ? jb64(kv, "key") : NULL, *v = kv ? jb64(kv, "value") : NULL;
            if (k && v)
                fn(arg, k, v, etcd_jint(kv, "mod_revision"), etcd_jint(kv, "lease"));
            g_free(k), g_free(v);
        }
    }
    g_object_unref(p);
    return 0;
}

