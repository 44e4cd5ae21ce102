/*
 * receptionist.c - the accept loop and the hello exchange (include/nessie/wire.h, step 1-2).
 */
#include "receptionist.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <nessie/wire.h>

#include "channel.h"
#include "log.h"

/* How long a connected client may take to send its hello: the Receptionist serves clients one
 * at a time, so a silent one must not hold the door for long. */
#define HELLO_TIMEOUT_MS 1000

struct recep_receptionist {
    struct recep_receptionist_config cfg;
    char path[108];
    struct nessie_node *node;
    struct recep_worker **workers;
    uint32_t nworkers;
    struct recep_stats *stats;
    int lfd;
    int stopfd; /* eventfd: stop */
    pthread_t thread;
    uint64_t next_id;
};

static void send_welcome(struct recep_receptionist *r, int fd, uint16_t status, const int *fds,
                         int nfds)
{
    const struct nessie_config *c = nessie_node_config(r->node);
    struct wire_welcome w = {.magic = WIRE_MAGIC, .version = WIRE_VERSION, .status = status,
                             .node = c->self, .nodes = c->nodes,
                             .channel_bytes = WIRE_ARENA_OFFSET + (uint64_t)r->cfg.arena_bytes,
                             .arena_bytes = r->cfg.arena_bytes,
                             .max_item_size = c->max_item_size};
    struct iovec iov = {.iov_base = &w, .iov_len = sizeof(w)};
    union {
        char buf[CMSG_SPACE(2 * sizeof(int))];
        struct cmsghdr align;
    } u;
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
    if (nfds > 0) {
        memset(&u, 0, sizeof(u));
        msg.msg_control = u.buf;
        msg.msg_controllen = CMSG_SPACE((size_t)nfds * sizeof(int));
        struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN((size_t)nfds * sizeof(int));
        memcpy(CMSG_DATA(cm), fds, (size_t)nfds * sizeof(int));
    }
    if (sendmsg(fd, &msg, MSG_NOSIGNAL) < 0)
        log_debug("receptionist: welcome not sent: %s", strerror(errno));
}

static void send_stats(struct recep_receptionist *r, int fd)
{
    GString *s = g_string_new(NULL);
    recep_stats_format(r->stats, s);
    /* In messages of at most 16 KiB, each ending at a line boundary. */
    size_t off = 0;
    while (off < s->len) {
        size_t n = s->len - off;
        if (n > 16384) {
            n = 16384;
            while (n > 0 && s->str[off + n - 1] != '\n')
                n--;
        }
        if (send(fd, s->str + off, n, MSG_NOSIGNAL) < 0) {
            log_debug("receptionist: stats not sent: %s", strerror(errno));
            break;
        }
        off += n;
    }
    g_string_free(s, TRUE);
}

static struct recep_worker *least_loaded(struct recep_receptionist *r, uint32_t *total)
{
    struct recep_worker *best = NULL;
    uint32_t best_n = UINT32_MAX;
    *total = 0;
    for (uint32_t i = 0; i < r->nworkers; i++) {
        struct recep_worker_stats ws;
        recep_worker_stats(r->workers[i], &ws);
        *total += ws.channels;
        if (ws.channels < best_n) {
            best_n = ws.channels;
            best = r->workers[i];
        }
    }
    return best;
}

/* One client: credentials, hello, answer. Closes fd unless a channel took it. */
static void welcome(struct recep_receptionist *r, int fd)
{
    struct ucred cred;
    socklen_t cl = sizeof(cred);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) != 0) {
        log_warn("receptionist: SO_PEERCRED: %s", strerror(errno));
        close(fd);
        return;
    }
    if (cred.uid != getuid() && cred.uid != 0) {
        log_warn("receptionist: refused pid %d of uid %u (serving uid %u only)", (int)cred.pid,
                 (unsigned)cred.uid, (unsigned)getuid());
        close(fd);
        return;
    }
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    int pr = poll(&pfd, 1, HELLO_TIMEOUT_MS);
    if (pr <= 0) {
        log_warn("receptionist: pid %d sent no hello within %d ms", (int)cred.pid,
                 HELLO_TIMEOUT_MS);
        close(fd);
        return;
    }
    struct wire_hello h;
    ssize_t n = recv(fd, &h, sizeof(h), MSG_TRUNC | MSG_DONTWAIT);
    if (n != (ssize_t)sizeof(h) || h.magic != WIRE_MAGIC) {
        log_warn("receptionist: pid %d: malformed hello (%zd bytes)", (int)cred.pid, n);
        send_welcome(r, fd, WIRE_E_MALFORMED, NULL, 0);
        close(fd);
        return;
    }
    /* The stats exchange has not changed since version 1: a tool of then still reads them. */
    const bool stats_ok = h.kind == WIRE_HELLO_STATS && h.version >= WIRE_STATS_VERSION_MIN &&
                          h.version <= WIRE_VERSION;
    if (h.version != WIRE_VERSION && !stats_ok) {
        log_warn("receptionist: pid %d speaks wire version %u, this daemon %u", (int)cred.pid,
                 h.version, WIRE_VERSION);
        send_welcome(r, fd, WIRE_E_VERSION, NULL, 0);
        close(fd);
        return;
    }
    if (h.kind == WIRE_HELLO_STATS) {
        send_stats(r, fd);
        close(fd);
        return;
    }
    if (h.kind != WIRE_HELLO_CHANNEL || h.reserved != 0) {
        log_warn("receptionist: pid %d: malformed hello (kind %u)", (int)cred.pid, h.kind);
        send_welcome(r, fd, WIRE_E_MALFORMED, NULL, 0);
        close(fd);
        return;
    }
    uint32_t total;
    struct recep_worker *w = least_loaded(r, &total);
    if (total >= r->cfg.max_channels) {
        log_warn("receptionist: pid %d refused: %u channels open (max_channels)", (int)cred.pid,
                 total);
        send_welcome(r, fd, WIRE_E_BUSY, NULL, 0);
        close(fd);
        return;
    }
    struct recep_channel *ch;
    if (recep_channel_create(r->cfg.arena_bytes, nessie_node_config(r->node)->max_item_size, fd,
                             cred.pid, ++r->next_id, &ch) != 0) {
        /* fd closed by recep_channel_create */
        return;
    }
    int fds[2] = {ch->memfd, ch->doorbell};
    send_welcome(r, fd, WIRE_OK, fds, 2);
    recep_stats_channel_opened(r->stats);
    recep_worker_add(w, ch); /* if the client is gone already, the worker sees its hang-up */
}

