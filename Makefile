# kvpool — plain Makefile in liburing's manner.
#   make                 build daemons, CLI, libkvpool.a/.so, tests
#   make test            -Werror build, then run every test (tests/run.sh)
#   make SANITIZE=1 test the same under ASan+UBSan (objects in build-san/)
#   make test-vm         the systemd units in a Debian VM (root, qemu; tests/vm/)
#   make fuzz            libFuzzer targets with clang (build-fuzz/)
#   make install         PREFIX=/usr/local DESTDIR=
#   make deps            install the Debian packages the build, tests and benchmarks need
#                        (root; a plain make only checks the build's and names them)
# V=1 shows the full commands.

CC ?= cc
CFLAGS ?= -O2 -g
PREFIX ?= /usr/local
LIBDIR ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
BINDIR ?= $(PREFIX)/bin
SBINDIR ?= $(PREFIX)/sbin
MANDIR ?= $(PREFIX)/share/man
SYSCONFDIR ?= /etc
SYSTEMDDIR ?= $(PREFIX)/lib/systemd/system
PYTHON ?= python3

VERSION := 0.2.0
# 1 since 0.2.0: the KVP_E* codes moved to -5001..-5023 (kvpool.h)
SOVERSION := 1

ifdef SANITIZE
BUILD ?= build-san
override CFLAGS += -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
override LDFLAGS += -fsanitize=address,undefined
endif
ifdef FUZZ
BUILD ?= build-fuzz
override CFLAGS += -fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer -DKVP_FUZZ=1
override LDFLAGS += -fsanitize=address,undefined
endif
ifdef TSAN
BUILD ?= build-tsan
override CFLAGS += -fsanitize=thread
override LDFLAGS += -fsanitize=thread
endif
BUILD ?= build

# Flags of the Debian packages come from $(BUILD)/config.mk, which
# tools/config.sh writes only after `tools/deps.sh --check build` found the
# packages installed; make builds it first and then re-reads this file, so
# the first plain `make` on a fresh machine computes its flags from the
# installed packages. A plain `make` installs nothing: a missing package
# stops it with the exact apt-get line (and the pkg-config names); `make
# deps` (root) installs them, as `make test` and tools/quickstart.sh do.
# Goals that build nothing do not need it.
CONFIG_MK := $(BUILD)/config.mk
ifneq ($(filter-out clean deps uninstall run,$(or $(MAKECMDGOALS),all)),)
include $(CONFIG_MK)
endif

override CFLAGS += -std=gnu11 -D_GNU_SOURCE -fPIC -pthread \
	-Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
	-Wformat=2 -Wno-unused-parameter -Wno-format-nonliteral \
	-Isrc/common -Isrc/lib -Isrc/node -Isrc/cli -Ishm -Imaster -Ifuse -MMD -MP \
	-DKVP_VERSION=\"$(VERSION)\" $(PKG_CFLAGS)
ifdef WERROR
override CFLAGS += -Werror
endif
# Programs record only the shared objects they use.
override LDFLAGS += -Wl,--as-needed

# A partly written target (a link that failed half-way) is deleted.
.DELETE_ON_ERROR:
# Objects of tests and benchmarks are kept (not removed as intermediates).
.SECONDARY:

# One archive per product; files named *_main.c are programs.
#  libkvpool: src/lib plus exactly the plumbing it uses (its closure).
#  support:   the rest of src/common and shm/ (event loop, HTTP, grants,
#             allocator, scanner) that daemons and tools share.
LIB_CLOSURE := src/common/conf.c src/common/conf_parse.c src/common/conf_table.c \
	src/common/clock.c src/common/cuda.c src/common/log.c src/common/net.c src/common/rdma.c \
	src/common/rdma_codec.c src/common/rdma_eng.c src/common/tls.c src/common/wire.c shm/extent.c shm/segment.c shm/segmap.c \
	src/common/etcd.c src/common/json.c src/common/leader.c
