/*
 * main.c - build/reception: the per-node Nessie daemon (DESIGN.md, "reception").
 *
 * Set-up order: configuration, run directory, the node's tables (created, or re-attached after a
 * restart), membership (members.c: the view through etcd, or nothing when static), recycler
 * daemons, SD servers, workers, stats, Receptionist (last: the socket appears only when
 * everything behind it serves), pid file. Tear-down is the same ladder in reverse. SIGTERM and
 * SIGINT stop it cleanly; the tables stay in shared memory for the next start.
 */
#include <errno.h>
#include <fcntl.h>
#include <glib.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define UNW_LOCAL_ONLY
#include <libunwind.h>

#include "config.h"
#include "log.h"
#include "members.h"
#include <nessie/nessie.h>
#include "receptionist.h"
#include "recycler.h"
#include "sdserver.h"
#include "stats.h"
#include "tcp.h"
#include "worker.h"

/* Fatal signals: print the stack with libunwind, then die of the same signal (a core, if
 * enabled, still shows the real cause). Only async-signal-safe calls in here. */
static void fatal_handler(int sig)
{
    char line[256];
    int n = snprintf(line, sizeof(line), "reception[%d]: fatal signal %d (%s); backtrace:\n",
                     (int)getpid(), sig, strsignal(sig));
    if (write(STDERR_FILENO, line, (size_t)n) < 0)
        _exit(128 + sig);
    unw_context_t uc;
    unw_cursor_t cur;
    if (unw_getcontext(&uc) == 0 && unw_init_local(&cur, &uc) == 0) {
        int depth = 0;
        while (unw_step(&cur) > 0 && depth++ < 64) {
            unw_word_t ip = 0, off = 0;
            char fn[160] = "?";
            unw_get_reg(&cur, UNW_REG_IP, &ip);
            unw_get_proc_name(&cur, fn, sizeof(fn), &off);
            n = snprintf(line, sizeof(line), "  #%-2d 0x%016lx %s+0x%lx\n", depth,
                         (unsigned long)ip, fn, (unsigned long)off);
            if (write(STDERR_FILENO, line, (size_t)n) < 0)
                break;
        }
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

static void install_fatal_handlers(void)
{
    static const int sigs[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = fatal_handler;
    sa.sa_flags = SA_RESETHAND | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
        sigaction(sigs[i], &sa, NULL);
}

static int mkdir_p(const char *dir)
{
    char tmp[256];
    snprintf(tmp, sizeof(tmp), "%s", dir);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(tmp, 0700) != 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    if (mkdir(tmp, 0700) != 0 && errno != EEXIST)
        return -1;
    return 0;
}

int main(int argc, char **argv)
{
    gchar *config_path = NULL, *run_dir = NULL, *socket_path = NULL, *log_level = NULL;
    gchar *mode = NULL;
    gchar **sets = NULL;
    gint node = -1;
    gboolean show_version = FALSE, print_config = FALSE;
    GOptionEntry entries[] = {
        {"config", 'c', 0, G_OPTION_ARG_FILENAME, &config_path,
         "Cluster configuration file (INI; see reception/nessie.conf)", "FILE"},
        {"node", 'n', 0, G_OPTION_ARG_INT, &node, "The node this daemon plays (0..nodes-1)", "ID"},
        {"run-dir", 'd', 0, G_OPTION_ARG_FILENAME, &run_dir,
         "Directory for the socket and pid file (default $NESSIE_RUN_DIR, else /tmp/nessie-$UID)",
         "DIR"},
        {"socket", 's', 0, G_OPTION_ARG_FILENAME, &socket_path,
         "Unix socket path (default <run-dir>/node<ID>.sock)", "PATH"},
        {"log-level", 'l', 0, G_OPTION_ARG_STRING, &log_level,
         "error, warn, info (default) or debug", "LEVEL"},
        {"mode", 'm', 0, G_OPTION_ARG_STRING, &mode,
         "Who carries out this node's clients' operations, overriding [cluster] mode: cd (this "
         "node, one-sided), sd (each key's home node), hy (GETs cd, writes sd) or auto (per "
         "operation, the way lately faster)", "MODE"},
        {"set", 'o', 0, G_OPTION_ARG_STRING_ARRAY, &sets,
         "Override a key of the configuration file, e.g. --set cluster.nodes=3 (repeatable)",
         "GROUP.KEY=VALUE"},
        {"print-config", 0, 0, G_OPTION_ARG_NONE, &print_config,
         "Write the configuration (defaults, then --config, then --set) as a complete commented "
         "file on stdout and exit; with neither, the defaults (reception/nessie.conf)", NULL},
        {"version", 'V', 0, G_OPTION_ARG_NONE, &show_version, "Print the version and exit", NULL},
        {NULL, 0, 0, 0, NULL, NULL, NULL}};
    GOptionContext *oc = g_option_context_new("- the Nessie reception daemon of one node");
    g_option_context_set_summary(
        oc, "Owns this node's index and data tables, serves local clients (libdeception.so) on a\n"
            "Unix socket, and runs the Nessie protocol against the cluster.");
    g_option_context_add_main_entries(oc, entries, NULL);
    GError *err = NULL;
    if (!g_option_context_parse(oc, &argc, &argv, &err)) {
        fprintf(stderr, "reception: %s (try --help)\n", err->message);
        g_error_free(err);
        g_option_context_free(oc);
        return 2;
    }
    g_option_context_free(oc);
    if (show_version) {
        printf("reception (nessie) 1, wire version %d\n", WIRE_VERSION);
        return 0;
    }
    if (log_level) {
        int lv = nessie_log_parse_level(log_level);
        if (lv < 0) {
            fprintf(stderr, "reception: --log-level %s: expected error, warn, info or debug\n",
                    log_level);
            return 2;
        }
        nessie_log_set_level((enum nessie_log_level)lv);
    }
    int status = 1;
    /* Large (a verbs cluster's address list): static, this function runs once. */
    static struct recep_config cfg;
    if (print_config) {
        status = recep_config_load(&cfg, config_path, (const char *const *)sets) == 0 &&
                         recep_config_print(&cfg, stdout) == 0
                     ? 0
                     : 1;
        goto out_config;
    }
    if (node < 0) {
        fprintf(stderr, "reception: --node ID is required (try --help)\n");
        status = 2;
        goto out_config;
    }
    install_fatal_handlers();

    if (recep_config_load(&cfg, config_path, (const char *const *)sets) != 0 ||
        recep_config_for_node(&cfg, (uint32_t)node, run_dir, socket_path) != 0)
        goto out_config;
    if (mode && !nessie_mode_parse(mode, &cfg.engine.mode)) {
        log_error("reception: --mode %s: expected cd, sd, hy or auto", mode);
        goto out_config;
    }
    if (mkdir_p(cfg.run_dir) != 0) {
        log_error("reception: cannot create run directory %s: %s", cfg.run_dir, strerror(errno));
        goto out_config;
    }
    /* SIGTERM, SIGINT, SIGHUP are taken by sigwait in this thread only: blocked before any
     * thread starts, so every thread inherits the mask. SIGPIPE: a client gone is an error
     * return, never a death. */
    sigset_t stopset;
    sigemptyset(&stopset);
    sigaddset(&stopset, SIGTERM);
    sigaddset(&stopset, SIGINT);
    sigaddset(&stopset, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &stopset, NULL);
    signal(SIGPIPE, SIG_IGN);

    struct nessie_node *nd;
    cfg.engine.view_wait_ms = members_view_wait_ms(&cfg); /* 0 unless views come (issue 28) */
    if (nessie_node_open(&cfg.engine, &nd) != NESSIE_OK)
        goto out_config;
    /* A node that comes back learns any flush_all it missed before it serves (nessie.h). */
    struct nessie_ctx *first;
    if (nessie_ctx_create(nd, &first) == NESSIE_OK) {
        nessie_flush_catch_up(first);
        nessie_ctx_destroy(first);
    }
    /* The cluster's view (issue 28): joined before anything serves, so the node serves with the
     * view it registered in; with [membership] mode = static this does nothing. */
    int joined = members_start(&cfg, nd);
    if (joined == MEMBERS_NEW_TABLES) {
        /* Lost from the view with its tables kept (a daemon that outlived its lease): it rejoins
         * empty, on tables made anew, as after a lost host (membership.h, "Rejoin"). */
        nessie_node_close(nd);
        if (nessie_node_unlink(&cfg.engine) != NESSIE_OK ||
            nessie_node_open(&cfg.engine, &nd) != NESSIE_OK)
            goto out_config;
        joined = members_start(&cfg, nd);
    }
    if (joined != 0)
        goto out_node;
    struct recep_recycler *rec;
    if (recep_recycler_start(nd, cfg.recyclers, cfg.sweep_every_s, &rec) != 0)
        goto out_members;
    /* Peers may ship requests as soon as this node is open: serve them before taking clients. */
    struct recep_sdserver *sds;
    if (recep_sdserver_start(nd, cfg.sd_servers, cfg.sd_poll, cfg.spin_us, &sds) != 0)
        goto out_recyclers;
    struct recep_worker **workers = calloc(cfg.workers, sizeof(*workers));
    if (!workers)
        goto out_sdservers;
    uint32_t started = 0;
    for (; started < cfg.workers; started++)
        if (recep_worker_start(nd, started, cfg.spin_us, !cfg.no_sd_help, &workers[started]) != 0)
            goto out_workers;
    struct recep_stats *stats;
    if (recep_stats_start(nd, workers, cfg.workers, &stats) != 0)
        goto out_workers;
    struct recep_receptionist_config rc = {.socket_path = cfg.socket_path,
                                           .socket_mode = cfg.socket_mode,
                                           .arena_bytes = cfg.arena_bytes,
                                           .max_channels = cfg.max_channels};
    /* The memcached port (issue 32), when configured: before the Receptionist, which is last. */
    struct recep_tcp *tcp = NULL;
    if (cfg.memcached_port) {
        if (cfg.memcached_port + (uint32_t)node > 65535) {
            log_error("reception: [reception] memcached_port %u + node %d is past port 65535",
                      cfg.memcached_port, node);
            goto out_stats;
        }
        struct recep_tcp_config tc = {.addr = cfg.memcached_addr,
                                      .port = cfg.memcached_port + (uint32_t)node,
                                      .threads = cfg.memcached_threads,
                                      .max_connections = cfg.max_connections,
                                      .idle_s = cfg.idle_timeout_s,
                                      .partial_s = cfg.partial_timeout_s,
                                      .spin_us = cfg.spin_us};
        if (recep_tcp_start(nd, &tc, stats, &tcp) != 0)
            goto out_stats;
    }
    struct recep_receptionist *recept;
    if (recep_receptionist_start(&rc, nd, workers, cfg.workers, stats, &recept) != 0)
        goto out_tcp;
    char pidfile[300];
    snprintf(pidfile, sizeof(pidfile), "%s/node%d.pid", cfg.run_dir, node);
    FILE *pf = fopen(pidfile, "w");
    if (pf) {
        fprintf(pf, "%d\n", (int)getpid());
        fclose(pf);
    } else {
        log_warn("reception: cannot write %s: %s", pidfile, strerror(errno));
    }
    log_info("reception: node %d of %u serving on %s (%u workers, %u recyclers, mode %s, %u sd "
             "servers polling %s, arena %u bytes, cluster \"%s\")", node, cfg.engine.nodes,
             cfg.socket_path, cfg.workers, cfg.recyclers, nessie_mode_name(cfg.engine.mode),
             cfg.sd_servers, cfg.sd_poll == RECEP_SD_POLL_SPIN ? "by spinning" : "adaptively",
             cfg.arena_bytes, cfg.cluster);

    int sig = 0;
    sigwait(&stopset, &sig);
    log_info("reception: %s: finishing requests in flight, then exiting", strsignal(sig));
    status = 0;

    unlink(pidfile);
    recep_receptionist_stop(recept);
out_tcp:
    recep_tcp_stop(tcp);
out_stats:
    recep_stats_stop(stats);
out_workers:
    for (uint32_t i = started; i-- > 0;)
        recep_worker_stop(workers[i]);
    free(workers);
out_sdservers:
    recep_sdserver_stop(sds);
out_recyclers:
    recep_recycler_stop(rec);
out_members:
    members_stop();
out_node:
    nessie_node_close(nd);
out_config:
    g_free(config_path);
    g_free(run_dir);
    g_free(socket_path);
    g_free(log_level);
    g_free(mode);
    g_strfreev(sets);
    if (status == 0 && !print_config)
        log_info("reception: stopped; tables kept in shared memory");
    return status;
}
