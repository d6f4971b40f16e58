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

if command -v apt-get >/dev/null 2>&1; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
      SUDO="sudo -n"
    else
      echo "python3 is missing. Install it with: sudo apt-get install -y python3" >&2
      exit 1
    fi
  fi
  echo "installing python3 from Debian's packages..." >&2

  if ! $SUDO apt-get install -y --no-install-recommends python3 >/dev/null 2>&1; then
    $SUDO apt-get update >/dev/null
    $SUDO apt-get install -y --no-install-recommends python3 >/dev/null
  fi
  command -v python3 >/dev/null 2>&1 && exit 0
fi

echo "python3 is missing and could not be installed here." >&2
echo "Install Python 3.9 or newer (https://www.python.org/downloads/); the example's test is skipped without it unless CI=true." >&2
exit 1
