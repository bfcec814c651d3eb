#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Installs the Debian packages xferd needs to build and test. Idempotent: when every package is
# already installed it only asks dpkg and exits 0, without touching apt; otherwise (as root) it
# runs apt-get update once and installs just the missing ones.
set -euo pipefail

PKGS=(
	build-essential
	pkg-config
	libibverbs-dev
	librdmacm-dev
	libevent-dev
	libjansson-dev
	libssl-dev # libcrypto: HMAC-SHA256 of the peer handshake (daemon/crypto.c)
	libsystemd-dev
	iproute2
	python3
	procps
	iperf3
	socat # make bench: the plain file copy beside xferctl (scripts/bench-net.sh)
	liburing-dev # make bench: xferbench_fileio measures io_uring beside sendfile/splice
	ucx-utils # make bench: ucx_perftest beside xferd (scripts/bench-net.sh)
	clang-format # make format-check (tests/test_format.sh)
	valgrind # make test-valgrind: the daemon under memcheck (tests/valgrind.sh)
	cppcheck # make analyze (scripts/analyze.sh)
	clang-tidy # make analyze
	# tests/test_unit.sh (systemd-analyze verify/security, systemd-sysusers) and
	# make test-systemd (systemd as PID 1 in the VM); tests/test_man.sh (mandoc -T lint, man for
	# systemd-analyze verify's Documentation= check, the completion run by bash-completion).
	systemd
	mandoc
	man-db
	bash-completion
	curl # tests/test_metrics.sh scrapes the metrics endpoint
	prometheus # promtool check metrics (tests/test_metrics.sh); ~20 MB, the server is not started
	# tests/test_fuzz.sh: a timed libFuzzer session (make fuzz: clang with libFuzzer).
	clang
	libclang-rt-14-dev
	# the Python package (client/python, tests/python): Debian's /usr/bin/python3 runs them
	python3-pytest
	python3-numpy
	python3-torch
	python3-uvloop # tests/test_python_uvloop.sh and PY_LOOP=uvloop: the loop vLLM and SGLang run
	fuse3 # tests/test_fuse.sh: a FUSE file system that stops answering (tests/fuse_gate.py)
	python3-fusepy # (its Python binding: libfuse2)
	# make test-rdma / bench-rdma: a QEMU VM (TCG) booting Debian's kernel with Soft-RoCE
	# (scripts/rxe-vm.sh: busybox initramfs, modules' .modinfo read with objcopy), and the
	# verbs tools the guest runs from the host's root: rxe provider, perftest, ibv_devinfo.
	qemu-system-x86
	busybox-static
	cpio
	xz-utils
	binutils
	rdma-core
	ibverbs-providers
	ibverbs-utils
	rdmacm-utils
	perftest
	e2fsprogs # make test-rdma: mkfs.ext4 for the guest's O_DIRECT file system (a loop image)
)

missing=()
for p in "${PKGS[@]}"; do
	# Note that dpkg-query exits 0 for a package that is known but removed ("deinstall ok
	# config-files"), so the status text is what decides, not the exit code.
	st=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
	[ "$st" = "install ok installed" ] || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
	exit 0
fi

echo "install-deps: missing Debian packages: ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
	echo "install-deps: not root; install them with:" >&2
	echo "  sudo apt-get install --no-install-recommends ${missing[*]}" >&2
	exit 1
fi

# Packages that ship a service (prometheus, for promtool) would start it on a host booted with
# systemd: a test dependency must not leave a server running. policy-rc.d (Debian's
# invoke-rc.d / deb-systemd-invoke policy hook) says "no starts" while we install, unless the
# host has a policy of its own, which is then left to decide.
policy=/usr/sbin/policy-rc.d
own_policy=0
if [ ! -e "$policy" ]; then
	printf '#!/bin/sh\n# scripts/install-deps.sh: no service starts while it installs\nexit 101\n' >"$policy"
	chmod 755 "$policy"
	own_policy=1
	trap 'rm -f "$policy"' EXIT
fi

export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends "${missing[@]}"
[ "$own_policy" = 0 ] || rm -f "$policy"
echo "install-deps: installed ${missing[*]}"
