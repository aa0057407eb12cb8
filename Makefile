# kvpool — plain Makefile in liburing's manner.
#   make                 build daemons, CLI, libkvpool.a/.so, tests
#   make test            -Werror build, then run every test (tests/run.sh)
#   make SANITIZE=1 test the same under ASan+UBSan (objects in build-san/)
#   make fuzz            libFuzzer targets with clang (build-fuzz/)
#   make install         PREFIX=/usr/local DESTDIR=
#   make deps            install the Debian packages the build and tests need
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

VERSION := 0.1.0
SOVERSION := 0

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

override CFLAGS += -std=gnu11 -D_GNU_SOURCE -fPIC -pthread \
	-Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
	-Wformat=2 -Wno-unused-parameter -Wno-format-nonliteral \
	-Isrc/common -Isrc/lib -Isrc/node -Isrc/cli -Ishm -Imaster -Ifuse -MMD -MP \
	-DKVP_VERSION=\"$(VERSION)\" $(shell pkg-config --cflags fuse3 2>/dev/null)
ifdef WERROR
override CFLAGS += -Werror
endif

PKGS := fuse3 inih liburing libmicrohttpd libsystemd libxxhash
LIBS := $(shell pkg-config --libs $(PKGS) 2>/dev/null) -lnuma -libverbs -lcrypto -ldl -lpthread -lm

