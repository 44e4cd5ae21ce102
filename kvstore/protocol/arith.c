/* arith.c - see arith.h. */
#include "arith.h"

#include <stdio.h>
#include <string.h>

/* C's isspace in the C locale, which memcached's strtoull and its end check use. */
static bool c_space(unsigned char c)
{
    return c == ' ' || (c >= '\t' && c <= '\r');
}

bool arith_parse(const void *val, size_t len, uint64_t *out)
{
    /* memcached's safe_strtoull on the item's data, which is followed by "\r\n": strtoull's
     * leading white space and sign, at least one digit, no overflow, and then white space (the
     * "\r" at the latest), or a NUL; a number that is negative as a signed one is refused if a
     * '-' comes before the first NUL (measured with memcached 1.6.18: " 5" and "5 x" are 5). */
    const unsigned char *p = val;
    size_t i = 0;
    while (i < len && c_space(p[i]))
        i++;
    bool neg = false;
    if (i < len && (p[i] == '+' || p[i] == '-'))
        neg = p[i++] == '-';
    size_t digits = 0;
    uint64_t v = 0;
    for (; i < len && p[i] >= '0' && p[i] <= '9'; i++, digits++) {
        uint64_t d = (uint64_t)(p[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return false; /* ERANGE */
        v = v * 10 + d;
    }
    if (digits == 0 || (i < len && !c_space(p[i]) && p[i] != '\0'))
        return false;
    if (neg)
        v = (uint64_t)0 - v; /* strtoull negates in unsigned arithmetic */
    if ((int64_t)v < 0) {
        size_t n = 0;
        while (n < len && p[n] != '\0' && p[n] != '-')
            n++;
        if (n < len && p[n] == '-')
            return false;
    }
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
