/*
 * arith.h - memcached's incr/decr rules on a stored value, shared by the engine (which applies
 * them inside a read-modify-write) and the stress checker (which models them).
 *
 * The stored value is read as memcached reads it (strtoull on the data and its "\r\n"): white
 * space, an optional sign, decimal digits that fit in 64 bits, then white space or nothing (so
 * " 5", "5 " and "5 x" are 5; memcached pads a shrunk number with spaces, see below); anything
 * else is non-numeric. incr wraps around at 2^64; decr stops at 0.
 * The new value is the decimal number; if it is shorter than the old value, it is padded with
 * spaces to the old length, as memcached 1.6 does when it updates an item in place.
 */
#ifndef NESSIE_KVSTORE_ARITH_H
#define NESSIE_KVSTORE_ARITH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Longest value arith_apply() can produce: 20 digits, or the old length if that is longer. */
#define ARITH_MAX_DIGITS 20

/* Parse a stored value. Returns true and sets *out if it is numeric per the rules above. */
bool arith_parse(const void *val, size_t len, uint64_t *out);

/*
 * Apply incr (incr=true) or decr by delta to the stored value old/oldlen. On success returns
 * true, writes the new stored bytes to out (capacity outcap, must be >= max(oldlen, 20)), sets
 * *outlen and *result (the new number). Returns false, writing nothing, if old is non-numeric.
 */
bool arith_apply(const void *old, size_t oldlen, bool incr, uint64_t delta, char *out,
                 size_t outcap, size_t *outlen, uint64_t *result);

#endif
