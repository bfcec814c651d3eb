# SPDX-License-Identifier: MIT
# xferd: one non-recursive GNU Makefile. Objects go to build/ (build-san/ with SANITIZE=...).
#
#   make                 build daemon, library, CLI, tests
#   make test            install missing deps, build, run every test; last line "N passed, N failed"
#   make test SANITIZE=address,undefined
#   make test-valgrind   the daemon under valgrind's memcheck, driven by the xferctl and
#                        cross-node suites: no uninitialised byte used or sent, no leak, no fd
#                        left open at exit
#   make demo            256 MiB between two processes of one node, then a 1 GiB file between
#                        two daemons in two network namespaces, verified
#   make bench           same-node throughput beside memcpy, cross-node beside iperf3
#   make bench-serving   prefill -> decode KV transfers at 60% of the link, p50/p99 beside a
#                        perfectly shared link
#   make test-rdma       the cross-node tests over RDMA, in a VM with Soft-RoCE
#   make bench-rdma      xferd over RDMA beside ib_read_bw/ib_write_bw, in the same VM
#   make fuzz FUZZ_SECONDS=60   libFuzzer, each target in turn: a control packet, metadata
#                        decode, peer frames after HELLO, the client's op.batch_done and the
#                        daemon's op.batch readers (clang, ASan+UBSan)
#   make format          reformat every C file with .clang-format; make format-check only checks
#   make analyze         cppcheck and clang-tidy over daemon/, client/, proto/; fails on a finding
#   make install PREFIX=/usr/local DESTDIR=

