/*
 * deception.c - libdeception.so: the libmemcached API served by Nessie (DESIGN.md, "shim").
 *
 * Loaded with LD_PRELOAD into an unmodified memcached client, it defines the libmemcached
 * functions that move data and serves them through a channel to the node's reception daemon, one
 * channel per thread: one file per API family (storage.c: set, add, replace, append, prepend,
 * cas; retrieval.c: get, multi-get, fetch; keyop.c: delete, exist, touch; arith.c: increment,
 * decrement; handle.c: flush, flush_buffers, quit, free; stats.c: stats, dump, versions; nb.c:
 * the non-blocking extensions), and what they share in common.c. Everything else (handles,
 * server lists, behaviors, results, allocators) stays with the real library, which the shim
 * calls through dlsym.
 *
 * This file is the interposition core under them all (shim.h): the real library, the serving
 * decision, the threads' channels through fork and exit. It may call the channel (channel.h)
 * and nothing above it: what rides on a channel hears of its end through the channel watch.
 *
 * Mode, decided once per process at the first call: SERVE when the daemon answers; otherwise
 * FALLBACK (every call goes to the real library, so the program keeps working against its
 * configured servers), or with NESSIE_STRICT=1, REFUSE (every call fails with
 * MEMCACHED_CONNECTION_FAILURE). One line on stderr says which. The decision never changes
 * afterwards: the real library calls its own exports through the PLT, so a call we forward may
 * come back to us, and it must meet the same decision.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <libmemcached/memcached.h>

#include "channel.h"
#include "shim.h"

/* ---- the real library ----------------------------------------------------------------------- */

/*
 * A program may find libmemcached's functions without the dynamic linker's help: dlopen the
 * library and dlsym its handle (Python's ctypes does), which searches that library's scope and
 * finds the real functions, past the shim. So the shim defines dlsym too: a lookup, on any
 * handle, of a libmemcached name the shim defines gets the shim's function; every other lookup
 * is glibc's (real_dlsym), reached by a tail jump so that glibc sees the program's return
 * address: dlsym(RTLD_NEXT, ...) searches after its caller's object, and a call from here would
 * make the shim the caller. The jump needs a few instructions of assembly, written for x86-64;
 * elsewhere dlsym is not interposed and such a program bypasses the shim (the README says so).
 * The shim's own lookups call real_dlsym directly (they are the shim's: RTLD_NEXT from here is
 * right, and an explicit handle must find the real function, not ours).
 */
__attribute__((visibility("hidden"))) void *(*shim_real_dlsym)(void *, const char *);
/* The shim's own object (its handle, taken with RTLD_NOLOAD, and its base address). */
static void *self_handle;
static void *self_base;

static void dlsym_init(void)
{
    if (!__atomic_load_n(&shim_real_dlsym, __ATOMIC_ACQUIRE)) {
#if defined(__x86_64__)
        /* glibc 2.34 moved dlsym into libc with a new version; older ones have only the first
         * (x86-64's base version). */
        void *f = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
        if (!f)
            f = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
#else
        void *f = (void *)dlsym; /* not interposed here: the name is glibc's own */
#endif
        __atomic_store_n(&shim_real_dlsym, (void *(*)(void *, const char *))f, __ATOMIC_RELEASE);
        if (!f)
            fprintf(stderr, "libdeception: glibc's dlsym not found; lookups will fail\n");
    }
    Dl_info info;
    if (!__atomic_load_n(&self_handle, __ATOMIC_ACQUIRE) &&
        dladdr((void *)dlsym_init, &info) && info.dli_fname) {
        self_base = info.dli_fbase;
        /* Published last: a thread that sees the handle sees the base too. */
        __atomic_store_n(&self_handle, dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD),
                         __ATOMIC_RELEASE);
    }
}

/* The shim's own function for a lookup of `name` on `handle`, or NULL: glibc answers. */
__attribute__((visibility("hidden"))) void *shim_dlsym_override(void *handle, const char *name);
void *shim_dlsym_override(void *handle, const char *name)
{
    if (!__atomic_load_n(&shim_real_dlsym, __ATOMIC_ACQUIRE))
        dlsym_init();
    if (handle == RTLD_NEXT || handle == RTLD_DEFAULT || !name ||
        strncmp(name, "memcached", 9) != 0 || !shim_real_dlsym)
        return NULL; /* the global scope finds the shim's functions first anyway */
    void *self = __atomic_load_n(&self_handle, __ATOMIC_ACQUIRE);
    if (!self)
        return NULL;
    void *mine = shim_real_dlsym(self, name);
    Dl_info info;
    if (!mine || !dladdr(mine, &info) || info.dli_fbase != self_base)
        return NULL; /* not one the shim defines (its lookup also searches its dependencies) */
    return mine;
}

