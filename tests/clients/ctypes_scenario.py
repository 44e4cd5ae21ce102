#!/usr/bin/env python3
"""tests/clients/ctypes_scenario.py HOST:PORT [--binary]: libmemcached called through ctypes.

ctypes finds each function with dlsym on the handle of a library it dlopen()ed itself, not
through the dynamic linker's global scope, so LD_PRELOAD alone does not reach these calls: the
shim interposes dlsym (shim/deception.c). Prints one line per step, a transcript to compare
between memcached and Nessie (through tools/nessie-run with NESSIE_STRICT=1, where a call that
bypassed the shim would fail to connect)."""
import ctypes
import sys

lib = ctypes.CDLL("libmemcached.so.11")
libc = ctypes.CDLL(None)
P, S, U32, I = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint32, ctypes.c_int
lib.memcached.restype, lib.memcached.argtypes = P, [ctypes.c_char_p, S]
lib.memcached_free.argtypes = [P]
lib.memcached_strerror.restype, lib.memcached_strerror.argtypes = ctypes.c_char_p, [P, I]
lib.memcached_set.restype = I
lib.memcached_set.argtypes = [P, ctypes.c_char_p, S, ctypes.c_char_p, S, ctypes.c_long, U32]
lib.memcached_get.restype = P
lib.memcached_get.argtypes = [P, ctypes.c_char_p, S, ctypes.POINTER(S), ctypes.POINTER(U32),
                              ctypes.POINTER(I)]
lib.memcached_delete.restype, lib.memcached_delete.argtypes = I, [P, ctypes.c_char_p, S, ctypes.c_long]
lib.memcached_increment.restype = I
lib.memcached_increment.argtypes = [P, ctypes.c_char_p, S, U32, ctypes.POINTER(ctypes.c_uint64)]
libc.free.argtypes = [P]

config = "--SERVER=" + sys.argv[1] + (" --BINARY-PROTOCOL" if "--binary" in sys.argv[2:] else "")
m = lib.memcached(config.encode(), len(config))


def status(rc):
    return lib.memcached_strerror(m, rc).decode()


def get(step, key):
    length, flags, rc = S(0), U32(0), I(0)
    v = lib.memcached_get(m, key, len(key), ctypes.byref(length), ctypes.byref(flags), ctypes.byref(rc))
    value = ctypes.string_at(v, length.value).decode() if v else None
    if v:
        libc.free(v)
    print("%s: %s %r flags=%d" % (step, status(rc.value), value, flags.value))


print("set: " + status(lib.memcached_set(m, b"ct", 2, b"through ctypes", 14, 0, 5)))
get("get", b"ct")
print("set n: " + status(lib.memcached_set(m, b"ctn", 3, b"41", 2, 0, 0)))
n = ctypes.c_uint64(0)
print("incr: %s %d" % (status(lib.memcached_increment(m, b"ctn", 3, 1, ctypes.byref(n))), n.value))
print("delete: " + status(lib.memcached_delete(m, b"ct", 2, 0)))
get("get after delete", b"ct")
print("delete again: " + status(lib.memcached_delete(m, b"ct", 2, 0)))
lib.memcached_free(m)
