# Nessie: one entry point. `make` builds, `make test` installs what is missing and runs every test,
# `make asan` / `make tsan` run the same tests under sanitizers, `make install` installs.
#
# Build outputs go to $(BUILD) (build/ by default; build/asan and build/tsan for the sanitizer
# runs, so the three never mix objects). Header dependencies are tracked with -MMD.

BUILD   ?= build
PREFIX  ?= /usr/local
DESTDIR ?=
CC      ?= cc
PKG_CONFIG ?= pkg-config
OBJCOPY ?= objcopy

# SAN selects a sanitizer build: "" (none), "asan" (AddressSanitizer + UBSan), "tsan".
SAN ?=
OPT ?= -O2

ifeq ($(SAN),asan)
  SANFLAGS := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
  OPT := -O1
else ifeq ($(SAN),tsan)
  SANFLAGS := -fsanitize=thread -fno-omit-frame-pointer
  OPT := -O1
else
  SANFLAGS :=
endif

# Libraries by who uses them; resolved lazily (=) so `make clean` works without pkg-config.
NESSIE_PKGS = glib-2.0 libibverbs librdmacm libisal liburing
NESSIE_CFLAGS = $(shell $(PKG_CONFIG) --cflags $(NESSIE_PKGS))
NESSIE_LIBS   = $(shell $(PKG_CONFIG) --libs $(NESSIE_PKGS))
TEST_PKGS = cmocka
TEST_CFLAGS = $(shell $(PKG_CONFIG) --cflags $(TEST_PKGS))
TEST_LIBS   = $(shell $(PKG_CONFIG) --libs $(TEST_PKGS))

WARN     := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wformat=2 \
            -Wno-format-nonliteral
# Include paths per module: each sees its own headers, the public ones (include/nessie/) and the
# common base (base/), never another module's private headers. Tests and test tools reach the
# engine's internals (and its test back doors, kvstore/protocol/nessie_test.h) through TEST_CPPFLAGS.
CPPFLAGS += -Iinclude -Ibase -D_GNU_SOURCE
KVSTORE_CPPFLAGS = $(CPPFLAGS) -Ikvstore
TEST_CPPFLAGS = $(KVSTORE_CPPFLAGS) -Itests/stress -Ishim
CFLAGS   += -std=c11 -g $(OPT) $(WARN) -fPIC -pthread $(SANFLAGS) -MMD -MP
LDFLAGS  += -pthread $(SANFLAGS)
LDLIBS   += -lrt