# Files named *_main.c are programs; everything else in src/*/ shm/ fuse/ is
# the core (libkvpool), master/ is linked into the master and the tests only.
CORE_SRCS := $(filter-out %_main.c,$(wildcard src/*/*.c shm/*.c fuse/*.c))
MASTER_SRCS := $(filter-out %_main.c,$(wildcard master/*.c))
CORE_OBJS := $(CORE_SRCS:%.c=$(BUILD)/%.o)
MASTER_OBJS := $(MASTER_SRCS:%.c=$(BUILD)/%.o)
CORE_A := $(BUILD)/libkvpool_core.a
MASTER_A := $(BUILD)/libkvpool_master.a

PROGS := $(if $(wildcard master/master_main.c),$(BUILD)/kvpool-master) \
	$(if $(wildcard src/node/node_main.c),$(BUILD)/kvpool-node) \
	$(if $(wildcard src/cli/cli_main.c),$(BUILD)/kvpool)
LIB_A := $(BUILD)/libkvpool.a
LIB_SO := $(BUILD)/libkvpool.so.$(VERSION)

TEST_SRCS := $(wildcard tests/unit/t_*.c)
TESTS := $(TEST_SRCS:tests/unit/%.c=$(BUILD)/tests/%)
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

DEPS_OK := $(BUILD)/.deps-ok

.PHONY: all progs libs tests benches fuzz fuzz-targets fuzz-run test check deps \
	install uninstall clean soak run

all: progs libs tests benches

progs: $(PROGS)
libs: $(LIB_A) $(LIB_SO)
tests: $(TESTS)
benches: $(BENCHES)

# The dependency check runs once per build tree (and again when the list changes).
$(DEPS_OK): tools/deps.sh
	$(Q)mkdir -p $(BUILD)
	$(Q)tools/deps.sh build
	$(Q)touch $@

deps:
	tools/deps.sh build test

$(BUILD)/%.o: %.c | $(DEPS_OK)
	$(Q)mkdir -p $(dir $@)
	$(QCC)$(CC) $(CFLAGS) -c -o $@ $<

$(CORE_A): $(CORE_OBJS)
	$(Q)rm -f $@
	$(QAR)$(AR) rcs $@ $^

$(MASTER_A): $(MASTER_OBJS)
	$(Q)rm -f $@
	$(QAR)$(AR) rcs $@ $^

$(LIB_A): $(CORE_A)
	$(Q)cp $< $@

$(LIB_SO): $(CORE_OBJS) src/lib/libkvpool.map
	$(QLD)$(CC) -shared -Wl,-soname,libkvpool.so.$(SOVERSION) \
		-Wl,--version-script=src/lib/libkvpool.map $(LDFLAGS) -o $@ $(CORE_OBJS) $(LIBS)
	$(Q)ln -sf libkvpool.so.$(VERSION) $(BUILD)/libkvpool.so.$(SOVERSION)
	$(Q)ln -sf libkvpool.so.$(VERSION) $(BUILD)/libkvpool.so

$(BUILD)/kvpool-master: $(BUILD)/master/master_main.o $(MASTER_A) $(CORE_A)
	$(QLD)$(CC) $(LDFLAGS) -o $@ $^ $(LIBS)

$(BUILD)/kvpool-node: $(BUILD)/src/node/node_main.o $(CORE_A)
	$(QLD)$(CC) $(LDFLAGS) -o $@ $^ $(LIBS)

$(BUILD)/kvpool: $(BUILD)/src/cli/cli_main.o $(CORE_A)
	$(QLD)$(CC) $(LDFLAGS) -o $@ $^ $(LIBS)

$(BUILD)/tests/%: $(BUILD)/tests/unit/%.o $(MASTER_A) $(CORE_A)
	$(Q)mkdir -p $(dir $@)
	$(QLD)$(CC) $(LDFLAGS) -o $@ $^ $(LIBS)

$(BUILD)/bench/%: $(BUILD)/tests/bench/%.o $(MASTER_A) $(CORE_A)
	$(Q)mkdir -p $(dir $@)
	$(QLD)$(CC) $(LDFLAGS) -o $@ $^ $(LIBS)

# libFuzzer: the same sources built by clang with the fuzzer runtime.
fuzz:
	@if command -v clang >/dev/null; then \
		$(MAKE) --no-print-directory CC=clang FUZZ=1 SANITIZE= TSAN= BUILD=build-fuzz fuzz-targets; \
	else echo "fuzz: clang not installed (apt-get install clang)"; exit 1; fi

fuzz-targets: $(FUZZERS)

$(BUILD)/fuzz/%: $(BUILD)/tests/fuzz/%.o $(MASTER_A) $(CORE_A)
	$(Q)mkdir -p $(dir $@)
	$(QLD)$(CC) -fsanitize=fuzzer,address,undefined -o $@ $^ $(LIBS)

# Runs every fuzz target for FUZZ_SECONDS each (default 60).
fuzz-run: fuzz
	tests/fuzz/run.sh build-fuzz/fuzz $${FUZZ_SECONDS:-60}

test check:
	tools/deps.sh build test
	$(Q)$(MAKE) --no-print-directory WERROR=1 all
	$(Q)if command -v clang >/dev/null; then $(MAKE) --no-print-directory fuzz; fi
	tests/run.sh $(BUILD)

# The quick start: a master, a node and the FUSE view on loopback, until Ctrl-C.
run:
	tools/quickstart.sh

soak: all
	tests/soak.sh $(BUILD)

install: all
	tools/install.sh "$(DESTDIR)" "$(PREFIX)" "$(BUILD)" "$(VERSION)"

uninstall:
	tools/install.sh --uninstall "$(DESTDIR)" "$(PREFIX)" "$(BUILD)" "$(VERSION)"

clean:
	rm -rf build build-san build-fuzz build-tsan

ALL_OBJS := $(CORE_OBJS) $(MASTER_OBJS) $(BUILD)/master/master_main.o $(BUILD)/src/node/node_main.o \
	$(BUILD)/src/cli/cli_main.o $(TEST_SRCS:%.c=$(BUILD)/%.o) $(BENCH_SRCS:%.c=$(BUILD)/%.o) $(FUZZ_SRCS:%.c=$(BUILD)/%.o)
-include $(ALL_OBJS:.o=.d)
-include python/Makefile.inc
-include tests/soak/Makefile.inc
