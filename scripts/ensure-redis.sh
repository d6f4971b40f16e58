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

# shellcheck source=apt-install.sh
. "$(dirname "$0")/apt-install.sh"
if apt_install redis-server "(or point the tests at a server: BULKACTION_TEST_REDIS_URL=redis://host:6379/0)"; then
  command -v redis-server >/dev/null 2>&1 && exit 0
fi

echo "redis-server is missing and could not be installed here." >&2
echo "Install Redis 7 (https://redis.io/docs/latest/operate/oss_and_stack/install/) or set BULKACTION_TEST_REDIS_URL." >&2
exit 1
