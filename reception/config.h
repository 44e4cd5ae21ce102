/*
 * config.h - the reception daemon's configuration: one INI file (glib GKeyFile) for the whole
 * cluster, the same file on every node, plus what the command line overrides.
 *
 * Every key is described once, in config.c's schema (group, key, type, bounds, default, comment):
 * it drives the parsing, the unknown-key errors, the defaults and `reception --print-config`,
 * which writes the whole commented file (reception/nessie.conf is that output, checked by
 * tests/integration/config.sh). Defaults the schema does not give are the engine's own
 * (nessie_config_defaults), so each lives in one place.
 */
#ifndef NESSIE_RECEPTION_CONFIG_H
#define NESSIE_RECEPTION_CONFIG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include <nessie/nessie.h>
#include "sdserver.h"

struct recep_config {
    struct nessie_config engine; /* cluster, table sizes, optimizations; engine.self = --node */
    char cluster[65];
    /* fabric = verbs: [cluster] addresses, one HOST:PORT per node, and device (may be empty). */
    char addr[NESSIE_NODES_MAX][64];
    const char *addr_ptr[NESSIE_NODES_MAX];
    uint32_t naddr;
    char device[64];
    uint32_t workers;      /* threads running requests */
    uint32_t recyclers;    /* background recycling threads */
    uint32_t arena_bytes;  /* per channel */
    uint32_t max_channels; /* per daemon */
    uint32_t spin_us;      /* busy-wait before sleeping, both sides of a channel */
    uint32_t sweep_every_s;/* leak sweep period (0: only after a restart) */
    uint32_t sd_servers;   /* threads serving peers' shipped operations */
    enum recep_sd_poll sd_poll;
    bool no_sd_help;       /* [reception] sd_help = false: workers never serve peers' GETs */
    uint32_t socket_mode;  /* a mode_t's permission bits */
    char socket_name[108]; /* [reception] socket: relative to run_dir unless absolute; %u = node */
    char run_dir[256];
    char socket_path[108]; /* sun_path's size */
    /* The memcached protocol on TCP (tcp.c; issue 32). */
    uint32_t memcached_port;  /* 0: off; node N listens on it + N */
    char memcached_addr[64];
    uint32_t memcached_threads;
    uint32_t max_connections;
    uint32_t idle_timeout_s, partial_timeout_s;
    /* [membership] (issue 28, reception/members.c): who agrees the cluster's view. */
    enum recep_membership { RECEP_MEMBERSHIP_STATIC = 0, RECEP_MEMBERSHIP_ETCD } membership;
    char etcd_endpoints[512]; /* http://HOST:PORT, ... : etcd's v3 gateway */
    uint32_t lease_s;         /* this daemon's etcd lease TTL, seconds */
    /* [flash] path (issue 31); its sizes are engine.flash_*. */
    char flash_path[NESSIE_FLASH_PATH_MAX];
};

/*
 * Fill cfg with the defaults, then the INI file at path (NULL: none), then the overrides in sets
 * (NULL-terminated "GROUP.KEY=VALUE" strings; NULL: none), and check the result as a whole (a
 * verbs cluster needs one address per node...). Returns 0, or -1 after logging one line that
 * names the file (or --set), the group, the key and what is wrong, with the bounds of a number;
 * cfg is then unusable. Never keeps a pointer to path or sets.
 */
int recep_config_load(struct recep_config *cfg, const char *path, const char *const *sets);

/*
 * Settle what depends on the node this daemon plays: engine.self, the run directory (run_dir,
 * else $NESSIE_RUN_DIR, else /tmp/nessie-$UID) and the socket path (socket, else the file's
 * [reception] socket under the run directory). Returns 0, or -1 after logging.
 */
int recep_config_for_node(struct recep_config *cfg, uint32_t node, const char *run_dir,
                          const char *socket);

/*
 * Write cfg as a complete configuration file: every group and key of the schema, each with its
 * comment, its value (keys with no value written as a commented example). Loading the output
 * gives back the same settings. Returns 0, or -1 if out could not be written.
 */
int recep_config_print(const struct recep_config *cfg, FILE *out);

#endif
