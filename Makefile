# tt-device-queue: one executable (`serve` is the daemon, the rest the client); libsqlite3 is
# its only library.
CC      ?= cc
CFLAGS  ?= -O2 -g
override CFLAGS += -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes
# libraries of the dynamic link (LINK=dynamic) and of the test programs
LDLIBS  = -lsqlite3 -lm
# LINK=static (the default): ./tt-device-queue is one fully static executable (libsqlite3.a and
# glibc's libc.a inside, see `make static` below): no shared-library pages, so the daemon's
# peak memory stays within its 4 MiB budget (docs/PERFORMANCE.md), and the file runs on any
# Linux host of its architecture.
# LINK=dynamic links libsqlite3.so and glibc dynamically; `make asan` uses it, since the
# sanitizer runtimes cannot link -static. Changing LINK relinks (build/link.* records it).
LINK    ?= static
PREFIX  ?= /usr/local
DESTDIR ?=
PROVE   ?= prove
PYTHON  ?= python3
VERSION = 0.1.0

BIN     = tt-device-queue
OBJS    = ttq.o http.o json.o sched.o store.o proc.o cli.o
UNIT    = tests/bin/test_json tests/bin/test_http tests/bin/test_sched tests/bin/test_store tests/bin/test_proc \
          tests/bin/test_shim
# integration tests: Python scripts that start the real daemon and print TAP (t_slurm.py
# a Slurm cluster too: it needs root and Debian's slurmctld, slurmd and slurm-client)
ITESTS  = $(wildcard tests/t_*.py)

# the static build's pieces (shared with `make static`, whose own objects live in build/static)
STATIC_DIR  = build/static
SQLITE_A   ?= $(shell $(CC) -print-file-name=libsqlite3.a)
OBJCOPY    ?= objcopy
HEADERS     = http.h json.h sched.h store.h proc.h cli.h

all: $(BIN)

ifeq ($(LINK),static)
$(BIN): $(OBJS) static_shim.o $(STATIC_DIR)/libsqlite3-shim.a build/link.$(LINK)
	$(CC) -static $(CFLAGS) $(LDFLAGS) -o $@ $(OBJS) static_shim.o \
		$(STATIC_DIR)/libsqlite3-shim.a -lm
else ifeq ($(LINK),dynamic)
$(BIN): $(OBJS) build/link.$(LINK)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(OBJS) $(LDLIBS)
else
$(error LINK must be static or dynamic, not '$(LINK)')
endif

build/link.$(LINK):
	mkdir -p build && rm -f build/link.* && touch $@

ttq.o: ttq.c http.h json.h sched.h store.h proc.h cli.h health_check.inc
http.o: http.c http.h json.h
json.o: json.c json.h
sched.o: sched.c sched.h
store.o: store.c store.h sched.h
proc.o: proc.c proc.h json.h
cli.o: cli.c cli.h http.h json.h skill.inc
static_shim.o: packaging/static_shim.c packaging/static_shim.h
	$(CC) $(CFLAGS) -c -o $@ packaging/static_shim.c

# files embedded in the executable as C array initializers, so a copied binary carries them:
# health_check.py (its default health check) and the agent skill (`tt-device-queue skill`)
EMBED = od -An -v -tx1 $< | sed 's/\([0-9a-f][0-9a-f]\)/0x\1,/g' > $@.tmp && mv $@.tmp $@
SKILL = skills/tt-device-queue/SKILL.md
health_check.inc: health_check.py
	$(EMBED)
skill.inc: $(SKILL)
	$(EMBED)

ttq.o: CFLAGS += -DTTQ_VERSION='"$(VERSION)"'

tests/bin:
	mkdir -p $@

tests/bin/test_json: tests/test_json.c json.o tests/tap.h tests/guard.h tests/utf8ref.h | tests/bin
	$(CC) $(CFLAGS) -I. -o $@ tests/test_json.c json.o
tests/bin/test_http: tests/test_http.c http.o json.o tests/tap.h tests/guard.h | tests/bin
	$(CC) $(CFLAGS) -I. -o $@ tests/test_http.c http.o json.o
tests/bin/test_sched: tests/test_sched.c sched.o tests/tap.h | tests/bin
	$(CC) $(CFLAGS) -I. -o $@ tests/test_sched.c sched.o
tests/bin/test_store: tests/test_store.c store.o sched.o tests/tap.h | tests/bin
	$(CC) $(CFLAGS) -I. -o $@ tests/test_store.c store.o sched.o $(LDLIBS)
tests/bin/test_proc: tests/test_proc.c proc.o json.o tests/tap.h | tests/bin
	$(CC) $(CFLAGS) -I. -o $@ tests/test_proc.c proc.o json.o
