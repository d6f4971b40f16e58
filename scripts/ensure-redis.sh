#!/usr/bin/env bash
# Makes sure a redis-server (7.x or newer) is on PATH, installing Debian's
# package when it is missing and this machine allows it (root + apt-get).
set -euo pipefail

if command -v redis-server >/dev/null 2>&1; then
  v=$(redis-server --version | sed -n 's/.* v=\([0-9]*\)\..*/\1/p')
  if [ -n "$v" ] && [ "$v" -lt 7 ]; then
    echo "redis-server $v.x found; bulkaction needs 7.x or newer" >&2
    exit 1
  fi
  exit 0
fi

if [ -n "${BULKACTION_TEST_REDIS_URL:-}" ]; then
  exit 0
fi

if command -v apt-get >/dev/null 2>&1; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
      SUDO="sudo -n"
    else
      echo "redis-server is missing. Install it with: sudo apt-get install -y redis-server" >&2
      echo "(or point the tests at a server: BULKACTION_TEST_REDIS_URL=redis://host:6379/0)" >&2
      exit 1
    fi
  fi
  echo "installing redis-server from Debian's packages..." >&2
  if ! $SUDO apt-get install -y --no-install-recommends redis-server >/dev/null 2>&1; then
    $SUDO apt-get update >/dev/null
    $SUDO apt-get install -y --no-install-recommends redis-server >/dev/null
  fi
  # The package starts a system service; the tests run their own servers.
  (command -v systemctl >/dev/null 2>&1 && $SUDO systemctl disable --now redis-server >/dev/null 2>&1) || true
  command -v redis-server >/dev/null 2>&1 && exit 0
fi

echo "redis-server is missing and could not be installed here." >&2
echo "Install Redis 7 (https://redis.io/docs/latest/operate/oss_and_stack/install/) or set BULKACTION_TEST_REDIS_URL." >&2
exit 1
