/*
 * config.h - the reception daemon's configuration: one INI file (glib GKeyFile) for the whole
 * cluster, the same file on every node, plus what the command line overrides.
 */
#ifndef NESSIE_RECEPTION_CONFIG_H
#define NESSIE_RECEPTION_CONFIG_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <nessie/nessie.h>
#include "sdserver.h"

struct recep_config {
    struct nessie_config engine; /* cluster, table sizes, optimizations; engine.self = --node */
    char cluster[65];
    /* fabric = verbs: [cluster] addresses, one HOST:PORT per node, and device (may be empty). */
    char addr[1024][64];
    const char *addr_ptr[1024];
    char device[64];
    uint32_t workers;      /* threads running requests */
    uint32_t recyclers;    /* background recycling threads */
    uint32_t arena_bytes;  /* per channel */
    uint32_t max_channels; /* per daemon */
    uint32_t spin_us;      /* busy-wait before sleeping, both sides of a channel */
    uint32_t sweep_every_s;/* leak sweep period (0: only after a restart) */
    uint32_t sd_servers;   /* threads serving peers' shipped operations */
    enum recep_sd_poll sd_poll;
    mode_t socket_mode;
    char run_dir[256];
    char socket_path[108]; /* sun_path's size */
};

/*
 * Fill cfg from the INI file at path (NULL: defaults only) for node `node`; run_dir and socket
 * (either may be NULL) override the file. Returns 0, or -1 after logging one line that names the
 * file, the group, the key and what is wrong; cfg is then unusable.
 */
int recep_config_load(struct recep_config *cfg, const char *path, uint32_t node,
                      const char *run_dir, const char *socket);

/* The run directory when nothing names one: $NESSIE_RUN_DIR, else /tmp/nessie-$UID. */
void recep_default_run_dir(char *out, size_t len);

#endif