tests/bin/test_shim: tests/test_shim.c static_shim.o packaging/static_shim.h tests/tap.h | tests/bin
	$(CC) $(CFLAGS) -I. -o $@ tests/test_shim.c static_shim.o
# the client needs only http.o and json.o of the other modules: this link proves it
tests/bin/client-only: tests/client_only.c cli.o http.o json.o cli.h | tests/bin
	$(CC) $(CFLAGS) $(LDFLAGS) -I. -o $@ tests/client_only.c cli.o http.o json.o -lm

# the performance figures, measured against the real daemon (prints figures; not a test;
# method and targets in docs/PERFORMANCE.md): BENCH_BEFORE=path/to/an/older/tt-device-queue
# measures both, interleaved, and ends with a before/after table; BENCH_FULL=1 for the full
# counts, BENCH_ONLY=name,... for some figures
tests/bin/bench: tests/bench.c | tests/bin
	$(CC) $(CFLAGS) -o $@ tests/bench.c $(LDLIBS)

bench: $(BIN) tests/bin/bench
	tests/bin/bench

# the stress test: 900 jobs from 64 clients on both cards behind a blocker (tests/t_stress.py
# runs a smaller count in `make test`); STRESS_JOBS and STRESS_CLIENTS override
stress: $(BIN)
	$(PYTHON) tests/stress.py --jobs $${STRESS_JOBS:-900} --clients $${STRESS_CLIENTS:-64}

# the daemon on two simulated cards running a real command end to end
demo: $(BIN) tests/bin/test_json
	tests/demo.sh

test: $(BIN) $(UNIT) tests/bin/client-only
	$(PROVE) --exec '' $(UNIT) $(ITESTS)

# only the unit test binaries (seconds; what install.sh runs by default)
unit-test: $(UNIT)
	$(PROVE) --exec '' $(UNIT)

# the same suite under AddressSanitizer and UndefinedBehaviorSanitizer, built in a copy of the
# tree (build/asan-tree) so the normal build here is left alone; linked dynamically (LINK)
ASAN_DIR   = build/asan-tree
ASAN_FLAGS = -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all
asan:
	rm -rf $(ASAN_DIR) && mkdir -p $(ASAN_DIR)
	tar -c --exclude=./build --exclude=./.git . | tar -x -C $(ASAN_DIR)
	$(MAKE) -C $(ASAN_DIR) clean
	$(MAKE) -C $(ASAN_DIR) test CFLAGS='$(ASAN_FLAGS)' LDFLAGS='-fsanitize=address,undefined' \
		LINK=dynamic

# everything CI runs: the suite on the normal build, then again under the sanitizers
check: test asan

# The static link (libsqlite3.a from libsqlite3-dev, libc.a from libc6-dev), of `make` with
# LINK=static and of `make static`. A static binary cannot safely use glibc's dlopen on
# another host: SQLite's copy gets its dl* calls renamed to the stubs of
# packaging/static_shim.c (only extensions use them; we load none), so the link has no
# warnings (nothing resolves names: the client takes an IPv4 address or localhost). The hooks
# of SQLite's built-in extensions (FTS3/4, FTS5, R*Tree, sqlite_stmt, dbstat; unused here) are
# renamed to no-ops there too, which keeps their code, about 320 KiB of every daemon's
# resident memory, out of the link. `make static` builds
# tt-device-queue-static the same way as ./tt-device-queue with LINK=static, from its own
# objects in build/static, whatever LINK and CFLAGS say, so it never mixes with the sanitizer
# build (tests/t_ops.py builds and runs it in that tree too).
STATIC_BIN  = tt-device-queue-static
STATIC_OBJS = $(addprefix $(STATIC_DIR)/,$(OBJS) static_shim.o)

static: $(STATIC_BIN)

$(STATIC_BIN): $(STATIC_OBJS) $(STATIC_DIR)/libsqlite3-shim.a
	$(CC) -static $(CFLAGS) -o $@ $(STATIC_OBJS) $(STATIC_DIR)/libsqlite3-shim.a -lm

SQLITE_RENAMES = $(foreach f,dlopen dlsym dlclose dlerror,$(f)=ttq_static_$(f)) \
                 sqlite3Fts3Init=ttq_static_fts3_init sqlite3Fts5Init=ttq_static_fts5_init \
                 sqlite3RtreeInit=ttq_static_rtree_init \
                 sqlite3StmtVtabInit=ttq_static_stmt_vtab_init \
                 sqlite3DbstatRegister=ttq_static_dbstat_init
$(STATIC_DIR)/libsqlite3-shim.a: $(SQLITE_A) | $(STATIC_DIR)
	$(OBJCOPY) $(addprefix --redefine-sym ,$(SQLITE_RENAMES)) $(SQLITE_A) $@

