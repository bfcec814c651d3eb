#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# The systemd units as `make install` writes them (into a temporary PREFIX, so the paths in
# them are substituted and ExecStart= names a binary that exists): `systemd-analyze verify`
# reports nothing (it also finds the man pages of Documentation= under the same prefix),
# `systemd-analyze security` rates xferd.service at most 2.5, the sandbox keeps what RDMA
# needs, and the sysusers file creates the user and group. Offline: no systemd needs to run.
set -u

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-build}
MAX_EXPOSURE=2.5

passed=0
failed=0
ok() { echo "ok - $1"; passed=$((passed + 1)); }
fail() {
	echo "FAIL - $1 ($2)"
	failed=$((failed + 1))
}

DIR=$(mktemp -d /tmp/xferd-unit.XXXXXX)
trap 'rm -rf "$DIR"' EXIT
P=$DIR/usr
UNITS=$P/lib/systemd/system

if ! command -v systemd-analyze >/dev/null; then
	echo "FAIL - systemd-analyze not found (Debian package systemd; scripts/install-deps.sh)"
	echo "0 passed, 1 failed"
	exit 1
fi

# SYSCONFDIR too: the example config goes to /etc whatever PREFIX is, and a test must not
# write the host's /etc.
if make --no-print-directory -C "$ROOT" install B="$BUILD" PREFIX="$P" SYSCONFDIR="$DIR/etc" \
	>"$DIR/install.log" 2>&1; then
	ok "make install PREFIX=$P"
else
	fail "make install" "$(tail -n 3 "$DIR/install.log" | tr '\n' ' ')"
	echo "$passed passed, $failed failed"
	exit 1
fi

svc=$UNITS/xferd.service
if grep -q '@[A-Z]*@' "$svc"; then
	fail "installed xferd.service has its paths substituted" "$(grep '@[A-Z]*@' "$svc")"
elif grep -qx "ExecStart=$P/sbin/xferd --systemd --config $DIR/etc/xferd/xferd.conf \$XFERD_OPTS" "$svc"; then
	ok "installed xferd.service runs $P/sbin/xferd with the installed $DIR/etc/xferd/xferd.conf"
else
	fail "installed xferd.service runs $P/sbin/xferd --config SYSCONFDIR/xferd/xferd.conf" "$(grep ExecStart= "$svc")"
fi
# The config the unit names exists after make install, and the daemon takes it as it is.
if out=$("$P/sbin/xferd" --check-config --config "$DIR/etc/xferd/xferd.conf" 2>&1); then
	ok "the installed xferd.conf the unit reads passes xferd --check-config"
else
	fail "the installed xferd.conf passes --check-config" "$(echo "$out" | tail -n 2 | tr '\n' ' ')"
fi

# verify runs `man` for each Documentation= page: MANPATH makes it look under the prefix.
out=$(cd "$UNITS" && MANPATH=$P/share/man SYSTEMD_LOG_COLOR=0 \
	systemd-analyze verify ./xferd.socket ./xferd.service 2>&1)
rc=$?
if [ $rc -eq 0 ] && [ -z "$out" ]; then
	ok "systemd-analyze verify xferd.socket xferd.service: clean"
else
	fail "systemd-analyze verify: clean" "exit $rc: $(echo "$out" | tr '\n' ' ')"
fi

out=$(cd "$UNITS" && systemd-analyze security --offline=true --no-pager ./xferd.service 2>&1)
level=$(echo "$out" | sed -n 's/.*Overall exposure level for xferd.service: \([0-9.]*\).*/\1/p')
if [ -z "$level" ]; then
	fail "systemd-analyze security xferd.service" "no overall level in: $(echo "$out" | tail -n 3)"
elif awk -v l="$level" -v m="$MAX_EXPOSURE" 'BEGIN { exit !(l <= m) }'; then
	ok "systemd-analyze security xferd.service: $level <= $MAX_EXPOSURE"
else
	fail "systemd-analyze security xferd.service <= $MAX_EXPOSURE" "$level; open items: $(
		echo "$out" | grep '✗' | sed 's/  */ /g' | cut -c1-60 | tr '\n' ';')"
fi

# What the score cannot see: the sandbox must leave RDMA and the control socket working.
want=(
	"User=xferd"
	"CapabilityBoundingSet=CAP_IPC_LOCK"
	"AmbientCapabilities=CAP_IPC_LOCK"
	"LimitMEMLOCK=infinity"
	"DeviceAllow=char-infiniband_verbs rw"
	"DeviceAllow=/dev/infiniband/rdma_cm rw"
	"RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK AF_IB"
	"SystemCallFilter=@system-service"
	"Type=notify"
)
missing=()
for w in "${want[@]}"; do grep -qxF "$w" "$svc" || missing+=("$w"); done
# PrivateDevices= would hide /dev/infiniband, PrivateUsers= would turn every client's
# SO_PEERCRED uid into the overflow uid, PrivateNetwork= would hide the RDMA netdevs.
for w in PrivateDevices=yes PrivateUsers=yes PrivateNetwork=yes ProcSubset=pid; do
	grep -qxF "$w" "$svc" && missing+=("not $w")
done
if [ ${#missing[@]} -eq 0 ]; then
	ok "xferd.service: xferd user, CAP_IPC_LOCK only, verbs devices, address families"
else
	fail "xferd.service hardening lines" "${missing[*]}"
fi

sock=$UNITS/xferd.socket
if grep -qx 'ListenSequentialPacket=/run/xferd/xferd.sock' "$sock" &&
	grep -qx 'SocketGroup=xferd' "$sock" && grep -qx 'SocketMode=0660' "$sock"; then
	ok "xferd.socket: SEQPACKET /run/xferd/xferd.sock, group xferd, 0660"
else
	fail "xferd.socket listens where clients look" "$(grep -E '^(Listen|Socket)' "$sock" | tr '\n' ' ')"
fi

mkdir -p "$DIR/root/etc"
if systemd-sysusers --root="$DIR/root" "$P/lib/sysusers.d/xferd.conf" >/dev/null 2>&1 &&
	grep -q '^xferd:x:[0-9]*:[0-9]*:.*:/usr/sbin/nologin$' "$DIR/root/etc/passwd" &&
	grep -q '^xferd:x:' "$DIR/root/etc/group"; then
	ok "systemd-sysusers creates the system user and group xferd"
else
	fail "systemd-sysusers creates user and group xferd" "$(cat "$DIR/root/etc/passwd" 2>&1)"
fi

# The sysctl.d file: installed, and valid: applied inside a network namespace of its own (root),
# so the host's setting is never touched; without root only its line is checked.
sysctl_file=$P/lib/sysctl.d/60-xferd.conf
want='net.ipv4.tcp_slow_start_after_idle = 0'
if [ ! -f "$sysctl_file" ]; then
	fail "the sysctl.d file is installed" "no $sysctl_file"
elif [ "$(id -u)" -ne 0 ] || ! command -v unshare >/dev/null; then
	if grep -qx "$want" "$sysctl_file"; then
		ok "60-xferd.conf installed with '$want' (not applied: needs root and unshare)"
	else
		fail "60-xferd.conf holds '$want'" "$(grep -v '^#' "$sysctl_file")"
	fi
elif got=$(unshare -n sh -c 'sysctl -q -p "$1" && sysctl -n net.ipv4.tcp_slow_start_after_idle' \
	sh "$sysctl_file" 2>&1) && [ "$got" = 0 ]; then
	ok "60-xferd.conf installed; applied, it sets net.ipv4.tcp_slow_start_after_idle to 0"
else
	fail "60-xferd.conf applies" "$got"
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
