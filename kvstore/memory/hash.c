/* hash.c - see hash.h. */
#include "hash.h"

#include <string.h>

uint64_t hash_key(const void *key, size_t len, uint64_t seed)
{
    const uint64_t m = 0xc6a4a7935bd1e995ULL;
    const unsigned char *p = key;
    uint64_t h = seed ^ (len * m);
    while (len >= 8) {
        uint64_t k;
        memcpy(&k, p, 8);
        k *= m;
        k ^= k >> 47;
        k *= m;
        h ^= k;
        h *= m;
        p += 8;
        len -= 8;
    }
    uint64_t tail = 0;
    memcpy(&tail, p, len);
    h ^= tail;
    h *= m;
    return hash_mix(h);
}