LIB_SRCS := $(wildcard src/lib/*.c) $(LIB_CLOSURE)
SUPPORT_SRCS := $(filter-out $(LIB_CLOSURE),$(wildcard src/common/*.c shm/*.c))
NODE_SRCS := $(filter-out %_main.c,$(wildcard src/node/*.c))
CLI_SRCS := $(filter-out %_main.c,$(wildcard src/cli/*.c))
FUSE_SRCS := $(wildcard fuse/*.c)
MASTER_SRCS := $(filter-out %_main.c,$(wildcard master/*.c))
objs = $(1:%.c=$(BUILD)/%.o)

LIB_OBJS := $(call objs,$(LIB_SRCS))
LIB_A := $(BUILD)/libkvpool.a
LIB_SO := $(BUILD)/libkvpool.so.$(VERSION)
SUPPORT_A := $(BUILD)/libkvpool_support.a
NODE_A := $(BUILD)/libkvpool_node.a
CLI_A := $(BUILD)/libkvpool_cli.a
FUSE_A := $(BUILD)/libkvpool_fuse.a
MASTER_A := $(BUILD)/libkvpool_master.a
ARCHIVES := $(NODE_A) $(CLI_A) $(FUSE_A) $(MASTER_A) $(SUPPORT_A) $(LIB_A)
# Every archive in one group (the linker takes only the objects a program
# needs, in any order), and every library; --as-needed drops the unused.
LINK_ARCHIVES = -Wl,--start-group $(ARCHIVES) -Wl,--end-group
LIBS = $(LIBS_FUSE) $(LIBS_URING) $(LIBS_HTTP) $(LIBS_SYSTEMD) $(LIBS_CRYPTO) \
	$(LIBS_LIB) -ldl -lpthread -lm
# What libkvpool.so links (and kvpool.pc's Libs.private says): nothing else.
# libcurl (etcd:// master addresses) is dlopen()ed by src/common/etcd.c.
LIB_LIBS = $(LIBS_LIB) -ldl -lpthread -lm

PROGS := $(BUILD)/kvpool-master $(BUILD)/kvpool-node $(BUILD)/kvpool

TEST_SRCS := $(wildcard tests/unit/t_*.c)
TESTS := $(TEST_SRCS:tests/unit/%.c=$(BUILD)/tests/%)
# The C test harness, built once and linked into every test and benchmark.
TESTLIB_O := $(BUILD)/tests/unit/testlib.o
BENCH_SRCS := $(wildcard tests/bench/b_*.c)
BENCHES := $(BENCH_SRCS:tests/bench/%.c=$(BUILD)/bench/%)
FUZZ_SRCS := $(wildcard tests/fuzz/fuzz_*.c)
FUZZERS := $(FUZZ_SRCS:tests/fuzz/%.c=$(BUILD)/fuzz/%)

ifneq ($(V),1)
Q = @
QCC = @echo "  CC      $@";
QLD = @echo "  LD      $@";
QAR = @echo "  AR      $@";
else
QCC =
QLD =
QAR =
endif

.PHONY: all progs libs tests benches fuzz fuzz-targets fuzz-run test check deps \
	install install-core uninstall clean soak ha-figures ha-scale run test-vm

all: progs libs tests benches

progs: $(PROGS)
libs: $(LIB_A) $(LIB_SO)
tests: $(TESTS)
benches: $(BENCHES)

$(CONFIG_MK): tools/deps.sh tools/config.sh
	$(Q)mkdir -p $(BUILD)
	$(Q)tools/deps.sh --check build
	$(Q)tools/config.sh >$@.tmp
	$(Q)mv $@.tmp $@

deps:
	tools/deps.sh build test bench

$(BUILD)/%.o: %.c | $(CONFIG_MK)
	$(Q)mkdir -p $(dir $@)
	$(QCC)$(CC) $(CFLAGS) -c -o $@ $<

# The status page (ui/status.html) compiled in as a byte array: od(1) and
# sed, no network (tools/embed.sh); src/common/ui.c serves it.
UI_C := $(BUILD)/gen/ui_status.c
UI_O := $(BUILD)/gen/ui_status.o
$(UI_C): ui/status.html tools/embed.sh
	$(Q)mkdir -p $(dir $@)
	$(Q)tools/embed.sh ui_status_html ui/status.html >$@.tmp
	$(Q)mv $@.tmp $@
$(UI_O): $(UI_C) | $(CONFIG_MK)
	$(QCC)$(CC) $(CFLAGS) -c -o $@ $<

$(BUILD)/%.a:
	$(Q)rm -f $@
	$(QAR)$(AR) rcs $@ $^

$(LIB_A): $(LIB_OBJS)
$(SUPPORT_A): $(call objs,$(SUPPORT_SRCS)) $(UI_O)
$(NODE_A): $(call objs,$(NODE_SRCS))
$(CLI_A): $(call objs,$(CLI_SRCS))
$(FUSE_A): $(call objs,$(FUSE_SRCS))
$(MASTER_A): $(call objs,$(MASTER_SRCS))

# -z defs: a library that would not load (an undefined symbol) does not link.
$(LIB_SO): $(LIB_OBJS) src/lib/libkvpool.map $(CONFIG_MK)
	$(QLD)$(CC) -shared -Wl,-soname,libkvpool.so.$(SOVERSION) -Wl,-z,defs \
		-Wl,--version-script=src/lib/libkvpool.map $(LDFLAGS) -o $@ $(LIB_OBJS) $(LIB_LIBS)
	$(Q)ln -sf libkvpool.so.$(VERSION) $(BUILD)/libkvpool.so.$(SOVERSION)
	$(Q)ln -sf libkvpool.so.$(VERSION) $(BUILD)/libkvpool.so

$(BUILD)/kvpool-master: $(BUILD)/master/master_main.o $(ARCHIVES) $(CONFIG_MK)
	$(QLD)$(CC) $(LDFLAGS) -o $@ $< $(LINK_ARCHIVES) $(LIBS)

$(BUILD)/kvpool-node: $(BUILD)/src/node/node_main.o $(ARCHIVES) $(CONFIG_MK)
	$(QLD)$(CC) $(LDFLAGS) -o $@ $< $(LINK_ARCHIVES) $(LIBS)

# zlib (gzip-compressed traces of `kvpool replay`) is the tool's alone; the
# tests and fuzz targets of src/cli/trace.c link it too.
$(BUILD)/kvpool: $(BUILD)/src/cli/cli_main.o $(ARCHIVES) $(CONFIG_MK)
	$(QLD)$(CC) $(LDFLAGS) -o $@ $< $(LINK_ARCHIVES) $(LIBS) $(LIBS_Z)

$(BUILD)/tests/%: $(BUILD)/tests/unit/%.o $(TESTLIB_O) $(ARCHIVES) $(CONFIG_MK)
	$(Q)mkdir -p $(dir $@)
	$(QLD)$(CC) $(LDFLAGS) -o $@ $< $(TESTLIB_O) $(LINK_ARCHIVES) $(LIBS) $(LIBS_Z)

$(BUILD)/bench/%: $(BUILD)/tests/bench/%.o $(TESTLIB_O) $(ARCHIVES) $(CONFIG_MK)
	$(Q)mkdir -p $(dir $@)
	$(QLD)$(CC) $(LDFLAGS) -o $@ $< $(TESTLIB_O) $(LINK_ARCHIVES) $(LIBS)

# libFuzzer: the same sources built by clang with the fuzzer runtime.
fuzz:
	@if command -v clang >/dev/null; then \
		$(MAKE) --no-print-directory CC=clang FUZZ=1 SANITIZE= TSAN= BUILD=build-fuzz fuzz-targets; \
	else echo "fuzz: clang not installed (apt-get install clang)"; exit 1; fi

fuzz-targets: $(FUZZERS)

$(BUILD)/fuzz/%: $(BUILD)/tests/fuzz/%.o $(ARCHIVES) $(CONFIG_MK)
	$(Q)mkdir -p $(dir $@)
	$(QLD)$(CC) -fsanitize=fuzzer,address,undefined $(LDFLAGS) -o $@ $< $(LINK_ARCHIVES) $(LIBS) $(LIBS_Z)

# Runs every fuzz target for FUZZ_SECONDS each (default 60).
fuzz-run: fuzz
	tests/fuzz/run.sh build-fuzz/fuzz $${FUZZ_SECONDS:-60}

# make test's builds take every CPU unless make was given -j itself
# (TEST_JOBS=1: one compiler at a time): $(MAKEFLAGS) holds -j only in a recipe.
TEST_MAKE_J = $(if $(findstring -j,$(MAKEFLAGS)),,-j$(or $(TEST_JOBS),$(shell nproc 2>/dev/null || echo 1)))

# The bench group too: make test runs every benchmark in its smoke mode.
test check:
	tools/deps.sh build test bench
	$(Q)$(MAKE) --no-print-directory $(TEST_MAKE_J) WERROR=1 all
	$(Q)if command -v clang >/dev/null; then $(MAKE) --no-print-directory $(TEST_MAKE_J) fuzz; fi
	tests/run.sh $(BUILD)

# The units under a real systemd: a Debian VM booted in qemu (root; a skip
# (77) is reported, not failed). See tests/vm/systemd_vm.sh.
test-vm:
	tools/deps.sh vm
	$(Q)tests/vm/systemd_vm.sh; rc=$$?; [ $$rc != 77 ] || { echo "test-vm: SKIPPED"; rc=0; }; exit $$rc

# The quick start: a master, a node and the FUSE view on loopback, until Ctrl-C.
run:
	tools/quickstart.sh

soak: all
	tests/soak.sh $(BUILD)

# The failover figures of docs/ha.md (a few minutes; root adds the nft cut).
ha-figures: all
	tests/soak/ha_figures.sh $(BUILD)

# Failover and restart at size: 100k and 1M objects (HA_SIZES), warm and
# cold standby, a lone master's restart, RSS per object (docs/ha.md).
ha-scale: all
	tests/bench/ha_scale_bench.sh $(BUILD)

install: all install-core

# What the programs and the library need, without the tests and benchmarks
# (debian/rules installs with it and install-python).
install-core: progs libs
	tools/install.sh "$(DESTDIR)" "$(PREFIX)" "$(BUILD)" "$(VERSION)" "$(SOVERSION)"

uninstall:
	tools/install.sh --uninstall "$(DESTDIR)" "$(PREFIX)" "$(BUILD)" "$(VERSION)" "$(SOVERSION)"

clean:
	rm -rf build build-san build-fuzz build-tsan

ALL_OBJS := $(call objs,$(LIB_SRCS) $(SUPPORT_SRCS) $(NODE_SRCS) $(CLI_SRCS) $(FUSE_SRCS) \
	$(MASTER_SRCS)) $(BUILD)/master/master_main.o $(BUILD)/src/node/node_main.o \
	$(BUILD)/src/cli/cli_main.o $(UI_O) $(TEST_SRCS:%.c=$(BUILD)/%.o) $(TESTLIB_O) $(BENCH_SRCS:%.c=$(BUILD)/%.o) $(FUZZ_SRCS:%.c=$(BUILD)/%.o)
-include $(ALL_OBJS:.o=.d)
-include python/Makefile.inc
-include tests/soak/Makefile.inc
