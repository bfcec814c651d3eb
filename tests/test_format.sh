#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# The C sources follow .clang-format (STYLE.md 9.3): `make format-check`, as one test. `make
# format` rewrites the files that drift. Skipped where clang-format is not installed
# (scripts/install-deps.sh installs it).
set -u

ROOT=$(cd "$(dirname "$0")/.." && pwd)
passed=0 failed=0 skipped=0
# shellcheck source=tests/lib.sh
. "$ROOT/tests/lib.sh"

if ! command -v "${CLANG_FORMAT:-clang-format}" >/dev/null; then
	skip format "clang-format is not installed"
elif out=$(make --no-print-directory -s -C "$ROOT" format-check 2>&1); then
	ok "format: every C file follows .clang-format"
else
	echo "$out" | grep -E '^[^ ]+:[0-9]+:[0-9]+: error' | head -n 20 | sed 's/^/# /'
	fail format "some C files drift from .clang-format: run make format"
fi
summary
