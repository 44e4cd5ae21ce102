/*
 * front.h - the engine's front: what a program linking libnessie calls. Not a public header
 * itself; the public one is include/nessie/nessie.h.
 *
 * Room: front, the engine's highest. It owns the public calls: configuration and its checks, the
 * call bound derived from it, nodes, contexts and counters, flush_all (engine.c); the calls on
 * keys, which check their arguments, plan their key once and hand the call to the dispatch
 * (api.c); and the library's exported symbols (libnessie.map) and pkg-config file. It may call
 * every room below it: modes, protocol, memory, fabric, membership. Nothing in the engine calls it.
 *
 * The tests' back doors (protocol/nessie_test.h) are served from here too (nessie_node_fabric).
 */
#ifndef NESSIE_KVSTORE_FRONT_H
#define NESSIE_KVSTORE_FRONT_H

#include <nessie/nessie.h>

#include "memory/memory.h"
#include "modes/modes.h"
#include "protocol/nessie_test.h"

#endif