static void *receptionist_main(void *arg)
{
    struct recep_receptionist *r = arg;
    for (;;) {
        struct pollfd p[2] = {{.fd = r->lfd, .events = POLLIN}, {.fd = r->stopfd, .events = POLLIN}};
        if (poll(p, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            log_error("receptionist: poll: %s", strerror(errno));
            break;
        }
        if (p[1].revents)
            break;
        if (!(p[0].revents & POLLIN))
            continue;
        int fd = accept4(r->lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno != EINTR && errno != EAGAIN && errno != ECONNABORTED)
                log_warn("receptionist: accept: %s", strerror(errno));
            if (errno == EMFILE || errno == ENFILE) {
                struct timespec ts = {0, 10 * 1000000};
                nanosleep(&ts, NULL); /* out of descriptors: do not spin */
            }
            continue;
        }
        welcome(r, fd);
    }
    return NULL;
}

/* A socket file is stale if nobody accepts on it. */
static bool socket_alive(const char *path)
{
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return false;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    bool alive = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
    close(fd);
    return alive;
}

int recep_receptionist_start(const struct recep_receptionist_config *cfg,
                             struct nessie_node *node, struct recep_worker **workers,
                             uint32_t nworkers, struct recep_stats *stats,
                             struct recep_receptionist **out)
{
    struct recep_receptionist *r = calloc(1, sizeof(*r));
    if (!r)
        return -1;
    r->cfg = *cfg;
    snprintf(r->path, sizeof(r->path), "%s", cfg->socket_path);
    r->cfg.socket_path = r->path;
    r->node = node;
    r->workers = workers;
    r->nworkers = nworkers;
    r->stats = stats;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", r->path);
    if (socket_alive(r->path)) {
        log_error("receptionist: %s: another daemon is serving this socket", r->path);
        goto fail_socket;
    }
    unlink(r->path); /* stale, from a daemon that died */
    r->lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (r->lfd < 0) {
        log_error("receptionist: socket: %s", strerror(errno));
        goto fail_socket;
    }
    /* The socket is created with the final mode: no window in which others could connect. */
    mode_t old = umask(0777 & ~cfg->socket_mode);
    int brc = bind(r->lfd, (struct sockaddr *)&sa, sizeof(sa));
    int berr = errno;
    umask(old);
    if (brc != 0) {
        log_error("receptionist: bind %s: %s", r->path, strerror(berr));
        goto fail_bind;
    }
    if (listen(r->lfd, 128) != 0) {
        log_error("receptionist: listen %s: %s", r->path, strerror(errno));
        goto fail_listen;
    }
    r->stopfd = eventfd(0, EFD_CLOEXEC);
    if (r->stopfd < 0) {
        log_error("receptionist: eventfd: %s", strerror(errno));
        goto fail_listen;
    }
    int rc = pthread_create(&r->thread, NULL, receptionist_main, r);
    if (rc != 0) {
        log_error("receptionist: pthread_create: %s", strerror(rc));
        goto fail_thread;
    }
    *out = r;
    return 0;

fail_thread:
    close(r->stopfd);
fail_listen:
    unlink(r->path);
fail_bind:
    close(r->lfd);
fail_socket:
    free(r);
    return -1;
}

void recep_receptionist_stop(struct recep_receptionist *r)
{
    if (!r)
        return;
    uint64_t one = 1;
    if (write(r->stopfd, &one, sizeof(one)) < 0)
        log_warn("receptionist: stop: %s", strerror(errno));
    pthread_join(r->thread, NULL);
    close(r->stopfd);
    unlink(r->path);
    close(r->lfd);
    free(r);
}