VERSION := 0.1.0
SOVERSION := 1
PREFIX ?= /usr/local
DESTDIR ?=
BINDIR := $(PREFIX)/bin
SBINDIR := $(PREFIX)/sbin
LIBDIR := $(PREFIX)/lib
INCDIR := $(PREFIX)/include
PCDIR := $(LIBDIR)/pkgconfig
UNITDIR := $(PREFIX)/lib/systemd/system
SYSUSERSDIR := $(PREFIX)/lib/sysusers.d
SYSCTLDIR := $(PREFIX)/lib/sysctl.d
MANDIR := $(PREFIX)/share/man
COMPLETIONDIR := $(PREFIX)/share/bash-completion/completions
MAN_PAGES := man/xferctl.1 man/libxferclient.3 man/xferd.conf.5 man/xferd.8
# The config: /etc/xferd/xferd.conf whatever PREFIX is (a PREFIX of /usr/local still reads /etc).
SYSCONFDIR ?= /etc
# The Python package (client/python/xferd): where Debian's python3 looks under PREFIX.
PYVER := $(shell /usr/bin/python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
PYTHONDIR ?= $(PREFIX)/lib/python$(PYVER)/dist-packages

CC ?= cc
PKGS := libevent jansson libibverbs librdmacm libcrypto
HAVE_SYSTEMD := $(shell pkg-config --exists libsystemd && echo 1)
ifeq ($(HAVE_SYSTEMD),1)
PKGS += libsystemd
else
SD_CPPFLAGS := -DXD_NO_SYSTEMD
endif

ifneq ($(FUZZ),)
# make fuzz: everything with clang's coverage instrumentation; libFuzzer joins at the link.
B := build/fuzz
CC := clang
SAN_FLAGS := -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all \
	-fno-omit-frame-pointer
OPT := -O1 -g
else ifneq ($(SANITIZE),)
B := build-san
SAN_FLAGS := -fsanitize=$(SANITIZE) -fno-sanitize-recover=all -fno-omit-frame-pointer
OPT := -O1 -g
else
B := build
OPT := -O2 -g
endif

WARN := -Wall -Wextra -Wstrict-prototypes -Wmissing-prototypes -Wshadow -Wformat=2 \
	-Wno-unused-parameter
XCFLAGS := -std=gnu11 -D_GNU_SOURCE $(OPT) $(WARN) $(SAN_FLAGS) -fPIC -MMD -MP \
	-Iproto -Iclient $(SD_CPPFLAGS) -DXFERD_VERSION='"$(VERSION)"' \
	$(shell pkg-config --cflags $(PKGS) 2>/dev/null)
FINAL_CFLAGS := $(XCFLAGS) $(CFLAGS)
FINAL_LDFLAGS := $(SAN_FLAGS) $(LDFLAGS)
PKG_LIBS = $(shell pkg-config --libs $(1) 2>/dev/null)

ifeq ($(V),1)
Q :=
else
Q := @
endif

PROTO_SRC := $(wildcard proto/*.c)
DAEMON_SRC := $(wildcard daemon/*.c)
LIB_SRC := client/xferclient.c
TEST_SRC := $(wildcard tests/test_*.c)
TEST_HELPERS := $(filter-out $(TEST_SRC),$(wildcard tests/*.c))

PROTO_OBJ := $(PROTO_SRC:%.c=$(B)/%.o)
DAEMON_OBJ := $(DAEMON_SRC:%.c=$(B)/%.o)
LIB_OBJ := $(LIB_SRC:%.c=$(B)/%.o)
TEST_BINS := $(TEST_SRC:tests/%.c=$(B)/tests/%)
TEST_HELPER_OBJ := $(TEST_HELPERS:%.c=$(B)/%.o)

LIBNAME := libxferclient.so
LIB_REAL := $(B)/$(LIBNAME).$(SOVERSION).0.0
LIB_SONAME := $(LIBNAME).$(SOVERSION)
RPATH := -Wl,-rpath,'$$ORIGIN' -Wl,-rpath,'$$ORIGIN/..' -Wl,-rpath,'$$ORIGIN/../lib'

BINS := $(B)/xferd $(B)/xferctl $(B)/xferbench $(B)/xferbench_net $(B)/xferbench_serve \
	$(B)/xferbench_fileio \
	$(B)/$(LIB_SONAME) \
	$(B)/$(LIBNAME)

# A newline, for $(foreach) bodies that are recipe lines.
define newline


endef

.PHONY: all test test-build test-valgrind demo bench bench-serving install uninstall clean deps fuzz \
	format format-check analyze
all: $(BINS) $(TEST_BINS) $(B)/xferclient.pc

$(B)/%.o: %.c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(FINAL_CFLAGS) -c -o $@ $<

$(B)/client/xferclient.o: XCFLAGS += -fvisibility=hidden -DXFER_BUILDING_LIBRARY

$(B)/libxferproto.a: $(PROTO_OBJ)
	$(Q)rm -f $@ && ar rcs $@ $^

$(B)/xferd: $(DAEMON_OBJ) $(B)/libxferproto.a
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(FINAL_LDFLAGS) -o $@ $^ $(call PKG_LIBS,$(PKGS)) -lpthread

$(LIB_REAL): $(LIB_OBJ) $(B)/libxferproto.a client/libxferclient.map
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(FINAL_LDFLAGS) -shared -Wl,-soname,$(LIB_SONAME) \
		-Wl,--version-script=client/libxferclient.map -Wl,--no-undefined \
		-o $@ $(LIB_OBJ) $(B)/libxferproto.a $(call PKG_LIBS,jansson)

$(B)/$(LIB_SONAME): $(LIB_REAL)
	$(Q)ln -sf $(notdir $<) $@
$(B)/$(LIBNAME): $(B)/$(LIB_SONAME)
	$(Q)ln -sf $(LIB_SONAME) $@

$(B)/xferctl: $(B)/client/xferctl.o $(B)/libxferproto.a $(B)/$(LIBNAME)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(FINAL_LDFLAGS) -o $@ $< $(B)/libxferproto.a -L$(B) -lxferclient $(RPATH) \
		$(call PKG_LIBS,jansson)

$(B)/xferbench: $(B)/client/xferbench.o $(B)/client/benchutil.o $(B)/$(LIBNAME)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(FINAL_LDFLAGS) -o $@ $(filter %.o,$^) -L$(B) -lxferclient $(RPATH) -lpthread

$(B)/xferbench_net: $(B)/client/xferbench_net.o $(B)/client/benchutil.o $(B)/$(LIBNAME)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(FINAL_LDFLAGS) -o $@ $(filter %.o,$^) -L$(B) -lxferclient $(RPATH)

$(B)/xferbench_serve: $(B)/client/xferbench_serve.o $(B)/client/benchutil.o $(B)/$(LIBNAME)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(FINAL_LDFLAGS) -o $@ $(filter %.o,$^) -L$(B) -lxferclient $(RPATH) -lm

$(B)/xferbench_fileio: $(B)/client/xferbench_fileio.o
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(FINAL_LDFLAGS) -o $@ $^ $(call PKG_LIBS,liburing)

# Every tests/test_X.c is one program, linked with the harness, the proto code and the library.
$(B)/tests/%: $(B)/tests/%.o $(TEST_HELPER_OBJ) $(B)/libxferproto.a $(B)/$(LIBNAME)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(FINAL_LDFLAGS) -o $@ $< $(TEST_HELPER_OBJ) $(B)/libxferproto.a \
		-L$(B) -lxferclient $(RPATH) $(call PKG_LIBS,jansson) -lpthread

# The control-packet fuzz target (tests/fuzz/) links the real daemon objects. main.c also holds
# xd_now_us(), so its main() is made local instead of leaving the file out.
FUZZ_DAEMON_OBJ := $(filter-out $(B)/daemon/main.o,$(DAEMON_OBJ)) $(B)/tests/fuzz/xferd_main.o \
	$(B)/tests/fuzz/fuzz_daemon.o
FUZZ_LIBS = $(B)/libxferproto.a $(call PKG_LIBS,$(PKGS)) -lpthread
FUZZ_REPLAY := $(B)/tests/test_fuzz_replay
FUZZ_SECONDS ?= 60

$(B)/tests/fuzz/xferd_main.o: $(B)/daemon/main.o
	@mkdir -p $(dir $@)
	$(Q)objcopy --localize-symbol=main $< $@

# Named test_* so that tests/run.sh runs them: each replays its target's seed corpus
# (tests/fuzz/corpus, corpus-meta, corpus-peer, corpus-reply, corpus-req) without libFuzzer.
FUZZ_META_REPLAY := $(B)/tests/test_fuzz_meta_replay
FUZZ_PEER_REPLAY := $(B)/tests/test_fuzz_peer_replay
FUZZ_REPLY_REPLAY := $(B)/tests/test_fuzz_reply_replay
FUZZ_REQ_REPLAY := $(B)/tests/test_fuzz_req_replay

$(FUZZ_REPLAY): $(B)/tests/fuzz/replay.o $(B)/tests/fuzz/fuzz_ctl.o $(FUZZ_DAEMON_OBJ) \
		$(B)/libxferproto.a
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(FINAL_LDFLAGS) -o $@ $(filter %.o,$^) $(FUZZ_LIBS)

$(FUZZ_PEER_REPLAY): $(B)/tests/fuzz/replay.o $(B)/tests/fuzz/fuzz_peer.o $(FUZZ_DAEMON_OBJ) \
		$(B)/libxferproto.a
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(FINAL_LDFLAGS) -o $@ $(filter %.o,$^) $(FUZZ_LIBS)

$(FUZZ_META_REPLAY) $(FUZZ_REPLY_REPLAY): $(B)/tests/test_fuzz_%_replay: $(B)/tests/fuzz/replay.o \
		$(B)/tests/fuzz/fuzz_%.o $(B)/libxferproto.a
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(FINAL_LDFLAGS) -o $@ $^ $(call PKG_LIBS,jansson)

# fuzz_req holds the reader to the jansson reading of tests/breq_ref.c.
$(FUZZ_REQ_REPLAY): $(B)/tests/fuzz/replay.o $(B)/tests/fuzz/fuzz_req.o $(B)/tests/breq_ref.o \
		$(B)/libxferproto.a
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(FINAL_LDFLAGS) -o $@ $^ $(call PKG_LIBS,jansson)

# libFuzzer programs: fuzz_ctl (a control packet), fuzz_peer (peer frames after HELLO),
# fuzz_meta (metadata decode), fuzz_reply (op.batch_done read back by the client), fuzz_req
# (op.batch read by the daemon without jansson).
$(B)/fuzz_ctl $(B)/fuzz_peer: $(B)/fuzz_%: $(B)/tests/fuzz/fuzz_%.o $(FUZZ_DAEMON_OBJ) \
		$(B)/libxferproto.a
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(FINAL_LDFLAGS) -fsanitize=fuzzer -o $@ $(filter %.o,$^) $(FUZZ_LIBS)

$(B)/fuzz_meta $(B)/fuzz_reply: $(B)/fuzz_%: $(B)/tests/fuzz/fuzz_%.o $(B)/libxferproto.a
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(FINAL_LDFLAGS) -fsanitize=fuzzer -o $@ $^ $(call PKG_LIBS,jansson)

$(B)/fuzz_req: $(B)/tests/fuzz/fuzz_req.o $(B)/tests/breq_ref.o $(B)/libxferproto.a
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(FINAL_LDFLAGS) -fsanitize=fuzzer -o $@ $^ $(call PKG_LIBS,jansson)

all test-build: $(FUZZ_REPLAY) $(FUZZ_META_REPLAY) $(FUZZ_PEER_REPLAY) $(FUZZ_REPLY_REPLAY) \
	$(FUZZ_REQ_REPLAY)

# The Python package's check of its ctypes mirrors: prints xferclient.h's sizeof/offsetof
# (tests/python/test_layout.py compares). Not named test_*: tests/test_python.sh runs it.
PY_LAYOUT := $(B)/tests/python/layout
$(PY_LAYOUT): $(B)/tests/python/layout.o
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(FINAL_LDFLAGS) -o $@ $<

all test-build: $(PY_LAYOUT)

# The C client's test pattern (client/benchutil.c) as a shared object for the Python bench
# (client/python/examples/xferbench.py): its rounds fill and check with the same C code as
# xferbench's, so the untimed work between two timed transfers takes as long in both (a numpy
# pattern took 3.5x as long, and the transfers after it were slower). Not installed.
BENCHUTIL_SO := $(B)/libxferbenchutil.so
$(BENCHUTIL_SO): $(B)/client/benchutil.o $(B)/$(LIBNAME)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(FINAL_LDFLAGS) -shared -o $@ $< -L$(B) -lxferclient $(RPATH)

all test-build: $(BENCHUTIL_SO)

# tests/test_idmap.c is a unit test of daemon/idmap.c (and the clock it falls back on): linked
# with those two objects. This explicit rule overrides the pattern rule above for it.
IDMAP_TEST := $(B)/tests/test_idmap
$(IDMAP_TEST): $(B)/tests/test_idmap.o $(B)/daemon/idmap.o $(B)/daemon/clock.o $(TEST_HELPER_OBJ) \
		$(B)/libxferproto.a $(B)/$(LIBNAME)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(FINAL_LDFLAGS) -o $@ $< $(B)/daemon/idmap.o $(B)/daemon/clock.o \
		$(TEST_HELPER_OBJ) $(B)/libxferproto.a -L$(B) -lxferclient $(RPATH) \
		$(call PKG_LIBS,jansson) -lpthread

# tests/test_engine.c runs two in-process daemons over a fake transport it defines, with its own
# transport table in d->transports (the local one and its fake). This explicit rule
# overrides the pattern rule above for that one program; TEST_BINS already lists it.
ENGINE_TEST := $(B)/tests/test_engine
ENGINE_DAEMON_OBJ := $(filter-out $(B)/tests/fuzz/fuzz_daemon.o,$(FUZZ_DAEMON_OBJ))

$(ENGINE_TEST): $(B)/tests/test_engine.o $(ENGINE_DAEMON_OBJ) $(TEST_HELPER_OBJ) \
		$(B)/libxferproto.a $(B)/$(LIBNAME)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(FINAL_LDFLAGS) -o $@ $< $(ENGINE_DAEMON_OBJ) $(TEST_HELPER_OBJ) \
		$(B)/libxferproto.a -L$(B) -lxferclient $(RPATH) $(call PKG_LIBS,$(PKGS)) -lpthread

all test-build: $(ENGINE_TEST)

# Runs each target of FUZZ_TARGETS for FUZZ_SECONDS. New inputs go to build/fuzz/corpus,
# corpus-meta, corpus-peer, corpus-reply, corpus-req (the seeds in tests/fuzz/ stay as they
# are), crash and leak reproducers to build/fuzz/TARGET-*; replay one with
# build/tests/test_fuzz_replay FILE (test_fuzz_meta_replay, test_fuzz_peer_replay,
# test_fuzz_reply_replay, test_fuzz_req_replay). FUZZ_ARGS passes more libFuzzer options
# (-jobs=2, -max_len=70000, ...).
FUZZ_TARGETS ?= ctl meta peer reply req
fuzz:
	$(Q)$(MAKE) --no-print-directory FUZZ=1 $(FUZZ_TARGETS:%=build/fuzz/fuzz_%)
	$(Q)set -e; for t in $(FUZZ_TARGETS); do \
		c=corpus; [ $$t = ctl ] || c=corpus-$$t; \
		mkdir -p build/fuzz/$$c; \
		echo "== fuzz_$$t for $(FUZZ_SECONDS) s"; \
		build/fuzz/fuzz_$$t -max_total_time=$(FUZZ_SECONDS) -timeout=10 \
			-print_final_stats=1 -dict=tests/fuzz/$$t.dict \
			-artifact_prefix=build/fuzz/$$t- $(FUZZ_ARGS) build/fuzz/$$c tests/fuzz/$$c; \
	done

$(B)/xferclient.pc: client/xferclient.pc.in Makefile
	$(Q)sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@LIBDIR@|$(LIBDIR)|g' \
		-e 's|@INCDIR@|$(INCDIR)|g' -e 's|@VERSION@|$(VERSION)|g' $< > $@

deps:
	$(Q)scripts/install-deps.sh

# The style of .clang-format (Debian's clang-format 14); tests/test_format.sh runs the check.
CLANG_FORMAT ?= clang-format
FORMAT_SRCS := $(wildcard client/*.[ch] daemon/*.[ch] proto/*.[ch] tests/*.[ch] tests/*/*.[ch])
format:
	$(Q)$(CLANG_FORMAT) -i $(FORMAT_SRCS)
format-check:
	$(Q)$(CLANG_FORMAT) --dry-run --Werror $(FORMAT_SRCS)

# Static analysis: cppcheck and clang-tidy (.clang-tidy's checks) over daemon/, client/, proto/
# with the flags they are compiled with; fails on any finding (scripts/analyze.sh). Not part
# of make test: ~5 CPU-minutes, 5 min here at load 3 (2.6 at best on the 2 vCPUs).
ANALYZE_FLAGS := -std=gnu11 -D_GNU_SOURCE $(WARN) -Iproto -Iclient $(SD_CPPFLAGS) \
	-DXFERD_VERSION="$(VERSION)" $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
analyze: deps
	$(Q)ANALYZE_FLAGS='$(ANALYZE_FLAGS)' ANALYZE_FILES='$(ANALYZE_FILES)' scripts/analyze.sh

test-build: $(BINS) $(TEST_BINS)

test: deps
	$(Q)$(MAKE) --no-print-directory test-build
	$(Q)BUILD=$(B) XFER_SANITIZE=$(SANITIZE) tests/run.sh

# Not under SANITIZE: valgrind and AddressSanitizer do not run in one process.
test-valgrind: deps
	$(Q)$(MAKE) --no-print-directory $(BINS)
	$(Q)BUILD=$(B) tests/valgrind.sh

# The main job as users run it: two daemons on two "nodes" (network namespaces) moving a 1 GiB
# file with xferctl; first the same-node case, two processes of one node.
demo: deps
	$(Q)$(MAKE) --no-print-directory $(BINS)
	$(Q)BUILD=$(B) scripts/demo.sh
	$(Q)BUILD=$(B) scripts/demo-net.sh

bench: deps
	$(Q)$(MAKE) --no-print-directory $(BINS)
	$(Q)BUILD=$(B) scripts/bench.sh
	$(Q)BUILD=$(B) scripts/bench-net.sh
	$(Q)BUILD=$(B) scripts/bench-idle.sh $(B)
	$(Q)BUILD=$(B) scripts/bench-metrics.sh

bench-serving: deps
	$(Q)$(MAKE) --no-print-directory $(BINS)
	$(Q)BUILD=$(B) scripts/bench-serving.sh

install: $(BINS) $(B)/xferclient.pc
	install -d $(DESTDIR)$(SBINDIR) $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR) \
		$(DESTDIR)$(INCDIR) $(DESTDIR)$(PCDIR) $(DESTDIR)$(UNITDIR) $(DESTDIR)$(SYSUSERSDIR) \
		$(DESTDIR)$(SYSCTLDIR)
	install -m 755 $(B)/xferd $(DESTDIR)$(SBINDIR)/xferd
	install -m 755 $(B)/xferctl $(DESTDIR)$(BINDIR)/xferctl
	install -m 755 $(LIB_REAL) $(DESTDIR)$(LIBDIR)/
	ln -sf $(notdir $(LIB_REAL)) $(DESTDIR)$(LIBDIR)/$(LIB_SONAME)
	ln -sf $(LIB_SONAME) $(DESTDIR)$(LIBDIR)/$(LIBNAME)
	install -m 644 client/xferclient.h $(DESTDIR)$(INCDIR)/xferclient.h
	install -m 644 $(B)/xferclient.pc $(DESTDIR)$(PCDIR)/xferclient.pc
	sed -e 's|@SBINDIR@|$(SBINDIR)|g' -e 's|@SYSCONFDIR@|$(SYSCONFDIR)|g' \
		systemd/xferd.service.in > $(DESTDIR)$(UNITDIR)/xferd.service
	install -m 644 systemd/xferd.socket $(DESTDIR)$(UNITDIR)/xferd.socket
	install -m 644 systemd/xferd-sysusers.conf $(DESTDIR)$(SYSUSERSDIR)/xferd.conf
	install -m 644 systemd/60-xferd.conf $(DESTDIR)$(SYSCTLDIR)/60-xferd.conf
	$(foreach m,$(MAN_PAGES),install -D -m 644 $(m) \
		$(DESTDIR)$(MANDIR)/man$(subst .,,$(suffix $(m)))/$(notdir $(m))$(newline))
	install -D -m 644 client/xferctl.bash $(DESTDIR)$(COMPLETIONDIR)/xferctl
	install -d $(DESTDIR)$(SYSCONFDIR)/xferd
	install -m 644 systemd/xferd.conf.example $(DESTDIR)$(SYSCONFDIR)/xferd/xferd.conf.example
	@# An operator's edited config is never overwritten; the example above always is.
	[ -e $(DESTDIR)$(SYSCONFDIR)/xferd/xferd.conf ] || \
		install -m 644 systemd/xferd.conf.example $(DESTDIR)$(SYSCONFDIR)/xferd/xferd.conf
	install -d $(DESTDIR)$(PYTHONDIR)/xferd
	install -m 644 client/python/xferd/*.py $(DESTDIR)$(PYTHONDIR)/xferd/

uninstall:
	rm -f $(DESTDIR)$(SBINDIR)/xferd $(DESTDIR)$(BINDIR)/xferctl \
		$(DESTDIR)$(LIBDIR)/$(LIBNAME)* $(DESTDIR)$(INCDIR)/xferclient.h \
		$(DESTDIR)$(PCDIR)/xferclient.pc $(DESTDIR)$(UNITDIR)/xferd.service \
		$(DESTDIR)$(UNITDIR)/xferd.socket $(DESTDIR)$(SYSUSERSDIR)/xferd.conf \
		$(DESTDIR)$(SYSCTLDIR)/60-xferd.conf \
		$(foreach m,$(MAN_PAGES),$(DESTDIR)$(MANDIR)/man$(subst .,,$(suffix $(m)))/$(notdir $(m))) \
		$(DESTDIR)$(COMPLETIONDIR)/xferctl \
		$(DESTDIR)$(SYSCONFDIR)/xferd/xferd.conf.example
	rm -rf $(DESTDIR)$(PYTHONDIR)/xferd

clean:
	rm -rf build build-san

# test-rdma and bench-rdma: the Soft-RoCE VM targets.
include scripts/rdma-make.mk

-include $(shell find $(B) -name '*.d' -type f 2>/dev/null)
