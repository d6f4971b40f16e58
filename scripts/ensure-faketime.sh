#!/usr/bin/env bash
# Makes sure faketime (libfaketime) is on PATH for the chaos suite's clock
# skew scenario (T7), installing Debian's package when it is missing and
# this machine allows it (root or passwordless sudo + apt-get).
set -euo pipefail

if command -v faketime >/dev/null 2>&1; then
  exit 0
fi

# shellcheck source=apt-install.sh
. "$(dirname "$0")/apt-install.sh"
if apt_install faketime ""; then
  command -v faketime >/dev/null 2>&1 && exit 0
fi

echo "faketime is missing and could not be installed here (the chaos suite skips T7 without it, or fails with CI=true)." >&2
exit 1
