# SPDX-License-Identifier: MIT
# RDMA targets, included by the Makefile after its build rules (it uses B, BINS, CC,
# FINAL_CFLAGS, FINAL_LDFLAGS, LIBNAME, RPATH, Q). Both boot a throw-away QEMU VM with two
# Soft-RoCE devices (scripts/rxe-vm.sh; the first run downloads Debian's kernel package once
# into $XFERD_RXE_CACHE, default /var/tmp/xferd-rxe-cache).
#
#   make test-rdma    build on the host, run tests/rdma/run.sh in the VM between two daemons on
#                     rxe0 and rxe1 with transport rdma; last line "N passed, N failed"
#   make test-rdma XFER_RDMA_TRANSPORT=tcp     the same cases over TCP inside the VM
#   make bench-rdma   ib_read_bw/ib_write_bw and xferd read/write, 64 KiB .. 16 MiB, ratios
#   make bench-rdma RXE_MTU=9000               ... with RoCE MTU 4096 instead of 1024
#   make bench-rdma REPS=5 DEPTH=4             the knobs of scripts/bench-rdma.sh, by name
#   make bench-rdma MODE=files                 file regions beside memory, 16/64/256 MiB
#   make test-systemd the same VM with systemd as PID 1: the installed units (tests/systemd/)

RDMA_BINS := $(B)/tests/rdma_sg $(B)/tests/rdma_bench $(B)/tests/rdma_rogue $(B)/tests/rdma_files \
	$(B)/tests/rdma_reg $(B)/tests/rdma_postfail
# The whole VM run is bounded (qemu is killed after this many seconds; exit 124): CI's budget
# for test-rdma is ~20 minutes, build and boot included (a quiet run takes 4-5).
RDMA_TEST_TIMEOUT ?= 1200
RXE_MTU ?= 1500

.PHONY: test-rdma bench-rdma rdma-build

rdma-build: $(BINS) $(RDMA_BINS) $(B)/tests/test_windows $(B)/tests/postfail.so

# The fault injector of tests/rdma/run.sh's postfail group (LD_PRELOAD into the daemons): plain
# flags, no sanitizers (a preloaded library must not need their runtimes).
$(B)/tests/postfail.so: tests/preload/postfail.c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CCLD    $@")
	$(Q)$(CC) -shared -fPIC -O2 -Wall -Wextra -Werror -o $@ $< -ldl

$(RDMA_BINS): $(B)/tests/%: tests/rdma/%.c tests/rdma/rdma_fill.h client/xferclient.h $(B)/$(LIBNAME)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CCLD    $@")
	$(Q)$(CC) $(FINAL_CFLAGS) $(FINAL_LDFLAGS) -o $@ $< -L$(B) -lxferclient $(RPATH) $(RDMA_LIBS)

# rdma_rogue plays a peer daemon by hand: the proto/ code (metadata, peer header), jansson,
# verbs and rdma_cm besides the client library, libcrypto for the AUTH MAC. Empty for the others.
$(B)/tests/rdma_rogue: $(B)/libxferproto.a
$(B)/tests/rdma_rogue: RDMA_LIBS = $(B)/libxferproto.a $(call PKG_LIBS,jansson libibverbs librdmacm libcrypto)

# A VM that fails to boot or runs out of time prints no summary; say so in the summary's form,
# so that the last line is always "N passed, N failed".
test-rdma: deps
	$(Q)$(MAKE) --no-print-directory rdma-build
	$(Q)scripts/rxe-vm.sh -q -t $(RDMA_TEST_TIMEOUT) -M $(RXE_MTU) $(CURDIR) \
		'BUILD=$(B) XFER_RDMA_TRANSPORT=$(XFER_RDMA_TRANSPORT) tests/rdma/run.sh'; \
	rc=$$?; \
	if [ $$rc -ge 124 ]; then \
		echo "FAIL - test-rdma (scripts/rxe-vm.sh exit $$rc: the VM timed out or did not set up)"; \
		echo "0 passed, 1 failed"; \
	fi; \
	exit $$rc

# The guest starts the command with a clean environment: the bench's knobs are passed by name.
BENCH_RDMA_VARS := SIZES DUR DEPTH REPS PERFTEST_ARGS WIN_DEPTH WIN_DEPTHS WIN_BATCH ROWS MODE \
	FILE_SIZES FILE_KINDS BASE_BUILD CLAIM_LOAD LAT_ITERS STAGING_SIZE
bench-rdma: deps
	$(Q)$(MAKE) --no-print-directory rdma-build
	$(Q)scripts/rxe-vm.sh -t 2400 -M $(RXE_MTU) $(CURDIR) 'BUILD=$(B) \
		$(foreach v,$(BENCH_RDMA_VARS),$(if $($(v)),$(v)="$($(v))")) scripts/bench-rdma.sh'

# make test-systemd: the same VM with systemd as PID 1 (scripts/rxe-vm.sh -S). What
# `make install` writes is staged in $(B)/systemd-root (PREFIX=/usr) and tests/systemd/run.sh
# installs it in the guest: socket activation, Type=notify, the hardened unit moving bytes over
# RDMA between two instances, stop/restart, journald. ~1.5 minutes (3.5 on a loaded host),
# bounded.
SYSTEMD_TEST_TIMEOUT ?= 480

.PHONY: test-systemd
test-systemd: deps
	$(Q)$(MAKE) --no-print-directory $(BINS) $(B)/xferclient.pc
	$(Q)rm -rf $(B)/systemd-root
	$(Q)$(MAKE) --no-print-directory install DESTDIR=$(CURDIR)/$(B)/systemd-root PREFIX=/usr \
		>/dev/null
	$(Q)scripts/rxe-vm.sh -S -q -t $(SYSTEMD_TEST_TIMEOUT) $(CURDIR) \
		'BUILD=$(B) tests/systemd/run.sh'; \
	rc=$$?; \
	if [ $$rc -ge 124 ]; then \
		echo "FAIL - test-systemd (scripts/rxe-vm.sh exit $$rc: the VM timed out or did not set up)"; \
		echo "0 passed, 1 failed"; \
	fi; \
	exit $$rc