$(STATIC_DIR)/%.o: %.c $(HEADERS) | $(STATIC_DIR)
	$(CC) $(CFLAGS) -c -o $@ $<
$(STATIC_DIR)/static_shim.o: packaging/static_shim.c packaging/static_shim.h | $(STATIC_DIR)
	$(CC) $(CFLAGS) -c -o $@ $<
$(STATIC_DIR)/ttq.o: health_check.inc
$(STATIC_DIR)/cli.o: skill.inc
$(STATIC_DIR)/ttq.o: CFLAGS += -DTTQ_VERSION='"$(VERSION)"'

$(STATIC_DIR):
	mkdir -p $@

# `make install PREFIX=/usr/local DESTDIR=`: the executable (./tt-device-queue, static unless
# LINK=dynamic; INSTALL_BIN=tt-device-queue-static installs `make static`'s), the man page,
# bash completion. An install with a systemd unit, for this user or (--system) for the host, is
# ./install.sh.
INSTALL_BIN ?= $(BIN)
BINDIR       = $(PREFIX)/bin
MANDIR       = $(PREFIX)/share/man/man1
BASHCOMPDIR  = $(PREFIX)/share/bash-completion/completions

install: $(INSTALL_BIN)
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(MANDIR) $(DESTDIR)$(BASHCOMPDIR)
	install -m 0755 $(INSTALL_BIN) $(DESTDIR)$(BINDIR)/$(BIN)
	install -m 0644 tt-device-queue.1 $(DESTDIR)$(MANDIR)/tt-device-queue.1
	install -m 0644 completions/tt-device-queue.bash $(DESTDIR)$(BASHCOMPDIR)/tt-device-queue

uninstall:
	rm -f $(DESTDIR)$(BINDIR)/$(BIN) $(DESTDIR)$(MANDIR)/tt-device-queue.1 \
		$(DESTDIR)$(BASHCOMPDIR)/tt-device-queue

# install.sh, the Slurm scripts and the completion through shellcheck, the man page through groff's warnings
lint:
	shellcheck install.sh slurm/prolog slurm/epilog
	shellcheck -s bash completions/tt-device-queue.bash
	@out=$$(groff -man -Tutf8 -ww -z tt-device-queue.1 2>&1); \
		if [ -n "$$out" ]; then echo "$$out"; exit 1; fi

# libFuzzer targets (clang); FUZZ_SECONDS per target
FUZZ_SECONDS ?= 10
FUZZ_CC      ?= clang
FUZZ_FLAGS    = -g -O1 -std=c11 -D_GNU_SOURCE -I. -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
FUZZERS       = tests/bin/fuzz_json tests/bin/fuzz_http tests/bin/fuzz_query tests/bin/fuzz_utf8

tests/bin/fuzz_json: tests/fuzz_json.c tests/utf8ref.h json.c json.h | tests/bin
	$(FUZZ_CC) $(FUZZ_FLAGS) -o $@ tests/fuzz_json.c json.c
tests/bin/fuzz_utf8: tests/fuzz_utf8.c tests/utf8ref.h json.c json.h | tests/bin
	$(FUZZ_CC) $(FUZZ_FLAGS) -o $@ tests/fuzz_utf8.c json.c
tests/bin/fuzz_http: tests/fuzz_http.c http.c http.h json.c json.h | tests/bin
	$(FUZZ_CC) $(FUZZ_FLAGS) -o $@ tests/fuzz_http.c http.c json.c
tests/bin/fuzz_query: tests/fuzz_query.c http.c http.h json.c json.h | tests/bin
	$(FUZZ_CC) $(FUZZ_FLAGS) -o $@ tests/fuzz_query.c http.c json.c

fuzz: $(FUZZERS)
	@for f in $(FUZZERS); do \
		n=$$(basename $$f | sed 's/^fuzz_//'); mkdir -p tests/fuzz/out/$$n; \
		echo "== $$f ($(FUZZ_SECONDS) s)"; \
		$$f -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 -artifact_prefix=tests/fuzz/out/$$n- \
			tests/fuzz/out/$$n tests/fuzz/$$n > tests/fuzz/out/$$n.log 2>&1; rc=$$?; \
		grep -E 'stat::number_of_executed_units|ERROR|SUMMARY|runtime error' tests/fuzz/out/$$n.log; \
		if [ $$rc -ne 0 ]; then tail -n 30 tests/fuzz/out/$$n.log; exit 1; fi; \
	done

clean:
	rm -f $(BIN) $(OBJS) static_shim.o health_check.inc health_check.inc.tmp skill.inc \
		skill.inc.tmp $(STATIC_BIN)
	rm -f build/link.*
	rm -rf tests/bin $(STATIC_DIR)

.PHONY: all test unit-test check asan clean fuzz stress demo bench static install uninstall lint