#if defined(__x86_64__)
/* dlsym(handle, name): keep the arguments, ask shim_dlsym_override, and either return its answer
 * or jump to glibc's dlsym with the caller's return address still on the stack (NULL if it was
 * never found: said on stderr at start). The stack is 16-byte aligned at the call (entry: 8 mod
 * 16; two pushes and 8 bytes make it 0). r11 is scratch in the System V ABI and carries no
 * argument. */
#if defined(__CET__)
#define SHIM_ENDBR "    endbr64\n"
#else
#define SHIM_ENDBR ""
#endif
__asm__(".pushsection .text\n"
        ".globl dlsym\n"
        ".type dlsym, @function\n"
        "dlsym:\n"
        "    .cfi_startproc\n"
        SHIM_ENDBR
        "    pushq %rdi\n"
        "    .cfi_adjust_cfa_offset 8\n"
        "    pushq %rsi\n"
        "    .cfi_adjust_cfa_offset 8\n"
        "    subq $8, %rsp\n"
        "    .cfi_adjust_cfa_offset 8\n"
        "    call shim_dlsym_override\n"
        "    addq $8, %rsp\n"
        "    .cfi_adjust_cfa_offset -8\n"
        "    popq %rsi\n"
        "    .cfi_adjust_cfa_offset -8\n"
        "    popq %rdi\n"
        "    .cfi_adjust_cfa_offset -8\n"
        "    testq %rax, %rax\n"
        "    jz 1f\n"
        "    ret\n"
        "1:  movq shim_real_dlsym(%rip), %r11\n"
        "    testq %r11, %r11\n"
        "    jz 2f\n"
        "    jmp *%r11\n"
        "2:  ret\n"
        "    .cfi_endproc\n"
        ".size dlsym, .-dlsym\n"
        ".popsection\n");
#endif

/* dlsym(RTLD_NEXT) finds the real function when libmemcached is in the global scope (the tools);
 * an extension module (Python, Perl) may have loaded it RTLD_LOCAL, where only a handle of our
 * own, taken with RTLD_NOLOAD, finds it. */
void *shim_real(const char *name)
{
    if (!__atomic_load_n(&shim_real_dlsym, __ATOMIC_ACQUIRE))
        dlsym_init();
    if (!shim_real_dlsym)
        return NULL;
    void *f = shim_real_dlsym(RTLD_NEXT, name);
    if (f)
        return f;
    void *lib = dlopen("libmemcached.so.11", RTLD_LAZY | RTLD_NOLOAD);
    if (!lib)
        return NULL;
    f = shim_real_dlsym(lib, name);
    dlclose(lib); /* NOLOAD took a reference to a library that stays loaded */
    return f;
}

/* ---- mode and channels ------------------------------------------------------------------------ */

enum shim_mode { MODE_UNKNOWN = 0, MODE_SERVE, MODE_FALLBACK, MODE_REFUSE };

/* The process's decision (see the top comment), set once under mode_once. */
static enum shim_mode mode;
static pthread_once_t mode_once = PTHREAD_ONCE_INIT;
static char sock_path[108];

/* Every open channel, so that a forked child can drop its parent's (they are the parent's
 * conversations with the daemon: the child must open its own). */
struct chan_node {
    struct shim_ch *ch;
    struct chan_node *next;
    pid_t owner;
};
static pthread_mutex_t chans_lock = PTHREAD_MUTEX_INITIALIZER;
static struct chan_node *chans;

/* This thread's channel, and the process it was opened in. */
static __thread struct chan_node *tls_chan;

/* Who is told that a channel went (shim.h: nb.c), set once at load. */
static const struct shim_channel_watch *chan_watch;

void shim_channel_watch(const struct shim_channel_watch *w)
{
    __atomic_store_n(&chan_watch, w, __ATOMIC_RELEASE);
}

/* This thread's channel failed: what rode on it is lost. */
static void watch_lost(void)
{
    const struct shim_channel_watch *w = __atomic_load_n(&chan_watch, __ATOMIC_ACQUIRE);
    if (w && w->lost)
        w->lost();
}

/* This thread's channel is gone without a word to the daemon: what rode on it is forgotten. */
static void watch_dropped(void)
{
    const struct shim_channel_watch *w = __atomic_load_n(&chan_watch, __ATOMIC_ACQUIRE);
    if (w && w->dropped)
        w->dropped();
}

/* The same node as a thread-specific value, for its destructor: a thread that exits releases its
 * channel (the daemon's side goes with it), so a program that runs many short threads does not
 * pile up channels. */
