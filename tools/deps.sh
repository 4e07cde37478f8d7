#!/bin/sh
# tools/deps.sh — install the Debian packages qconvert builds and tests with, if missing.
# Idempotent and quiet when everything is present; uses sudo when not root.
set -e
# libmicrohttpd-dev: qserve's HTTP; curl, python3-venv: the qserve tests (tests/test_qserve*.c, tools/pyenv.sh)
pkgs="build-essential clang libarchive-dev libxxhash-dev libcjson-dev libpcre2-dev libicu-dev libmicrohttpd-dev curl python3-venv"
missing=""
for p in $pkgs; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "deps: installing$missing" >&2
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
