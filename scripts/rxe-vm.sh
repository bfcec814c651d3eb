#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# rxe-vm.sh: run one command inside a throw-away QEMU VM that has two Soft-RoCE (rdma_rxe)
# devices, so that xferd's verbs/rdma_cm code runs against a real kernel RDMA stack on a host
# that has neither RDMA hardware nor RDMA support in its own kernel.
#
#   scripts/rxe-vm.sh [options] DIR 'COMMAND'
#   scripts/rxe-vm.sh -B                       only prepare the cache (download, build), no boot
#
#   -t SECONDS  kill the VM after this long; exit 124 (default 900)
#   -M MTU      MTU of the veth pair (default 1500 -> RoCE MTU 1024; 4200 or more -> 4096)
#   -m MB       guest memory (default 2048)      -s N   guest vCPUs (default 2)
#   -d FILE     save the guest's dmesg to FILE   -v     stream the kernel console to stderr
#   -q          no closing "[rxe-vm] ..." line on stderr
#   -S          boot Debian's systemd as PID 1 (see "systemd mode" below)
#
# What the guest looks like:
#   - Debian 12's own kernel (package linux-image-*-amd64, which has rdma_rxe as a module) under
#     QEMU TCG. KVM is not used: on the development machines /dev/kvm is kvm_pvm, which cannot
#     run a stock kernel (see ../shared/RXE-VM.md).
#   - Its / is the HOST's root filesystem, read-only over virtio-9p, under a tmpfs overlay: every
#     host binary and library (rdma-core, perftest, our build/) runs unchanged, and writes
#     outside DIR vanish at power-off. Build on the host, run in the guest (exec is slow there).
#   - DIR is shared read-write at its own path (and at /mnt/host). COMMAND runs there, with bash,
#     as root, stdin /dev/null; stdout+stderr stream to our stdout; its exit status is ours.
#   - No NIC: no packet can leave the guest. Two "nodes" live in the guest's one network
#     namespace:  rxe0 on veth0 10.77.0.1/24  <-- veth -->  rxe1 on veth1 10.77.0.2/24
#     COMMAND's environment has RXE_DEV0=rxe0 RXE_IP0=10.77.0.1 RXE_GID0=<idx> and the same
#     with 1; RXE_GIDn is the index of the RoCE v2 GID of that address (perftest -x).
#
# systemd mode (-S): after the same setup, /init switches root to the overlay and execs
# /lib/systemd/systemd --unit=rxe-vm.target, a target that wants one oneshot
# service: COMMAND, still as root in DIR with the same environment and output. sysinit.target
# runs as on a real machine (journald, udev, tmpfiles, sysusers); units meant for a real host
# that only slow the boot or reach for the network (timers, timesyncd, getty) are masked.
# /etc, /var and /run are the overlay's and tmpfs, so COMMAND may install units, users and
# configs. When COMMAND ends the VM powers off at once (systemctl poweroff -ff).
#
# Environment: RXE_VM_APPEND, extra kernel parameters for experiments. Note that a task asleep on
# a completion channel wakes up only at the guest's next timer tick (~4 ms) after rxe completes
# its request (ib_send_lat -e: typical 4 ms, busy-polling: 30 us); `idle=poll` cuts that to
# ~0.2 ms at the price of two host threads spinning.
#
# Exit status: COMMAND's; 124 on timeout; 125 when this script or the guest setup failed.
# Cache: ${XFERD_RXE_CACHE:-/var/tmp/xferd-rxe-cache}: the kernel .deb (~70 MB, fetched once with
# apt-get download), the unpacked vmlinux (~66 MB) and the initramfs (~2 MB). Host packages:
# qemu-system-x86 busybox-static cpio xz-utils binutils (scripts/install-deps.sh).
set -euo pipefail

ME=$(readlink -f "${BASH_SOURCE[0]}")
CACHE=${XFERD_RXE_CACHE:-/var/tmp/xferd-rxe-cache}
TIMEOUT=900 MTU=1500 MEM=2048 SMP=2 DMESG='' VERBOSE=0 QUIET=0 PREPARE=0 SYSTEMD=0

