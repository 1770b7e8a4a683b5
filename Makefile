# tt-device-queue: one executable, libsqlite3 the only library (SPEC section 2).
CC      ?= cc
CFLAGS  ?= -O2 -g
override CFLAGS += -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes
LDLIBS  = -lsqlite3 -lm
PREFIX  ?= /usr/local
DESTDIR ?=
PROVE   ?= prove
PYTHON  ?= python3
VERSION = 0.1.0

BIN     = tt-device-queue
OBJS    = ttq.o http.o json.o sched.o store.o proc.o cli.o
UNIT    = tests/bin/test_json tests/bin/test_http tests/bin/test_sched tests/bin/test_store tests/bin/test_proc
# integration tests: Python scripts that start the real daemon and print TAP
ITESTS  = $(wildcard tests/t_*.py)

all: $(BIN)

$(BIN): $(OBJS)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(OBJS) $(LDLIBS)

ttq.o: ttq.c http.h json.h sched.h store.h proc.h cli.h health_check.inc
http.o: http.c http.h
json.o: json.c json.h
sched.o: sched.c sched.h
store.o: store.c store.h sched.h
proc.o: proc.c proc.h
cli.o: cli.c cli.h json.h

# health_check.py embedded so a copied binary keeps its default health check (SPEC 4)
health_check.inc: health_check.py
	od -An -v -tx1 $< | sed 's/\([0-9a-f][0-9a-f]\)/0x\1,/g' > $@.tmp && mv $@.tmp $@

ttq.o: CFLAGS += -DTTQ_VERSION='"$(VERSION)"'

tests/bin:
	mkdir -p $@

tests/bin/test_json: tests/test_json.c json.o tests/tap.h | tests/bin
	$(CC) $(CFLAGS) -I. -o $@ tests/test_json.c json.o
tests/bin/test_http: tests/test_http.c http.o tests/tap.h | tests/bin
	$(CC) $(CFLAGS) -I. -o $@ tests/test_http.c http.o
tests/bin/test_sched: tests/test_sched.c sched.o tests/tap.h | tests/bin
	$(CC) $(CFLAGS) -I. -o $@ tests/test_sched.c sched.o
tests/bin/test_store: tests/test_store.c store.o tests/tap.h | tests/bin
	$(CC) $(CFLAGS) -I. -o $@ tests/test_store.c store.o $(LDLIBS)
tests/bin/test_proc: tests/test_proc.c proc.o tests/tap.h | tests/bin
	$(CC) $(CFLAGS) -I. -o $@ tests/test_proc.c proc.o

# the daemon on two simulated cards running a real command end to end
demo: $(BIN) tests/bin/test_json
	tests/demo.sh

check: test
test: $(BIN) $(UNIT)
	$(PROVE) --exec '' $(UNIT) $(ITESTS)

# the same suite under AddressSanitizer and UndefinedBehaviorSanitizer
asan:
	$(MAKE) clean
	$(MAKE) test CFLAGS='-O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all' LDFLAGS='-fsanitize=address,undefined'

# libFuzzer targets (clang); FUZZ_SECONDS per target
FUZZ_SECONDS ?= 10
FUZZ_CC      ?= clang
FUZZ_FLAGS    = -g -O1 -std=c11 -D_GNU_SOURCE -I. -fsanitize=fuzzer,address,undefined
FUZZERS       = tests/bin/fuzz_json tests/bin/fuzz_http tests/bin/fuzz_query tests/bin/fuzz_utf8

tests/bin/fuzz_json: tests/fuzz_json.c json.c json.h | tests/bin
	$(FUZZ_CC) $(FUZZ_FLAGS) -o $@ tests/fuzz_json.c json.c
tests/bin/fuzz_utf8: tests/fuzz_utf8.c json.c json.h | tests/bin
	$(FUZZ_CC) $(FUZZ_FLAGS) -o $@ tests/fuzz_utf8.c json.c
tests/bin/fuzz_http: tests/fuzz_http.c http.c http.h | tests/bin
	$(FUZZ_CC) $(FUZZ_FLAGS) -o $@ tests/fuzz_http.c http.c
tests/bin/fuzz_query: tests/fuzz_query.c http.c http.h | tests/bin
	$(FUZZ_CC) $(FUZZ_FLAGS) -o $@ tests/fuzz_query.c http.c

fuzz: $(FUZZERS)
	@for f in $(FUZZERS); do \
		n=$$(basename $$f | sed 's/^fuzz_//'); mkdir -p tests/fuzz/out/$$n; \
		echo "== $$f ($(FUZZ_SECONDS) s)"; \
		$$f -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 tests/fuzz/out/$$n tests/fuzz/$$n 2>&1 \
			| grep -E 'stat::number_of_executed_units|ERROR|SUMMARY' || exit 1; \
	done

clean:
	rm -f $(BIN) $(OBJS) health_check.inc health_check.inc.tmp
	rm -rf tests/bin

.PHONY: all test check asan clean fuzz demo
