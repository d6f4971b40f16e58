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

if command -v apt-get >/dev/null 2>&1; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
      SUDO="sudo -n"
    else
      echo "chromium is missing. Install it with: sudo apt-get install -y chromium" >&2
      echo "(or name a Chrome/Chromium binary: BULKACTION_CHROMIUM=/path/to/chrome)" >&2
      exit 1
    fi
  fi
  echo "installing chromium from Debian's packages (for the dashboard's browser tests)..." >&2
  if ! $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium >/dev/null 2>&1; then
    $SUDO apt-get update >/dev/null
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium >/dev/null
  fi
  command -v chromium >/dev/null 2>&1 && exit 0
fi

echo "chromium is missing and could not be installed here." >&2
echo "Install Chromium or Chrome, or set BULKACTION_CHROMIUM to its binary; without one the browser tests are skipped (and fail when CI=true)." >&2
exit 1
