# Sourced by the ensure-*.sh scripts: apt_install PACKAGE HINT installs a
# Debian package when this machine allows it (apt-get, and root or
# password-less sudo), retrying once after `apt-get update`. It returns 1,
# after printing HINT, when it cannot.
apt_install() {
  local pkg=$1 hint=$2 sudo=""
  if ! command -v apt-get >/dev/null 2>&1; then
    return 1
  fi
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
      sudo="sudo -n"
    else
      echo "$pkg is missing. Install it with: sudo apt-get install -y $pkg" >&2
      [ -n "$hint" ] && echo "$hint" >&2
      return 1
    fi
  fi
  echo "installing $pkg from Debian's packages..." >&2
  if ! $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$pkg" >/dev/null 2>&1; then
    $sudo apt-get update >/dev/null
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$pkg" >/dev/null
  fi
  # A package that starts a system service (redis-server): the tests run
  # their own servers.
  if [ "$pkg" = redis-server ]; then
    (command -v systemctl >/dev/null 2>&1 && $sudo systemctl disable --now redis-server >/dev/null 2>&1) || true
  fi
}
