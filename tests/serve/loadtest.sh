#!/bin/sh
# tests/serve/loadtest.sh SECONDS — `make loadtest`: start qserve on a free loopback
# port over stories260K (the shared fixture), run loadtest.py (64 streaming clients,
# 10% hang up on purpose), stop it with SIGTERM, require a clean exit. Results go
# into docs/serve.md by hand. QC_BIN: the binaries; QC_FIXTURES: the fixtures.
set -e
secs=${1:-60}
bin=${QC_BIN:-build/bin}
fix=${QC_FIXTURES:-../shared/fixtures}
log=$(mktemp /tmp/qc_loadtest.XXXXXX)
"$bin/qserve" "$fix/gguf/stories260K.gguf" --port 0 --max-running 16 --max-queue 256 2>"$log" &
pid=$!
port=""
for _ in $(seq 1 300); do
	port=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$log")
	[ -n "$port" ] && break
	sleep 0.1
done
if [ -z "$port" ]; then
	cat "$log" >&2; kill "$pid" 2>/dev/null; rm -f "$log"; exit 1
fi
rc=0
python3 "$(dirname "$0")/loadtest.py" "$port" "$secs" 64 0.1 || rc=1
kill -TERM "$pid"
wait "$pid" || rc=1
rm -f "$log"
exit $rc
