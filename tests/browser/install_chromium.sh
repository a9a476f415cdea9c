#!/usr/bin/env bash
# Install Debian's chromium for the browser check of the built book (tests/browser).
#
# - Quick and idempotent: does nothing when /usr/bin/chromium is already there.
# - Never downloads a browser from anywhere but the system's package manager
#   (no `playwright install`): the tests drive /usr/bin/chromium.
# - Without apt-get or without root (a reader's Mac, a shared machine) it says that the browser
#   check will be skipped and why, and exits 0; under CI=true any failure to install is an error.
set -u

# The tests launch this path (Debian's package puts it there).
CHROMIUM=/usr/bin/chromium

if [ -x "$CHROMIUM" ]; then
    exit 0
fi

in_ci() { [ "${CI:-}" = "true" ]; }

give_up() {
    if in_ci; then
        echo "install_chromium.sh: ERROR: $1; CI=true, so the browser check cannot be skipped." >&2
        exit 1
    fi
    echo "install_chromium.sh: $1; the browser check of the book (tests/browser) will be skipped." >&2
    exit 0
}

command -v apt-get >/dev/null 2>&1 || give_up "apt-get not found (not a Debian/Ubuntu system)"
[ "$(id -u)" = "0" ] || give_up "not root, so apt-get cannot install chromium (run: sudo apt-get install -y chromium)"

export DEBIAN_FRONTEND=noninteractive
if ! apt-get install -y -q --no-install-recommends chromium; then
    # A fresh image has no package lists yet.
    apt-get update -q || give_up "apt-get update failed"
    apt-get install -y -q --no-install-recommends chromium || give_up "apt-get install chromium failed"
fi

[ -x "$CHROMIUM" ] || give_up "$CHROMIUM is still missing after apt-get install chromium"
echo "install_chromium.sh: installed $("$CHROMIUM" --version 2>/dev/null || echo "$CHROMIUM")"