die() { echo "[rxe-vm] error: $*" >&2; exit 125; }
usage() { sed -n '4,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$ME"; exit "$1"; }

while getopts "t:M:m:s:d:vqSBh" o; do
	case $o in
	t) TIMEOUT=$OPTARG ;; M) MTU=$OPTARG ;; m) MEM=$OPTARG ;; s) SMP=$OPTARG ;;
	d) DMESG=$OPTARG ;; v) VERBOSE=1 ;; q) QUIET=1 ;; S) SYSTEMD=1 ;; B) PREPARE=1 ;;
	h) usage 0 ;;
	*) usage 125 >&2 ;;
	esac
done
shift $((OPTIND - 1))
if [ "$PREPARE" = 0 ]; then
	[ $# -eq 2 ] || usage 125 >&2
	[ -d "$1" ] || die "'$1' is not a directory"
	HOSTDIR=$(readlink -f "$1") CMD=$2
	# qemu's -fsdev path=... cannot quote these
	case $HOSTDIR in *[[:space:]\'\",\\]*) die "DIR must not contain blanks, quotes, commas or backslashes" ;; esac
fi
for v in "$TIMEOUT" "$MTU" "$MEM" "$SMP"; do [[ $v =~ ^[0-9]+$ ]] || die "bad number '$v'"; done
for b in qemu-system-x86_64 busybox cpio gzip xz objcopy dpkg-deb flock timeout; do
	command -v "$b" >/dev/null || die "'$b' not found: run scripts/install-deps.sh"
done
BUSYBOX=$(command -v busybox)
ldd "$BUSYBOX" >/dev/null 2>&1 && die "$BUSYBOX is dynamically linked: install busybox-static"
T0=$(date +%s.%N)

# ---------------------------------------------------------------------------------------------
# The cache: kernel package, vmlinux, initramfs. Built under a lock, so that two runs started at
# once (two make invocations) neither download twice nor see a half-written file.
mkdir -p "$CACHE"
exec 8>"$CACHE/lock"
flock 8

# The kernel: the version linux-image-amd64 currently depends on; a .deb already in the cache
# wins, so that later runs need no network and no apt lists.
DEB=$(ls "$CACHE"/linux-image-*-amd64_*.deb 2>/dev/null | sort -V | tail -n 1 || true)
if [ -z "$DEB" ]; then
	PKG=${XFERD_RXE_KERNEL_PKG:-$(apt-cache depends linux-image-amd64 2>/dev/null |
		sed -n 's/^ *Depends: \(linux-image-[0-9].*-amd64\)$/\1/p' | head -n 1)}
	[ -n "$PKG" ] || die "no kernel package known to apt (apt-get update first?)"
	echo "[rxe-vm] downloading $PKG once into $CACHE ..." >&2
	(cd "$CACHE" && apt-get download -q -o APT::Sandbox::User=root "$PKG" >&2) ||
		die "apt-get download $PKG failed"
	DEB=$(ls "$CACHE"/"$PKG"_*.deb | tail -n 1)
fi

# Modules the guest needs. Their dependencies are read from each module's .modinfo "depends=",
# so only the roots are listed. crc32_generic is not a declared dependency, but rdma_rxe asks
# the crypto API for "crc32" (RoCE ICRC) when a link is created, and the guest cannot load it on
# demand (no usable modprobe for the kernel's request_module). sch_tbf lets a test slow the veth
# down with tc (a TCP transfer is otherwise too fast to be caught mid-way). loop and ext4 give a
# test a file system that does O_DIRECT (an ext4 image on a loop device; tmpfs in 6.1 does not),
# and crc32c_generic is what ext4 and jbd2 ask the crypto API for (metadata checksums), as rdma_rxe
# asks for crc32.
MODULES="crc32_generic rdma_rxe rdma_ucm ib_uverbs veth sch_tbf virtio_pci virtio_console
	9pnet_virtio 9p overlay crc32c_generic loop ext4"

# The initramfs is rebuilt whenever this script (which holds /init), busybox or the kernel
# package changes.
STAMP=$({ cat "$ME" "$BUSYBOX"; echo "$DEB"; } | sha256sum | cut -c1-16)
VMLINUX=$CACHE/vmlinux INITRD=$CACHE/initramfs.gz
if [ "$(cat "$CACHE/stamp" 2>/dev/null)" != "$STAMP" ] || [ ! -s "$VMLINUX" ] || [ ! -s "$INITRD" ]; then
	echo "[rxe-vm] building vmlinux and initramfs from $(basename "$DEB") ..." >&2
	K=$(mktemp -d "$CACHE/unpack.XXXXXX")
	trap 'rm -rf "$K"' EXIT
	dpkg-deb -x "$DEB" "$K" || die "cannot unpack $DEB"
	VMLINUZ=$(ls "$K"/boot/vmlinuz-* | head -n 1)
	KVER=${VMLINUZ##*/vmlinuz-}
	MODDIR=$K/lib/modules/$KVER

	# vmlinux: the bzImage's payload is an xz stream holding an ELF kernel with a PVH entry
	# point. QEMU boots that ELF directly, which saves ~3 s of in-guest xz decompression under
	# TCG. (tail dies of SIGPIPE once xz has its one stream; only xz's status matters.)
	off=$(LC_ALL=C grep -obUaP '\xfd7zXZ' "$VMLINUZ" | head -n 1 | cut -d: -f1)
	[ -n "$off" ] || die "no xz payload in $VMLINUZ"
	xz -dc --single-stream < <(tail -c +$((off + 1)) "$VMLINUZ" 2>/dev/null) >"$K/vmlinux" ||
		die "cannot decompress $VMLINUZ"
	[ "$(head -c 4 "$K/vmlinux" | od -An -tx1 | tr -d ' ')" = 7f454c46 ] || die "payload of $VMLINUZ is not ELF"

	# Modules: resolve dependencies depth-first so that the load order is dependencies first.
	# busybox insmod wants plain .ko files. The appended signatures are cut off: checking them
	# costs ~0.5 s of boot under TCG (the price is a "module verification failed" taint).
	R=$K/initramfs
	mkdir -p "$R"/{bin,dev,proc,sys,etc,tmp,lower,rw,newroot,ctl,modules}
	declare -A SEEN=()
	ORDER=()
	resolve() {
		local m=${1//-/_} f deps d
		[ -z "${SEEN[$m]:-}" ] || return 0
		SEEN[$m]=1
		f=$(find "$MODDIR/kernel" \( -name "$m.ko*" -o -name "${m//_/-}.ko*" \) | head -n 1)
		if [ -z "$f" ]; then
			grep -qE "/($m|${m//_/-})\.ko" "$MODDIR/modules.builtin" && return 0
			die "module $m not found for $KVER"
		fi
		case $f in
		*.xz) xz -dc "$f" ;; *.zst) zstd -qdc "$f" ;; *.gz) gzip -dc "$f" ;; *) cat "$f" ;;
		esac >"$R/modules/$m.ko"
		deps=$(objcopy -O binary --only-section=.modinfo "$R/modules/$m.ko" /dev/stdout |
			tr '\0' '\n' | sed -n 's/^depends=//p')
		for d in ${deps//,/ }; do resolve "$d"; done
		ORDER+=("$m")
	}
	for m in $MODULES; do resolve "$m"; done
	for m in "${ORDER[@]}"; do
		f=$R/modules/$m.ko
		# struct module_signature (12 bytes, sig_len big-endian at 8..11) + 28-byte magic
		if [ "$(tail -c 28 "$f")" = "~Module signature appended~" ]; then
			# shellcheck disable=SC2046
			set -- $(tail -c 40 "$f" | head -c 12 | od -An -tu1)
			truncate -s $(($(stat -c %s "$f") - 40 - ($9 << 24 | ${10} << 16 | ${11} << 8 | ${12}) - $4 - $5)) "$f"
		fi
	done
	echo "${ORDER[*]}" >"$R/etc/modules"
	cp "$BUSYBOX" "$R/bin/busybox"

	# /init runs as PID 1 under busybox sh. It loads the modules, builds the root (host / over
	# 9p, read-only, under a tmpfs overlay), runs the per-run setup and COMMAND from the control
	# share (/ctl, mount tag xferctl), writes the exit status there and powers off.
	cat >"$R/init" <<'INIT'
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc; mount -t sysfs sysfs /sys; mount -t devtmpfs devtmpfs /dev
OUT=/dev/console
off() { sync; poweroff -f; sleep 5; echo o >/proc/sysrq-trigger; }
fatal() { echo "[rxe-vm guest] FATAL: $*" >$OUT; echo 125 >/ctl/rc; off; }
for m in $(cat /etc/modules); do
	insmod /modules/$m.ko || echo "[rxe-vm guest] insmod $m failed" >/dev/console
done
O=trans=virtio,version=9p2000.L,msize=512000
mount -t 9p -o $O,cache=none xferctl /ctl || fatal "no control share"
. /ctl/env
# COMMAND's output goes to the virtio console hvc0 (qemu connects it to its stdout); the kernel
# console is ttyS0 (a log file on the host). Keep hvc0 open: its termios resets on last close.
n=0; while [ ! -c /dev/hvc0 ] && [ $n -lt 100 ]; do sleep 0.02; n=$((n + 1)); done
[ -c /dev/hvc0 ] && OUT=/dev/hvc0
exec 9<>$OUT
stty -F $OUT raw -echo 2>/dev/null   # byte-exact output: no CR added before LF
[ "$VERBOSE" = 1 ] || echo 1 >/proc/sys/kernel/printk
mount -t 9p -o $O,ro,cache=loose xferroot /lower || fatal "cannot mount the host root"
mount -t tmpfs tmpfs /rw && mkdir /rw/upper /rw/work
mount -t overlay -o lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work overlay /newroot ||
	fatal "cannot mount the root overlay"
R=/newroot
mount -t proc proc $R/proc; mount -t sysfs sysfs $R/sys; mount -t devtmpfs devtmpfs $R/dev
mkdir -p $R/dev/pts $R/dev/shm
mount -t devpts -o gid=5,mode=620,ptmxmode=666 devpts $R/dev/pts
mount -t tmpfs -o mode=1777 tmpfs $R/dev/shm; mount -t tmpfs -o mode=1777 tmpfs $R/tmp
mount -t tmpfs -o mode=755 tmpfs $R/run
mount -t configfs configfs $R/sys/kernel/config
mkdir -p $R/run/rxe-vm $R/mnt/host
mount --bind /ctl $R/run/rxe-vm
mount -t 9p -o $O,cache=mmap xferhost $R/mnt/host || fatal "cannot mount $HOSTDIR"
mkdir -p "$R$HOSTDIR" 2>/dev/null; mount --bind $R/mnt/host "$R$HOSTDIR"
# libibverbs dlopens every provider named in /etc/libibverbs.d at start, each costing a slow
# emulated ld.so run: the guest keeps only rxe.
for f in $R/etc/libibverbs.d/*.driver; do [ "${f##*/}" = rxe.driver ] || rm -f "$f"; done
hostname rxe-vm
printf '10.77.0.1\trxe-node0\n10.77.0.2\trxe-node1\n' >>$R/etc/hosts
cut -d' ' -f1 /proc/uptime >/ctl/t_root
chroot $R /bin/bash /run/rxe-vm/setup.sh </dev/null >$OUT 2>&1 || fatal "network/rxe setup failed"
cut -d' ' -f1 /proc/uptime >/ctl/t_ready
if [ "$SYSTEMD" = 1 ]; then
	# The units come from the control share. systemd closes the fds it inherits, so the
	# command's service reopens hvc0 (and makes it raw again).
	cp /ctl/rxe-vm.target /ctl/rxe-vm-cmd.service $R/etc/systemd/system/ || fatal "no units"
	for u in $(cat /ctl/mask); do ln -sf /dev/null $R/etc/systemd/system/$u; done
	# The host's root may come from a container image: with /.dockerenv systemd believes it
	# runs in a container, ignores the kernel command line and skips half of sysinit.
	rm -f $R/.dockerenv $R/run/.containerenv
	exec switch_root $R /lib/systemd/systemd --unit=rxe-vm.target
	fatal "switch_root to systemd failed"
