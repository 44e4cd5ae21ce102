/*
 * config.c - parse and check the cluster configuration file (see nessie.conf for every key).
 */
#include "config.h"

#include <errno.h>
#include <glib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"

/* Every key the file may hold, by group: a key not listed is a typo, and an error (a setting
 * silently ignored is worse than a daemon that refuses to start). */
static const char *const known_cluster[] = {
    "name", "nodes", "fabric", "index_slots", "data_bytes", "ways", "filter_bits",
    "max_item_size", "expiration_ms", "op_timeout_ms", "migrate_depth", "addresses", "device",
    "evict", "mode", "sd_slots", NULL};
static const char *const known_opt[] = {"cache", "previous_versions", "multi_read",
                                        "multi_read_bytes", "cache_entries", "cache_bytes", NULL};
static const char *const known_recep[] = {"workers", "recyclers", "arena_bytes", "max_channels",
                                          "spin_us", "sweep_every_s", "socket", "socket_mode",
                                          "sd_servers", "sd_poll", NULL};
static const struct {
    const char *group;
    const char *const *keys;
} known[] = {{"cluster", known_cluster}, {"optimizations", known_opt}, {"reception", known_recep}};

void recep_default_run_dir(char *out, size_t len)
{
    const char *env = getenv("NESSIE_RUN_DIR");
    if (env && *env)
        snprintf(out, len, "%s", env);
    else
        snprintf(out, len, "/tmp/nessie-%u", (unsigned)getuid());
}

static bool listed(const char *const *keys, const char *k)
{
    for (; *keys; keys++)
        if (strcmp(*keys, k) == 0)
            return true;
    return false;
}

static int check_known(GKeyFile *kf, const char *path)
{
    gsize ngroups;
    gchar **groups = g_key_file_get_groups(kf, &ngroups);
    int rc = 0;
    for (gsize g = 0; g < ngroups && rc == 0; g++) {
        const char *const *keys = NULL;
        for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
            if (strcmp(known[i].group, groups[g]) == 0)
                keys = known[i].keys;
        if (!keys) {
            log_error("config %s: unknown group [%s]", path, groups[g]);
            rc = -1;
            break;
        }
        gchar **ks = g_key_file_get_keys(kf, groups[g], NULL, NULL);
        for (gchar **k = ks; k && *k; k++) {
            if (!listed(keys, *k)) {
                log_error("config %s: [%s] has no key \"%s\"", path, groups[g], *k);
                rc = -1;
                break;
            }
        }
        g_strfreev(ks);
    }
    g_strfreev(groups);
    return rc;
}

/* Read an optional unsigned key into *out within [min, max]. Returns 0 (absent: *out unchanged)
 * or -1 after logging. */
static int get_u64(GKeyFile *kf, const char *path, const char *group, const char *key,
                   uint64_t min, uint64_t max, uint64_t *out)
{
    if (!g_key_file_has_key(kf, group, key, NULL))
        return 0;
    gchar *s = g_key_file_get_string(kf, group, key, NULL);
    char *end = NULL;
    errno = 0;
    unsigned long long v = s ? strtoull(s, &end, 0) : 0;
    int rc = 0;
    if (!s || errno || end == s || *end != '\0' || s[0] == '-' || v < min || v > max) {
        log_error("config %s: [%s] %s = \"%s\": expected an integer in %llu..%llu", path, group,
                  key, s ? s : "", (unsigned long long)min, (unsigned long long)max);
        rc = -1;
    } else {
        *out = v;
    }
    g_free(s);
    return rc;
}

static int get_u32(GKeyFile *kf, const char *path, const char *group, const char *key,
                   uint64_t min, uint64_t max, uint32_t *out)
{
    uint64_t v = *out;
    if (get_u64(kf, path, group, key, min, max, &v) != 0)
        return -1;
    *out = (uint32_t)v;
    return 0;
}

static int get_bool(GKeyFile *kf, const char *path, const char *group, const char *key,
                    bool *out)
{
    if (!g_key_file_has_key(kf, group, key, NULL))
        return 0;
    GError *err = NULL;
    gboolean b = g_key_file_get_boolean(kf, group, key, &err);
    if (err) {
        log_error("config %s: [%s] %s: expected true or false (%s)", path, group, key,
                  err->message);
        g_error_free(err);
        return -1;
    }
    *out = b;
    return 0;
}

static int get_str(GKeyFile *kf, const char *path, const char *group, const char *key,
                   char *out, size_t len)
{
    if (!g_key_file_has_key(kf, group, key, NULL))
        return 0;
    gchar *s = g_key_file_get_string(kf, group, key, NULL);
    int rc = 0;
    if (!s || !*s || strlen(s) >= len) {
        log_error("config %s: [%s] %s: expected a non-empty string shorter than %zu bytes", path,
                  group, key, len);
        rc = -1;
    } else {
        snprintf(out, len, "%s", s);
    }
    g_free(s);
    return rc;
}

