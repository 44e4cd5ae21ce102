/* cache.c - see cache.h. A GHashTable from ITE word to entry, and an intrusive LRU list. */
#include "cache.h"

#include <glib.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

struct cache_entry {
    uint64_t ite;                     /* the hash table's key points here */
    uint64_t expiry_ns;
    struct cache_entry *prev, *next;  /* LRU list: head is most recently used */
    uint32_t len;
    unsigned char data[];
};

struct nessie_cache {
    GHashTable *map;
    struct cache_entry *head, *tail;
    size_t max_bytes, max_entries;
    struct cache_stats st;
};

static guint ite_hash(gconstpointer p)
{
    uint64_t v = *(const uint64_t *)p;
    v ^= v >> 33;
    v *= 0xff51afd7ed558ccdULL;
    v ^= v >> 33;
    return (guint)v;
}

static gboolean ite_equal(gconstpointer a, gconstpointer b)
{
    return *(const uint64_t *)a == *(const uint64_t *)b;
}

struct nessie_cache *cache_create(size_t max_bytes, size_t max_entries)
{
    struct nessie_cache *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->max_bytes = max_bytes;
    c->max_entries = max_entries;
    c->map = g_hash_table_new(ite_hash, ite_equal);
    return c;
}

static void unlink_entry(struct nessie_cache *c, struct cache_entry *e)
{
    if (e->prev)
        e->prev->next = e->next;
    else
        c->head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        c->tail = e->prev;
    e->prev = e->next = NULL;
}

static void push_front(struct nessie_cache *c, struct cache_entry *e)
{
    e->prev = NULL;
    e->next = c->head;
    if (c->head)
        c->head->prev = e;
    c->head = e;
    if (!c->tail)
        c->tail = e;
}

static void drop(struct nessie_cache *c, struct cache_entry *e)
{
    g_hash_table_remove(c->map, &e->ite);
    unlink_entry(c, e);
    c->st.bytes -= e->len;
    c->st.entries--;
    free(e);
}

void cache_clear(struct nessie_cache *c)
{
    while (c->head)
        drop(c, c->head);
}

void cache_destroy(struct nessie_cache *c)
{
    if (!c)
        return;
    cache_clear(c);
    g_hash_table_destroy(c->map);
    free(c);
}

static bool disabled(const struct nessie_cache *c)
{
    return c->max_bytes == 0 || c->max_entries == 0;
}

const void *cache_get(struct nessie_cache *c, uint64_t ite, uint64_t now_ns,
                      uint64_t new_expiry_ns, uint32_t *len)
{
    struct cache_entry *e = disabled(c) ? NULL : g_hash_table_lookup(c->map, &ite);
    if (!e) {
        c->st.misses++;
        return NULL;
    }
    if (e->expiry_ns <= now_ns) {
        /* Past its period: the slot may have been reused; a stale copy must not be served. */
        drop(c, e);
        c->st.expired++;
        c->st.misses++;
        return NULL;
    }
    if (new_expiry_ns > e->expiry_ns)
        e->expiry_ns = new_expiry_ns;
    if (c->head != e) {
        unlink_entry(c, e);
        push_front(c, e);
    }
    c->st.hits++;
    *len = e->len;
    return e->data;
}

int cache_put(struct nessie_cache *c, uint64_t ite, const void *data, uint32_t len,
              uint64_t expiry_ns)
{
    if (disabled(c))
        return 0;
    if (len > c->max_bytes) {
        c->st.too_big++;
        return 0;
    }
    struct cache_entry *e = malloc(sizeof(*e) + len);
    if (!e)
        return -1;
    e->ite = ite;
    e->expiry_ns = expiry_ns;
    e->len = len;
    memcpy(e->data, data, len);
    struct cache_entry *old = g_hash_table_lookup(c->map, &ite);
    if (old)
        drop(c, old);
    while (c->tail && (c->st.bytes + len > c->max_bytes || c->st.entries + 1 > c->max_entries)) {
        drop(c, c->tail);
        c->st.evictions++;
    }
    g_hash_table_insert(c->map, &e->ite, e);
    push_front(c, e);
    c->st.bytes += len;
    c->st.entries++;
    c->st.inserts++;
    return 0;
}

void cache_remove(struct nessie_cache *c, uint64_t ite)
{
    struct cache_entry *e = disabled(c) ? NULL : g_hash_table_lookup(c->map, &ite);
    if (e)
        drop(c, e);
}

const struct cache_stats *cache_stats(const struct nessie_cache *c) { return &c->st; }