fi
# COMMAND runs in its own session. Its stdout/stderr are a pipe to cat, not the tty: on a tty
# stdio line-buffers and each line costs a virtio round trip under TCG. When it exits, whatever
# it left running in its session is killed, so that nothing holds the pipe open (and so the
# VM cannot hang on a forgotten background process).
mkfifo /tmp/out
cat /tmp/out >$OUT &
C=$!
setsid chroot $R /usr/bin/env -i HOME=/root TERM=dumb LANG=C.UTF-8 HOSTDIR="$HOSTDIR" \
	PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
	/bin/bash -c '. /run/rxe-vm/env; cd "$HOSTDIR" && exec /bin/bash /run/rxe-vm/cmd.sh' \
	</dev/null >/tmp/out 2>&1 &
P=$!
wait $P
echo $? >/tmp/rc
kill -s KILL -- -$P 2>/dev/null
n=0; while kill -0 $C 2>/dev/null && [ $n -lt 100 ]; do sleep 0.02; n=$((n + 1)); done
kill -s KILL -1 2>/dev/null   # stragglers outside the session; cat has flushed by now
cut -d' ' -f1 /proc/uptime >/ctl/t_end
dmesg >/ctl/dmesg 2>/dev/null
cat /tmp/rc >/ctl/rc
off
INIT
	chmod 755 "$R/init"
	(cd "$R" && find . | LC_ALL=C sort | cpio -o -H newc --quiet) | gzip -1 >"$K/initramfs.gz"
	mv "$K/vmlinux" "$VMLINUX" && mv "$K/initramfs.gz" "$INITRD" && echo "$STAMP" >"$CACHE/stamp"
	echo "[rxe-vm] cached $VMLINUX ($KVER) and $INITRD (${#ORDER[@]} modules: ${ORDER[*]})" >&2
	rm -rf "$K"
	trap - EXIT