static void defaults(struct recep_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    nessie_config_defaults(&cfg->engine);
    snprintf(cfg->cluster, sizeof(cfg->cluster), "nessie");
    cfg->engine.nodes = 1;
    cfg->engine.index_slots = 1 << 16;
    cfg->engine.data_bytes = 64ULL << 20;
    cfg->engine.background_recycle = true;
    cfg->workers = 2;
    cfg->recyclers = 1;
    cfg->arena_bytes = 1 << 20;
    cfg->max_channels = 1024;
    cfg->spin_us = 50;
    cfg->sweep_every_s = 0;
    cfg->socket_mode = 0600;
    cfg->sd_servers = 1;
    cfg->sd_poll = RECEP_SD_POLL_ADAPTIVE;
}

int recep_config_load(struct recep_config *cfg, const char *path, uint32_t node,
                      const char *run_dir, const char *socket)
{
    defaults(cfg);
    GKeyFile *kf = g_key_file_new();
    int rc = 0;
    if (path) {
        GError *err = NULL;
        if (!g_key_file_load_from_file(kf, path, G_KEY_FILE_NONE, &err)) {
            log_error("config %s: %s", path, err->message);
            g_error_free(err);
            g_key_file_free(kf);
            return -1;
        }
        rc = check_known(kf, path);
    }
    const char *p = path ? path : "(defaults)";
    struct nessie_config *e = &cfg->engine;
    char fabric[16] = "shm", mode_s[16] = "cd", poll_s[16] = "adaptive";
    char sock[sizeof(cfg->socket_path)] = "";
    uint64_t mode = 0600;
    bool cache = true, prev = true, multi = true, evict = true;
    if (rc == 0)
        rc = get_str(kf, p, "cluster", "name", cfg->cluster, sizeof(cfg->cluster)) |
             get_u32(kf, p, "cluster", "nodes", 1, 1024, &e->nodes) |
             get_str(kf, p, "cluster", "fabric", fabric, sizeof(fabric)) |
             get_u64(kf, p, "cluster", "index_slots", 16, 1ULL << 32, &e->index_slots) |
             get_u64(kf, p, "cluster", "data_bytes", 1 << 20, 1ULL << 36, &e->data_bytes) |
             get_u32(kf, p, "cluster", "ways", 2, 8, &e->ways) |
             get_u32(kf, p, "cluster", "filter_bits", 0, NESSIE_FILTER_BITS_MAX, &e->filter_bits) |
             get_u32(kf, p, "cluster", "max_item_size", 1024, 1U << 30, &e->max_item_size) |
             get_u32(kf, p, "cluster", "expiration_ms", 1, 3600 * 1000, &e->expiration_ms) |
             get_u32(kf, p, "cluster", "op_timeout_ms", 0, 3600 * 1000, &e->op_timeout_ms) |
             get_u32(kf, p, "cluster", "migrate_depth", 0, 64, &e->migrate_depth) |
             get_bool(kf, p, "cluster", "evict", &evict) |
             get_str(kf, p, "cluster", "mode", mode_s, sizeof(mode_s)) |
             get_u32(kf, p, "cluster", "sd_slots", 1, 64, &e->sd_slots) |
             get_u32(kf, p, "reception", "sd_servers", 1, 64, &cfg->sd_servers) |
             get_str(kf, p, "reception", "sd_poll", poll_s, sizeof(poll_s)) |
             get_bool(kf, p, "optimizations", "cache", &cache) |
             get_bool(kf, p, "optimizations", "previous_versions", &prev) |
             get_bool(kf, p, "optimizations", "multi_read", &multi) |
             get_u32(kf, p, "optimizations", "multi_read_bytes", 64, 1U << 30,
                     &e->multi_read_bytes) |
             get_u32(kf, p, "optimizations", "cache_entries", 1, 1U << 24, &e->cache_entries) |
             get_u64(kf, p, "optimizations", "cache_bytes", 4096, 1ULL << 36, &e->cache_bytes) |
             get_u32(kf, p, "reception", "workers", 1, 256, &cfg->workers) |
             get_u32(kf, p, "reception", "recyclers", 1, 64, &cfg->recyclers) |
             get_u32(kf, p, "reception", "arena_bytes", 4096, 1U << 30, &cfg->arena_bytes) |
             get_u32(kf, p, "reception", "max_channels", 1, 1 << 20, &cfg->max_channels) |
             get_u32(kf, p, "reception", "spin_us", 0, 1000000, &cfg->spin_us) |
             get_u32(kf, p, "reception", "sweep_every_s", 0, 1 << 20, &cfg->sweep_every_s) |
             get_str(kf, p, "reception", "socket", sock, sizeof(sock)) |
             get_u64(kf, p, "reception", "socket_mode", 0, 0777, &mode) |
             get_str(kf, p, "cluster", "device", cfg->device, sizeof(cfg->device));
    gsize naddr = 0;
    gchar **addrs = NULL;
    if (rc == 0 && g_key_file_has_key(kf, "cluster", "addresses", NULL)) {
        g_key_file_set_list_separator(kf, ',');
        addrs = g_key_file_get_string_list(kf, "cluster", "addresses", &naddr, NULL);
    }
    g_key_file_free(kf);
    for (gsize i = 0; rc == 0 && addrs && i < naddr; i++) {
        g_strstrip(addrs[i]);
        if (i >= 1024 || strlen(addrs[i]) >= sizeof(cfg->addr[0]) || !strchr(addrs[i], ':')) {
            log_error("config %s: [cluster] addresses: \"%s\": expected HOST:PORT", p, addrs[i]);
            rc = -1;
            break;
        }
        snprintf(cfg->addr[i], sizeof(cfg->addr[i]), "%s", addrs[i]);
        cfg->addr_ptr[i] = cfg->addr[i];
    }
    g_strfreev(addrs);
    if (rc != 0)
        return -1;
    if (strcmp(fabric, "shm") == 0) {
        e->backend = NESSIE_BACKEND_SHM;
    } else if (strcmp(fabric, "verbs") == 0) {
        e->backend = NESSIE_BACKEND_VERBS;
        if (naddr != e->nodes) {
            log_error("config %s: [cluster] fabric = verbs needs addresses = HOST:PORT, ... with "
                      "one entry per node (%u), found %u", p, e->nodes, (unsigned)naddr);
            return -1;
        }
        e->addrs = cfg->addr_ptr;
        e->device = cfg->device[0] ? cfg->device : NULL;
    } else {
        log_error("config %s: [cluster] fabric = \"%s\": expected shm or verbs", p, fabric);
        return -1;
    }
    if (!nessie_mode_parse(mode_s, &e->mode)) {
        log_error("config %s: [cluster] mode = \"%s\": expected cd, sd, hy or auto", p, mode_s);
        return -1;
    }
    if (strcmp(poll_s, "adaptive") == 0) {
        cfg->sd_poll = RECEP_SD_POLL_ADAPTIVE;
    } else if (strcmp(poll_s, "spin") == 0) {
        cfg->sd_poll = RECEP_SD_POLL_SPIN;
    } else {
        log_error("config %s: [reception] sd_poll = \"%s\": expected adaptive or spin", p, poll_s);
        return -1;
    }
    if (node >= e->nodes) {
        log_error("config %s: node %u is not in the cluster ([cluster] nodes = %u)", p, node,
                  e->nodes);
        return -1;
    }
    const char *pct = strchr(sock, '%');
    if (pct && (pct[1] != 'u' || strchr(pct + 1, '%'))) {
        log_error("config %s: [reception] socket = \"%s\": %%u (the node) is the only escape", p,
                  sock);
        return -1;
    }
    if (cfg->arena_bytes % 8) {
        log_error("config %s: [reception] arena_bytes must be a multiple of 8", p);
        return -1;
    }
    e->no_cache = !cache;
    e->no_evict = !evict;
    e->no_prev_versions = !prev;
    e->no_multi_read = !multi;
    e->self = node;
    e->cluster = cfg->cluster;
    cfg->socket_mode = (mode_t)mode;

    if (run_dir)
        snprintf(cfg->run_dir, sizeof(cfg->run_dir), "%s", run_dir);
    else
        recep_default_run_dir(cfg->run_dir, sizeof(cfg->run_dir));
    /* The socket: --socket, else the file's (relative to the run directory, %u = node), else
     * <run_dir>/node<ID>.sock. */
    char tmp[512];
    if (socket) {
        snprintf(tmp, sizeof(tmp), "%s", socket);
    } else {
        char name[sizeof(sock) + 16];
        if (pct)
            snprintf(name, sizeof(name), sock, node); /* checked: one %u at most */
        else if (*sock)
            snprintf(name, sizeof(name), "%s", sock);
        else
            snprintf(name, sizeof(name), "node%u.sock", node);
        if (name[0] == '/')
            snprintf(tmp, sizeof(tmp), "%s", name);
        else
            snprintf(tmp, sizeof(tmp), "%s/%s", cfg->run_dir, name);
    }
    if (strlen(tmp) >= sizeof(cfg->socket_path)) {
        log_error("config %s: socket path %s is longer than a Unix socket path may be (%zu)", p,
                  tmp, sizeof(cfg->socket_path) - 1);
        return -1;
    }
    memcpy(cfg->socket_path, tmp, strlen(tmp) + 1); /* length checked above */
    return 0;
}
