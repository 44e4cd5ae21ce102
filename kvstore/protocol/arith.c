/* arith.c - see arith.h. */
#include "arith.h"

#include <stdio.h>
#include <string.h>

bool arith_parse(const void *val, size_t len, uint64_t *out)
{
    const unsigned char *p = val;
    size_t i = 0, digits = 0;
    uint64_t v = 0;
    for (; i < len && p[i] >= '0' && p[i] <= '9'; i++, digits++) {
        uint64_t d = (uint64_t)(p[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return false; /* does not fit in 64 bits */
        v = v * 10 + d;
    }
    if (digits == 0 || digits > ARITH_MAX_DIGITS)
        return false;
    for (; i < len; i++)
        if (p[i] != ' ')
            return false;
    *out = v;
    return true;
}

bool arith_apply(const void *old, size_t oldlen, bool incr, uint64_t delta, char *out,
                 size_t outcap, size_t *outlen, uint64_t *result)
{
    uint64_t v;
    if (!arith_parse(old, oldlen, &v))
        return false;
    if (incr)
        v += delta; /* unsigned: wraps at 2^64 like memcached */
    else
        v = delta > v ? 0 : v - delta;
    char num[ARITH_MAX_DIGITS + 1];
    int n = snprintf(num, sizeof(num), "%llu", (unsigned long long)v);
    size_t len = (size_t)n < oldlen ? oldlen : (size_t)n;
    if (len > outcap)
        return false;
    memcpy(out, num, (size_t)n);
    memset(out + n, ' ', len - (size_t)n);
    *outlen = len;
    *result = v;
    return true;
}