# libnessie, three ways: the internal archive (every symbol, for the tests and test tools that
# reach the engine's internals), and the installed archive and shared library, which export only
# the nessie_-prefixed API (nessie/nessie.h), so the engine's own names (cache_get, hash_key,
# slab_alloc...) never collide with a program's. The daemon links the public archive: what it
# needs of the engine is the API.
VERSION     := 0.18.0
SOVERSION   := 0
# The engine's rooms (kvstore/*/, tests/integration/rooms.sh keeps their order) and the logger
# the whole project shares (base/).
KVSTORE_SRC := $(wildcard kvstore/*/*.c) base/log.c base/cpuload.c
KVSTORE_OBJ := $(KVSTORE_SRC:%.c=$(BUILD)/obj/%.o)
LIBNESSIE_INT := $(BUILD)/obj/libnessie-internal.a
LIBNESSIE   := $(BUILD)/libnessie.a
LIBNESSIE_SO := $(BUILD)/libnessie.so.$(SOVERSION)

# The daemon. jemalloc is its allocator, except under sanitizers, which bring their own.
RECEP_SRC := $(wildcard reception/*.c)
RECEP_OBJ := $(RECEP_SRC:%.c=$(BUILD)/obj/%.o)
RECEP_BIN := $(BUILD)/reception
# libcurl and json-glib: membership through etcd's JSON gateway (members.c); the engine has neither.
RECEP_PKGS = glib-2.0 libibverbs librdmacm libisal liburing libunwind libcurl json-glib-1.0 $(if $(SAN),,jemalloc)
RECEP_LIBS = $(shell $(PKG_CONFIG) --libs $(RECEP_PKGS))

# The client side of a channel (the shim's), and the test tools built on it.
CHANNEL_OBJ := $(BUILD)/obj/shim/channel.o

# The shim: interposes libmemcached, so it is compiled against its headers but never linked to
# it (the program brings the real one; the shim finds it with dlsym).
SHIM_SRC := $(filter-out shim/channel.c,$(wildcard shim/*.c))
SHIM_OBJ := $(SHIM_SRC:shim/%.c=$(BUILD)/obj/shim/%.o)
SHIM_LIB := $(BUILD)/libdeception.so
CAPI_SCENARIO := $(BUILD)/tests/capi-scenario
CHANNELS_SCENARIO := $(BUILD)/tests/channels-scenario
NB_OVERLAP := $(BUILD)/bench/nb-overlap
LOADGEN := $(BUILD)/bench/loadgen
LIMITS := $(BUILD)/bench/limits
# bench-quick's breakdown of a GET: the channel alone, and the engine alone.
HOP := $(BUILD)/bench/hop
ENGINE_GET := $(BUILD)/bench/engine-get
VERBS_SMOKE := $(BUILD)/tests/verbs-smoke
MEMCACHED_CFLAGS = $(shell $(PKG_CONFIG) --cflags libmemcached)
WIRE_CLIENT := $(BUILD)/tests/wire-client

UNIT_SRC   := $(wildcard tests/unit/test_*.c)
UNIT_BIN   := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)

# The torture tool: its history checker is a library the unit tests use too.
STRESS_LIB_SRC := $(filter-out tests/stress/stress.c,$(wildcard tests/stress/*.c))
STRESS_LIB_OBJ := $(STRESS_LIB_SRC:%.c=$(BUILD)/obj/%.o)
STRESS_BIN     := $(BUILD)/nessie-stress

.PHONY: all test check asan tsan install uninstall clean deps demo config bench bench-quick bench-modes bench-failover bench-capacity bench-flash bench-flash-seed bench-tcp rxe-selftest \
	test-rxe test-rxe-one test-rxe-two test-rxe-asan test-rxe-tsan model
.DEFAULT_GOAL := all
# Keep objects that are only intermediates of test binaries, so rebuilds stay incremental.
.SECONDARY:

all: $(LIBNESSIE) $(LIBNESSIE_SO) $(if $(wildcard tests/stress/stress.c),$(STRESS_BIN)) $(RECEP_BIN) $(WIRE_CLIENT) \
     $(SHIM_LIB) $(CAPI_SCENARIO) $(CHANNELS_SCENARIO) $(NB_OVERLAP) $(LOADGEN) $(LIMITS) $(VERBS_SMOKE) $(HOP) \
     $(ENGINE_GET)

$(SHIM_LIB): $(SHIM_OBJ) $(CHANNEL_OBJ)
	@mkdir -p $(@D)
	$(CC) -shared $(LDFLAGS) -Wl,-soname,libdeception.so $^ -ldl -o $@

$(RECEP_BIN): $(RECEP_OBJ) $(LIBNESSIE)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) $^ $(RECEP_LIBS) $(LDLIBS) -o $@

$(BUILD)/obj/reception/%.o: reception/%.c
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(shell $(PKG_CONFIG) --cflags $(RECEP_PKGS)) $(CFLAGS) -c $< -o $@

$(BUILD)/obj/shim/%.o: shim/%.c
	@mkdir -p $(@D)
	$(CC) -Iinclude -Ishim -D_GNU_SOURCE $(MEMCACHED_CFLAGS) $(CFLAGS) -c $< -o $@

# A C API scenario linked against the real libmemcached (the differential test runs it with and
# without the shim).
$(CAPI_SCENARIO): tests/clients/capi_scenario.c
	@mkdir -p $(@D)
	$(CC) $(MEMCACHED_CFLAGS) -std=gnu11 -g -O1 -Wall -Wextra -Werror $< \
	    $(shell $(PKG_CONFIG) --libs libmemcached) -o $@

# How many channels a shim client holds: links the shim (for memcached_iset...) like nb-overlap.
$(CHANNELS_SCENARIO): tests/clients/channels_scenario.c $(SHIM_LIB)
	@mkdir -p $(@D)
	$(CC) -Iinclude $(MEMCACHED_CFLAGS) -std=gnu11 -g -O2 -Wall -Wextra -Werror -pthread $< \
	    -L$(BUILD) -Wl,-rpath,'$$ORIGIN/..' -ldeception \
	    $(shell $(PKG_CONFIG) --libs libmemcached) -o $@

# The non-blocking example links the shim (which exports memcached_iset...) before libmemcached,
# so it is served by Nessie even without LD_PRELOAD when a reception is there.
$(NB_OVERLAP): bench/nb_overlap.c $(SHIM_LIB)
	@mkdir -p $(@D)
	$(CC) -Iinclude $(MEMCACHED_CFLAGS) -std=gnu11 -g -O2 -Wall -Wextra -Werror $< \
	    -L$(BUILD) -Wl,-rpath,'$$ORIGIN/..' -ldeception \
	    $(shell $(PKG_CONFIG) --libs libmemcached) -o $@

# The benchmarks' load generator: a plain libmemcached program (the shim serves it when preloaded).
$(LOADGEN): bench/loadgen.c
	@mkdir -p $(@D)
	$(CC) -Ibase $(MEMCACHED_CFLAGS) $(NESSIE_CFLAGS) -std=gnu11 -g -O2 $(WARN) -pthread $< \
	    $(shell $(PKG_CONFIG) --libs libmemcached) $(NESSIE_LIBS) -lm -o $@

$(VERBS_SMOKE): tests/rxe/verbs_smoke.c $(LIBNESSIE_INT)
	@mkdir -p $(@D)
	$(CC) $(TEST_CPPFLAGS) $(CFLAGS) $< $(LIBNESSIE_INT) $(LDFLAGS) $(NESSIE_LIBS) $(LDLIBS) -o $@

$(HOP): bench/hop.c $(CHANNEL_OBJ)
	@mkdir -p $(@D)
	$(CC) -Iinclude -Ibase -Ishim -D_GNU_SOURCE $(CFLAGS) $< $(CHANNEL_OBJ) $(LDFLAGS) $(LDLIBS) -o $@

$(ENGINE_GET): bench/engine_get.c $(LIBNESSIE)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(NESSIE_CFLAGS) $(CFLAGS) $< $(LIBNESSIE) $(LDFLAGS) $(NESSIE_LIBS) $(LDLIBS) -lm -o $@

$(LIMITS): bench/limits.c
	@mkdir -p $(@D)
	$(CC) -Ibase -std=gnu11 -g -O2 $(WARN) $< -o $@

$(WIRE_CLIENT): $(BUILD)/obj/tests/reception/wire_client.o $(CHANNEL_OBJ)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) $^ $(LDLIBS) -o $@

$(BUILD)/obj/kvstore/%.o: kvstore/%.c
	@mkdir -p $(@D)
	$(CC) $(KVSTORE_CPPFLAGS) $(NESSIE_CFLAGS) $(CFLAGS) -c $< -o $@

$(BUILD)/obj/base/%.o: base/%.c
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(NESSIE_CFLAGS) $(CFLAGS) -c $< -o $@

$(STRESS_BIN): $(BUILD)/obj/tests/stress/stress.o $(STRESS_LIB_OBJ) $(LIBNESSIE_INT)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) $^ $(NESSIE_LIBS) $(LDLIBS) -o $@

$(LIBNESSIE_INT): $(KVSTORE_OBJ)
	@mkdir -p $(@D)
	rm -f $@
	$(AR) rcs $@ $^

# The public archive: one relocatable object whose only global symbols are nessie_* (the rest
# made local by objcopy), so a static link sees the same API as the shared library.
$(LIBNESSIE): $(KVSTORE_OBJ)
	@mkdir -p $(@D)
	rm -f $@ $(BUILD)/obj/libnessie.o
	$(CC) -r -nostdlib $^ -o $(BUILD)/obj/libnessie.o
	$(OBJCOPY) --wildcard --keep-global-symbol='nessie_*' $(BUILD)/obj/libnessie.o
	$(AR) rcs $@ $(BUILD)/obj/libnessie.o

# The shared library: the version script exports nessie_* and nothing else.
$(LIBNESSIE_SO): $(KVSTORE_OBJ) kvstore/front/libnessie.map
	@mkdir -p $(@D)
	$(CC) -shared $(LDFLAGS) -Wl,-soname,libnessie.so.$(SOVERSION) \
	    -Wl,--version-script=kvstore/front/libnessie.map $(KVSTORE_OBJ) $(NESSIE_LIBS) $(LDLIBS) -o $@
	ln -sf libnessie.so.$(SOVERSION) $(BUILD)/libnessie.so

$(BUILD)/obj/tests/%.o: tests/%.c
	@mkdir -p $(@D)
	$(CC) $(TEST_CPPFLAGS) $(NESSIE_CFLAGS) $(TEST_CFLAGS) $(CFLAGS) -c $< -o $@

$(BUILD)/tests/%: $(BUILD)/obj/tests/unit/%.o $(STRESS_LIB_OBJ) $(LIBNESSIE_INT) $(CHANNEL_OBJ)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) $^ $(NESSIE_LIBS) $(TEST_LIBS) $(LDLIBS) -o $@

# test_views tests reception/views.c, the view's rules, alone (no etcd).
$(BUILD)/obj/tests/unit/test_views.o: TEST_CPPFLAGS += -Ireception
$(BUILD)/tests/test_views: $(BUILD)/obj/tests/unit/test_views.o $(BUILD)/obj/reception/views.o $(LIBNESSIE_INT)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) $^ $(NESSIE_LIBS) $(TEST_LIBS) $(LDLIBS) -o $@

# reception/nessie.conf is the daemon's own description of its configuration (config.c's schema);
# tests/integration/config.sh fails when the checked-in copy is not current.
config: $(RECEP_BIN)
	$(RECEP_BIN) --print-config >reception/nessie.conf

# The README's test command. Installs what is missing (tools/install-deps is a no-op when nothing
# is), then builds and runs everything in a fresh make so pkg-config sees the new packages.
test: deps
	@$(MAKE) --no-print-directory check

deps:
	@tools/install-deps

# The README's demo: installs what is missing, builds, and runs tools/nessie-demo.
demo: deps
	@$(MAKE) --no-print-directory all
	@tools/nessie-demo

# Build and run the tests without the dependency check.
check: all $(UNIT_BIN)
	@SAN=$(SAN) BUILD=$(BUILD) tests/run-unit $(if $(wildcard tests/stress/stress.c),--stress $(STRESS_BIN)) --integration $(UNIT_BIN)

# Benchmarks (bench/): never part of the tests, since timing on a shared machine is noise there.
# bench-quick compares Nessie with memcached in under five minutes; bench runs every experiment.
bench-quick: deps
	@$(MAKE) --no-print-directory all
	@BUILD=$(BUILD) bench/quick.sh

# The protocol's SPIN model (model/README.md): the new design must pass every scenario, today's
# old design must fail.
model: deps
	@model/run.sh

# bench-modes: the client-driven design against the server-driven and hybrid ones (issue 16).
bench-modes: deps
	@$(MAKE) --no-print-directory all
	@BUILD=$(BUILD) bench/modes.sh

# bench-tcp: memcached's protocol on TCP, memcached against a Nessie node's memcached port, the
# same loadgen over TCP (issue 32; about 3 minutes).
bench-tcp: deps
	@$(MAKE) --no-print-directory all
	@BUILD=$(BUILD) bench/tcp.sh

# bench-failover: issue 28's figure, node 2 of 3 lost for 4 s under load, Nessie (shim, shm, etcd
# views) against memcached behind libmemcached with failed-server removal, in one run (< 1 minute).
bench-failover: deps
	@$(MAKE) --no-print-directory all
	@BUILD=$(BUILD) bench/failover.sh

# bench-capacity: issue 29's figures, the items a client on node 0 can keep in a 3 x 32 MiB
# cluster and the Zipf hit ratio, against memcached at the same total memory (< 1 minute).
bench-capacity: deps
	@$(MAKE) --no-print-directory all
	@BUILD=$(BUILD) bench/capacity.sh

# bench-flash: the flash tier against memcached's extstore (issue 31), about 7 minutes (its logs filled to 90 % at the end).
bench-flash: deps
	@$(MAKE) --no-print-directory all
	@BUILD=$(BUILD) bench/flash.sh

# bench-flash-seed: the seed paper's experiments on the flash tier (latency with data 1.5x the
# memory, blocks of 256 KiB chunks read with blocking and non-blocking calls), about 3 minutes.
bench-flash-seed: deps
	@$(MAKE) --no-print-directory all
	@BUILD=$(BUILD) bench/flash-seed.sh

bench: deps
	@$(MAKE) --no-print-directory all
	@BUILD=$(BUILD) bench/run-all.sh

# The Soft-RoCE guest (tools/rxe/): builds it from Debian's packages, proves real verbs run in
# one guest and across two guests on a qemu socket netdev, then runs Nessie's verbs backend there.
rxe-selftest: deps
	@$(MAKE) --no-print-directory all
	@tools/rxe/selftest --image $(BUILD)/rxe
	@BUILD=$(BUILD) tests/rxe/verbs-smoke.sh
	@BUILD=$(BUILD) tests/rxe/cluster-smoke.sh

# Nessie on real verbs (issue: the RDMA fabric): the fabric suite on the verbs backend,
# nessie-stress --check (and with node crashes), the shim with real clients, in one Soft-RoCE
# guest; then one cluster spread over two guests on a virtual wire. Prints a pass/fail summary.
test-rxe: deps
	@$(MAKE) --no-print-directory all $(BUILD)/tests/test_fabric
	@BUILD=$(BUILD) tests/rxe/test-rxe.sh

test-rxe-one: deps
	@$(MAKE) --no-print-directory all $(BUILD)/tests/test_fabric
	@BUILD=$(BUILD) tests/rxe/test-rxe.sh --one

test-rxe-two: deps
	@$(MAKE) --no-print-directory all $(BUILD)/tests/test_fabric
	@BUILD=$(BUILD) tests/rxe/test-rxe.sh --two

# The one-guest verbs steps (no shim) on the sanitizer builds.
test-rxe-asan: deps
	@$(MAKE) --no-print-directory BUILD=build/asan SAN=asan all build/asan/tests/test_fabric
	@BUILD=build/asan SAN=asan tests/rxe/test-rxe.sh

test-rxe-tsan: deps
	@$(MAKE) --no-print-directory BUILD=build/tsan SAN=tsan all build/tsan/tests/test_fabric
	@BUILD=build/tsan SAN=tsan tests/rxe/test-rxe.sh

asan: deps
	@$(MAKE) --no-print-directory BUILD=build/asan SAN=asan check

# ThreadSanitizer needs a fixed address-space layout on kernels with high mmap randomization;
# tests/run-unit re-executes under `setarch -R` when SAN=tsan.
tsan: deps
	@$(MAKE) --no-print-directory BUILD=build/tsan SAN=tsan check

PUBLIC_HEADERS := $(wildcard include/nessie/*.h)
TOOLS := tools/nessie-cluster tools/nessie-run tools/nessie-stat
MAN_PAGES := reception nessie-stress nessie-cluster nessie-run nessie-stat

# Installs the library (archive, shared library, pkg-config file), the public headers, the
# daemon, the torture tool, the operator tools, the example configuration, man pages, the embed
# example and the service unit. Files that name the install's own paths (the unit, nessie.pc) get
# them filled in here, not at build time: they must carry the PREFIX of the install that wrote
# them. systemd also looks in $(PREFIX)/lib/systemd/system for PREFIX=/usr/local.
install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/pkgconfig \
	    $(DESTDIR)$(PREFIX)/include/nessie $(DESTDIR)$(PREFIX)/etc/nessie \
	    $(DESTDIR)$(PREFIX)/lib/systemd/system $(DESTDIR)$(PREFIX)/share/man/man1 \
	    $(DESTDIR)$(PREFIX)/share/doc/nessie/examples
	install -m 0644 $(LIBNESSIE) $(DESTDIR)$(PREFIX)/lib/
	install -m 0755 $(LIBNESSIE_SO) $(DESTDIR)$(PREFIX)/lib/
	ln -sf libnessie.so.$(SOVERSION) $(DESTDIR)$(PREFIX)/lib/libnessie.so
	install -m 0755 $(SHIM_LIB) $(DESTDIR)$(PREFIX)/lib/
	sed -e 's|@VERSION@|$(VERSION)|g' -e 's|@PREFIX@|$(PREFIX)|g' kvstore/front/nessie.pc.in \
	    >'$(DESTDIR)$(PREFIX)/lib/pkgconfig/nessie.pc'
	install -m 0644 $(PUBLIC_HEADERS) $(DESTDIR)$(PREFIX)/include/nessie/
	install -m 0755 $(RECEP_BIN) $(STRESS_BIN) $(TOOLS) $(DESTDIR)$(PREFIX)/bin/
	install -m 0644 reception/nessie.conf $(DESTDIR)$(PREFIX)/etc/nessie/
	install -m 0644 examples/embed.c $(DESTDIR)$(PREFIX)/share/doc/nessie/examples/
	sed -e 's|@BINDIR@|$(PREFIX)/bin|g' -e 's|@SYSCONFDIR@|$(PREFIX)/etc|g' \
	    tools/systemd/nessie-reception@.service.in \
	    >'$(DESTDIR)$(PREFIX)/lib/systemd/system/nessie-reception@.service'
	chmod 0644 '$(DESTDIR)$(PREFIX)/lib/systemd/system/nessie-reception@.service'
	@# Man pages from each program's --help, with a one-line description of its own.
	@if command -v help2man >/dev/null 2>&1; then \
	    for p in $(MAN_PAGES); do \
	        case $$p in \
	        reception) src=$(RECEP_BIN); what="the Nessie reception daemon of one node";; \
	        nessie-stress) src=$(STRESS_BIN); what="torture the Nessie engine and check its answers";; \
	        nessie-cluster) src=tools/$$p; what="start, stop or show a local Nessie cluster";; \
	        nessie-run) src=tools/$$p; what="run a memcached client with the Nessie shim";; \
	        nessie-stat) src=tools/$$p; what="show a Nessie daemon's statistics";; \
	        esac; \
	        help2man -N --no-discard-stderr --version-string=$(VERSION) -n "$$what" \
	            -o '$(DESTDIR)$(PREFIX)/share/man/man1/'$$p.1 $$src || exit 1; \
	    done; \
	else echo "install: help2man not found (tools/install-deps installs it): no man pages"; fi

uninstall:
	rm -f '$(DESTDIR)$(PREFIX)/lib/systemd/system/nessie-reception@.service'
	rm -f $(DESTDIR)$(PREFIX)/lib/libnessie.a $(DESTDIR)$(PREFIX)/lib/libnessie.so \
	      $(DESTDIR)$(PREFIX)/lib/libnessie.so.$(SOVERSION) $(DESTDIR)$(PREFIX)/lib/libdeception.so \
	      $(DESTDIR)$(PREFIX)/lib/pkgconfig/nessie.pc
	rm -f $(DESTDIR)$(PREFIX)/bin/reception $(DESTDIR)$(PREFIX)/bin/nessie-stress \
	      $(addprefix $(DESTDIR)$(PREFIX)/bin/,$(notdir $(TOOLS)))
	rm -f $(MAN_PAGES:%=$(DESTDIR)$(PREFIX)/share/man/man1/%.1)
	rm -rf $(DESTDIR)$(PREFIX)/etc/nessie $(DESTDIR)$(PREFIX)/include/nessie \
	       $(DESTDIR)$(PREFIX)/share/doc/nessie

clean:
	rm -rf build

-include $(RECEP_OBJ:.o=.d) $(CHANNEL_OBJ:.o=.d) $(SHIM_OBJ:.o=.d) $(BUILD)/obj/tests/reception/wire_client.d \
         $(KVSTORE_OBJ:.o=.d) $(UNIT_SRC:tests/unit/%.c=$(BUILD)/obj/tests/unit/%.d) \
         $(STRESS_LIB_OBJ:.o=.d) $(BUILD)/obj/tests/stress/stress.d $(HOP).d $(ENGINE_GET).d
