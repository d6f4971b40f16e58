#!/usr/bin/env bash
# Makes sure a Chromium is on PATH for the dashboard's browser tests
# (services/gateway/ui_test.go, driven by chromedp), installing Debian's
# chromium package when it is missing and this machine allows it (root or
# sudo + apt-get). BULKACTION_CHROMIUM may name a browser binary instead.
set -euo pipefail

if [ -n "${BULKACTION_CHROMIUM:-}" ] && [ -x "${BULKACTION_CHROMIUM}" ]; then
  exit 0
fi
for b in chromium chromium-browser google-chrome google-chrome-stable; do
  if command -v "$b" >/dev/null 2>&1; then
    exit 0
  fi
done

# shellcheck source=apt-install.sh
. "$(dirname "$0")/apt-install.sh"
if apt_install chromium "(or name a Chrome/Chromium binary: BULKACTION_CHROMIUM=/path/to/chrome)"; then
  command -v chromium >/dev/null 2>&1 && exit 0
fi

echo "chromium is missing and could not be installed here." >&2
echo "Install Chromium or Chrome, or set BULKACTION_CHROMIUM to its binary; without one the browser tests are skipped (and fail when CI=true)." >&2
exit 1
