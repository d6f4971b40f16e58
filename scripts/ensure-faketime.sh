#!/usr/bin/env bash
# Makes sure faketime (libfaketime) and gcc are on PATH for the chaos
# suite's clock skew scenario (T7: gcc builds the jemalloc stand-in that lets
# redis-server run under faketime, docs/chaos.md), installing Debian's
# packages when they are missing and this machine allows it (root or
# passwordless sudo + apt-get).
set -euo pipefail

# shellcheck source=apt-install.sh
. "$(dirname "$0")/apt-install.sh"
missing=0
for tool in faketime gcc; do
  if command -v "$tool" >/dev/null 2>&1; then
    continue
  fi
  if apt_install "$tool" "" && command -v "$tool" >/dev/null 2>&1; then
    continue
  fi
  echo "$tool is missing and could not be installed here (the chaos suite skips T7 without it, or fails with CI=true)." >&2
  missing=1
done
exit "$missing"
