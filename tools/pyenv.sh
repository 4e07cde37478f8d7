#!/bin/sh
# tools/pyenv.sh — create or refresh the test venv (.venv at the repo root, git-ignored)
# with the pinned packages of tests/serve/requirements.txt; prints the venv's python.
# Idempotent: a venv whose stamp matches the requirements is reused without network.
# Needs python3 with venv (tools/deps.sh installs python3-venv) and PyPI access the first time.
set -e
root=$(cd "$(dirname "$0")/.." && pwd)
venv="$root/.venv"
req="$root/tests/serve/requirements.txt"
stamp="$venv/.qc-requirements"
if [ -x "$venv/bin/python" ] && [ -f "$stamp" ] && cmp -s "$req" "$stamp"; then
	echo "$venv/bin/python"
	exit 0
fi
# the system python (not a shim) so the venv does not depend on the caller's PATH
py=/usr/bin/python3
[ -x "$py" ] || py=python3
"$py" -m venv "$venv" >&2
"$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$req" >&2
cp "$req" "$stamp"
echo "$venv/bin/python"
