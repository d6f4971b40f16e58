#!/usr/bin/env bash
# Makes sure a python3 (3.9 or newer) is on PATH for the Python example's
# test (examples/python), installing Debian's package when it is missing
# and this machine allows it (root + apt-get).
set -euo pipefail

if command -v python3 >/dev/null 2>&1; then
  if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 9))' 2>/dev/null; then
    echo "$(python3 --version 2>&1) found; the Python example needs 3.9 or newer" >&2
    exit 1
  fi
  exit 0
fi

# shellcheck source=apt-install.sh
. "$(dirname "$0")/apt-install.sh"
if apt_install python3 ""; then
  command -v python3 >/dev/null 2>&1 && exit 0
fi

echo "python3 is missing and could not be installed here." >&2
echo "Install Python 3.9 or newer (https://www.python.org/downloads/); the example's test is skipped without it unless CI=true." >&2
exit 1