static pthread_key_t chan_key;
static bool chan_key_ok; /* the key was made: without it, nothing may be set on key 0 */
static pthread_once_t chan_key_once = PTHREAD_ONCE_INIT;

static void unlink_node(struct chan_node *n)
{
    for (struct chan_node **pp = &chans; *pp; pp = &(*pp)->next)
        if (*pp == n) {
            *pp = n->next;
            return;
        }
}

static bool fini_done; /* under chans_lock: the library's destructor freed every node */

/* Thread exit: close this thread's channel. Its non-blocking operations are not completed: the
 * requests they would write to may be gone with the thread. */
static void chan_thread_exit(void *v)
{
    struct chan_node *n = v;
    pthread_mutex_lock(&chans_lock);
    if (fini_done) { /* a thread outliving the library's destructor: its node is gone */
        pthread_mutex_unlock(&chans_lock);
        return;
    }
    unlink_node(n);
    pthread_mutex_unlock(&chans_lock);
    watch_dropped();
    if (n->ch && n->owner == getpid())
        shim_ch_close(n->ch);
    free(n);
    tls_chan = NULL;
}

static void chan_key_create(void)
{
    chan_key_ok = pthread_key_create(&chan_key, chan_thread_exit) == 0;
    if (!chan_key_ok)
        fprintf(stderr, "libdeception: pthread_key_create failed; channels of exited threads "
                        "stay open until the process ends\n");
}

/* Make n this thread's channel node, listed for fork and exit. */
static void adopt_node(struct chan_node *n)
{
    pthread_once(&chan_key_once, chan_key_create);
    pthread_mutex_lock(&chans_lock);
    n->next = chans;
    chans = n;
    pthread_mutex_unlock(&chans_lock);
    tls_chan = n;
    if (chan_key_ok)
        pthread_setspecific(chan_key, n);
}

static void pick_socket(void)
{
    const char *s = getenv(WIRE_ENV_SOCKET);
    if (s && *s) {
        snprintf(sock_path, sizeof(sock_path), "%s", s);
        return;
    }
    const char *node = getenv(WIRE_ENV_NODE);
    char dir[88], name[20]; /* "node" and ten digits and ".sock": both fit sock_path */
    wire_run_dir(dir, sizeof(dir));
    snprintf(name, sizeof(name), WIRE_SOCKET_NAME,
             node && *node ? (unsigned)strtoul(node, NULL, 10) : 0u);
    snprintf(sock_path, sizeof(sock_path), "%s/%s", dir, name);
}

static void decide(void)
{
    pick_socket();
    struct shim_ch *ch;
    int rc = shim_ch_open(sock_path, &ch);
    const char *strict = getenv("NESSIE_STRICT");
    if (rc == WIRE_OK) {
        mode = MODE_SERVE;
        struct chan_node *n = malloc(sizeof(*n));
        if (!n) {
            shim_ch_close(ch);
            return;
        }
        n->ch = ch;
        n->owner = getpid();
        adopt_node(n);
        if (getenv("NESSIE_VERBOSE"))
            fprintf(stderr, "libdeception: serving memcached calls from Nessie (%s)\n", sock_path);
        return;
    }
    char why[64];
    snprintf(why, sizeof(why), "%s", rc < 0 ? strerror(-rc) : "refused by the daemon");
    if (strict && strcmp(strict, "1") == 0) {
        mode = MODE_REFUSE;
        fprintf(stderr, "libdeception: no Nessie reception at %s (%s); NESSIE_STRICT=1: memcached "
                        "calls fail\n", sock_path, why);
    } else {
        mode = MODE_FALLBACK;
        fprintf(stderr, "libdeception: no Nessie reception at %s (%s); memcached calls go to the "
                        "configured servers\n", sock_path, why);
    }
}

enum shim_mode shim_mode_get(void);
enum shim_mode shim_mode_get(void)
{
    pthread_once(&mode_once, decide);
    return mode;
}

bool shim_serving(void) { return shim_mode_get() == MODE_SERVE; }
const char *shim_socket_path(void) { return sock_path; }
bool shim_refusing(void) { return shim_mode_get() == MODE_REFUSE; }

struct shim_ch *shim_channel(void)
{
    if (tls_chan && tls_chan->owner == getpid() && tls_chan->ch)
        return tls_chan->ch;
    struct shim_ch *ch;
    if (shim_ch_open(sock_path, &ch) != WIRE_OK)
        return NULL;
    struct chan_node *n = malloc(sizeof(*n));
    if (!n) {
        shim_ch_close(ch);
        return NULL;
    }
    n->ch = ch;
    n->owner = getpid();
    adopt_node(n);
    return ch;
}