fi
flock -u 8
[ "$PREPARE" = 0 ] || exit 0

# ---------------------------------------------------------------------------------------------
# Per-run control share: env for /init, COMMAND, the network/rxe setup; rc, timings and dmesg
# come back through it.
CTL=$(mktemp -d "${TMPDIR:-/tmp}/rxe-vm.XXXXXX")
QPID=
cleanup() {
	local rc=$?
	# timeout(1) is qemu's parent and passes the TERM on; KILL after a grace period
	if [ -n "$QPID" ] && kill -0 "$QPID" 2>/dev/null; then
		kill "$QPID" 2>/dev/null; sleep 0.5; kill -9 "$QPID" 2>/dev/null || true
	fi
	[ -n "${TAILPID:-}" ] && kill "$TAILPID" 2>/dev/null
	rm -rf "$CTL"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM HUP

printf 'VERBOSE=%s\nHOSTDIR=%s\nSYSTEMD=%s\n' "$VERBOSE" "$HOSTDIR" "$SYSTEMD" >"$CTL/env"
printf '%s\n' "$CMD" >"$CTL/cmd.sh"
if [ "$SYSTEMD" = 1 ]; then
	cat >"$CTL/rxe-vm.target" <<'UNIT'
[Unit]
Description=rxe-vm: run the command under systemd
Requires=rxe-vm-cmd.service
After=rxe-vm-cmd.service
UNIT
	cat >"$CTL/rxe-vm-cmd.service" <<'UNIT'
[Unit]
Description=rxe-vm: the command
[Service]
Type=oneshot
ExecStart=/bin/bash /run/rxe-vm/sd-cmd.sh
StandardInput=null
UNIT
	# Runs as that service: the same environment, output and exit status as without -S.
	cat >"$CTL/sd-cmd.sh" <<SDCMD
exec </dev/null >/dev/hvc0 2>&1
stty -F /dev/hvc0 raw -echo 2>/dev/null
cut -d' ' -f1 /proc/uptime >/run/rxe-vm/t_ready
env -i HOME=/root TERM=dumb LANG=C.UTF-8 HOSTDIR="$HOSTDIR" \
	PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
	/bin/bash -c '. /run/rxe-vm/env; cd "\$HOSTDIR" && exec /bin/bash /run/rxe-vm/cmd.sh'
rc=\$?
cut -d' ' -f1 /proc/uptime >/run/rxe-vm/t_end
dmesg >/run/rxe-vm/dmesg 2>/dev/null
echo \$rc >/run/rxe-vm/rc
sync
systemctl poweroff -ff >/dev/null 2>&1
SDCMD
	# Units of a real host that cost boot time under TCG or reach for the network.
	echo systemd-timesyncd.service systemd-pstore.service apt-daily.timer \
		apt-daily-upgrade.timer dpkg-db-backup.timer e2scrub_all.timer fstrim.timer \
		man-db.timer systemd-tmpfiles-clean.timer getty.target console-getty.service \
		serial-getty@ttyS0.service systemd-firstboot.service systemd-repart.service \
		postgresql.service >"$CTL/mask"
fi
# Runs in the guest root with the host's bash, ip and rdma. Few execs: each costs 0.1-0.5 s.
cat >"$CTL/setup.sh" <<SETUP
MTU=$MTU
SETUP
cat >>"$CTL/setup.sh" <<'SETUP'
set -e
A=10.77.0.1 B=10.77.0.2
for k in all default; do
	echo 0 >/proc/sys/net/ipv4/conf/$k/rp_filter
	echo 1 >/proc/sys/net/ipv4/conf/$k/accept_local
done
# A veth hands each packet to its peer through the per-CPU input backlog, which holds at most
# netdev_max_backlog (1000) packets. rdma_rxe sends a whole READ response at once: 1 MiB at
# RoCE MTU 1024 is 1024 packets, so the tail is dropped, the transmit fails (hw_counters
# send_err, send_rnr_err) and the requester waits for its retry timer (~2 s with rdma_cm's
# default ACK timeout) before it asks again. Real NICs have no such limit.
echo 100000 >/proc/sys/net/core/netdev_max_backlog
# Both addresses are local to the one namespace, so by default A -> B would go through "lo",
# and rdma_rxe drops packets that arrive on a netdev with no rxe device. Policy routing sends
# A -> B out of veth0 (and B -> A out of veth1), and treats what arrives on a veth as local.
# The local table moves from priority 0 to 100, behind those rules.
ip -b - <<EOF
link set lo up
link add veth0 mtu $MTU type veth peer name veth1 mtu $MTU
addr add $A/24 dev veth0
addr add $B/24 dev veth1
link set veth0 up
link set veth1 up
rule add pref 10 iif veth0 lookup local
rule add pref 11 iif veth1 lookup local
rule add pref 20 to $B lookup 100
rule add pref 21 to $A lookup 101
rule add pref 100 lookup local
rule del pref 0 lookup local
route add $B dev veth0 src $A table 100
route add $A dev veth1 src $B table 101
EOF
# A veth delivers a packet on the CPU that sent it, so a queue pair whose requests go out from
# both vCPUs arrives out of order: NAKs and go-back-N retransmissions (rdma_rxe's
# rcvd_seq_err, duplicate_request). Receive packet steering puts each veth's arrivals on one CPU,
# as a NIC's receive queue keeps one flow in order.
if [ "$(nproc)" -ge 2 ]; then
	echo 1 >/sys/class/net/veth0/queues/rx-0/rps_cpus
	echo 2 >/sys/class/net/veth1/queues/rx-0/rps_cpus
fi
rdma -b - <<EOF
link add rxe0 type rxe netdev veth0
link add rxe1 type rxe netdev veth1
EOF
# gid DEV IPV4: sets GID to the index of DEV's RoCE v2 GID for IPV4 (::ffff:a.b.c.d), once the
# port is ACTIVE; the kernel fills the GID table shortly after the link is created.
gid() {
	local p=/sys/class/infiniband/$1/ports/1 want f g t st i
	local IFS=.
	set -- $1 $2
	IFS=' '
	printf -v want '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x' $2 $3 $4 $5
	for ((i = 0; i < 100; i++)); do
		read -r st <$p/state || st=
		if [[ $st == *ACTIVE* ]]; then
			for f in $p/gids/*; do
				read -r g <$f 2>/dev/null || continue
				read -r t <$p/gid_attrs/types/${f##*/} 2>/dev/null || continue
				if [ "$g" = "$want" ] && [ "$t" = "RoCE v2" ]; then GID=${f##*/}; return 0; fi
			done
		fi
		sleep 0.1
	done
	echo "rxe-vm setup: $1 has no ACTIVE port with a RoCE v2 GID for $2 (state '$st')" >&2
	return 1
}
gid rxe0 $A; G0=$GID
gid rxe1 $B; G1=$GID
cat >/run/rxe-vm/env <<EOF
export RXE_VM=1 RXE_DEV0=rxe0 RXE_IP0=$A RXE_GID0=$G0 RXE_DEV1=rxe1 RXE_IP1=$B RXE_GID1=$G1
EOF
SETUP

# ---------------------------------------------------------------------------------------------
# Boot. q35 + TCG (multi-threaded); microvm is faster to start but hangs under TCG without a
# usable clock source. Three 9p shares: host / (ro), DIR (rw), the control dir.
CONSOLE=$CTL/console.log
: >"$CONSOLE"
APPEND="console=ttyS0 panic=-1 oops=panic mitigations=off tsc=reliable no_timer_check ${RXE_VM_APPEND:-}"
[ "$VERBOSE" = 1 ] || APPEND+=" quiet loglevel=1"
# shellcheck disable=SC2054
QEMU=(qemu-system-x86_64 -M q35 -accel tcg,thread=multi -cpu max -m "$MEM" -smp "$SMP"
	-nodefaults -no-user-config -display none -no-reboot
	-chardev file,id=kcon,path="$CONSOLE" -serial chardev:kcon
	-device virtio-serial-pci,id=vser
	-chardev stdio,id=out,signal=off -device virtconsole,bus=vser.0,chardev=out
	-kernel "$VMLINUX" -initrd "$INITRD" -append "$APPEND"
	-fsdev local,id=r,path=/,security_model=none,readonly=on,multidevs=remap
	-device virtio-9p-pci,fsdev=r,mount_tag=xferroot
	-fsdev local,id=h,path="$HOSTDIR",security_model=none,multidevs=remap
	-device virtio-9p-pci,fsdev=h,mount_tag=xferhost
	-fsdev local,id=c,path="$CTL",security_model=none
	-device virtio-9p-pci,fsdev=c,mount_tag=xferctl)

set +e
# qemu makes its stdout non-blocking; give it a private pipe to cat so that our caller's stdout
# (a terminal, make, tee) is not changed under it.
exec 3> >(exec cat)
CATPID=$!
timeout -k 5 "$TIMEOUT" "${QEMU[@]}" </dev/null >&3 2>&1 &
QPID=$!
exec 3>&-
TAILPID=
if [ "$VERBOSE" = 1 ]; then
	tail -n +1 -f --pid="$QPID" "$CONSOLE" >&2 &
	TAILPID=$!
fi
wait "$QPID"
QRC=$?
QPID=
wait "$CATPID" 2>/dev/null
set -e

[ -z "$DMESG" ] || cp "$( [ -s "$CTL/dmesg" ] && echo "$CTL/dmesg" || echo "$CONSOLE")" "$DMESG"
if [ -s "$CTL/rc" ]; then
	RC=$(cat "$CTL/rc")
elif [ "$QRC" = 124 ] || [ "$QRC" = 137 ]; then
	echo "[rxe-vm] timeout: the VM ran longer than ${TIMEOUT} s and was killed" >&2
	RC=124
else
	RC=125
fi
if [ "$RC" = 125 ]; then
	echo "[rxe-vm] setup failed (qemu exit $QRC); last kernel console lines:" >&2
	tail -n 20 "$CONSOLE" | tr -d '\r' | sed 's/^/[rxe-vm]   /' >&2
fi
if [ "$QUIET" = 0 ]; then
	awk -v rc="$RC" -v t0="$T0" -v t1="$(date +%s.%N)" -v root="$(cat "$CTL/t_root" 2>/dev/null)" \
		-v ready="$(cat "$CTL/t_ready" 2>/dev/null)" -v end="$(cat "$CTL/t_end" 2>/dev/null)" 'BEGIN {
		printf "[rxe-vm] exit %s after %.1f s", rc, t1 - t0
		if (ready != "") printf "; guest ready at %.1f s of guest uptime (root fs at %.1f s)", ready, root
		if (end != "") printf ", command took %.1f s", end - ready
		printf "\n" }' >&2
fi
exit "$RC"