/* shim_channel_hold's depth, and a failure that came while held. */
static __thread unsigned chan_holds;
static __thread bool chan_failed_held;

void shim_channel_hold(bool hold)
{
    if (hold) {
        chan_holds++;
        return;
    }
    if (chan_holds && --chan_holds == 0 && chan_failed_held) {
        chan_failed_held = false;
        shim_channel_failed();
    }
}

void shim_channel_failed(void)
{
    /* The daemon went away under this channel: close it, and open a new one at the next call
     * (the daemon may be back by then). Non-blocking operations in flight on it are lost. */
    if (!tls_chan)
        return;
    if (chan_holds) { /* its holder still uses it: the next calls fail on it, then it goes */
        chan_failed_held = true;
        return;
    }
    watch_lost();
    struct chan_node *n = tls_chan;
    pthread_mutex_lock(&chans_lock);
    unlink_node(n);
    pthread_mutex_unlock(&chans_lock);
    if (n->ch)
        shim_ch_close(n->ch);
    free(n);
    tls_chan = NULL;
    if (chan_key_ok)
        pthread_setspecific(chan_key, NULL);
}

/* fork: the lock is taken before and released after on both sides, so the child never inherits
 * it held; the child then forgets its parent's channels (without closing their shared state: it
 * only drops its own descriptors and mappings). */
static void before_fork(void) { pthread_mutex_lock(&chans_lock); }
static void after_fork_parent(void) { pthread_mutex_unlock(&chans_lock); }
static void after_fork_child(void)
{
    struct chan_node *n = chans;
    while (n) {
        struct chan_node *next = n->next;
        if (n->ch)
            shim_ch_close(n->ch);
        free(n);
        n = next;
    }
    chans = NULL;
    tls_chan = NULL;
    pthread_mutex_unlock(&chans_lock);
    pthread_once(&chan_key_once, chan_key_create);
    if (chan_key_ok)
        pthread_setspecific(chan_key, NULL); /* freed above: its destructor must not see it */
    watch_dropped(); /* the forking thread's operations rode on its parent's channel */
}

/* nessie-run preloads PHP's extension chain into PHP alone (tools/nessie-run: PHP binds its
 * extensions past LD_PRELOAD otherwise) and names those files in NESSIE_PRELOAD_PROGRAM_ONLY.
 * The loader has read LD_PRELOAD by the time this runs, so they leave the environment here:
 * a program PHP starts inherits the shim alone (a shell given the chain failed to start:
 * "undefined symbol: OnUpdateBool"). Never fails: on a malformed or over-long list the
 * environment is left as it is. */
static void preload_scope(void)
{
    const char *only = getenv("NESSIE_PRELOAD_PROGRAM_ONLY");
    const char *pre = getenv("LD_PRELOAD");
    if (!only)
        return;
    char kept[4096], item[1024];
    size_t klen = 0;
    bool ok = pre != NULL;
    /* LD_PRELOAD's items are separated by spaces or colons (ld.so(8)). */
    for (const char *q = pre; ok && *q;) {
        size_t n = strcspn(q, " :");
        if (n > 0) {
            if (n >= sizeof(item)) {
                ok = false;
                break;
            }
            memcpy(item, q, n);
            item[n] = '\0';
            /* An item listed in `only` (space-separated, whole words) goes. */
            bool drop = false;
            for (const char *o = only; *o && !drop;) {
                size_t m = strcspn(o, " ");
                drop = m == n && memcmp(o, item, n) == 0;
                o += m;
                o += strspn(o, " ");
            }
            if (!drop) {
                if (klen + n + 2 > sizeof(kept)) {
                    ok = false;
                    break;
                }
                if (klen)
                    kept[klen++] = ' ';
                memcpy(kept + klen, item, n);
                klen += n;
            }
        }
        q += n;
        q += strspn(q, " :");
    }
    if (ok) {
        kept[klen] = '\0';
        if (klen)
            setenv("LD_PRELOAD", kept, 1);
        else
            unsetenv("LD_PRELOAD");
    }
    unsetenv("NESSIE_PRELOAD_PROGRAM_ONLY");
}

__attribute__((constructor)) static void shim_init(void)
{
    dlsym_init();
    preload_scope();
    pthread_atfork(before_fork, after_fork_parent, after_fork_child);
}

__attribute__((destructor)) static void shim_fini(void)
{
    pthread_mutex_lock(&chans_lock);
    struct chan_node *n = chans;
    while (n) {
        struct chan_node *next = n->next;
        if (n->ch && n->owner == getpid())
            shim_ch_close(n->ch);
        free(n);
        n = next;
    }
    chans = NULL;
    tls_chan = NULL;
    fini_done = true;
    pthread_mutex_unlock(&chans_lock);
}
