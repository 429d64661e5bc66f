#!/bin/sh
# The --ready-file flow: start the real gateway on free ports, wait until it serves, talk
# to it, stop it. For checks `sluice test` cannot make (a real upstream of the job, a
# client of your own). Usage: examples/ci/ready-file.sh [SLUICE]
set -eu
SLUICE=${1:-sluice}
dir=$(mktemp -d)
trap 'kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; rm -rf "$dir"' EXIT

"$SLUICE" run -c "$(dirname "$0")/gw.yaml" --ready-file "$dir/ready" &
pid=$!
# the file appears (atomically) once every listener is bound
i=0
while [ ! -s "$dir/ready" ]; do
    i=$((i + 1))
    [ $i -le 100 ] || { echo "sluice did not get ready" >&2; exit 1; }
    kill -0 "$pid" || { echo "sluice exited" >&2; exit 1; }
    sleep 0.05
done
# {"pid":N,"listeners":{"web":"127.0.0.1:PORT"},"admin":"127.0.0.1:PORT"}
web=$(sed -n 's/.*"web":"\([^"]*\)".*/\1/p' "$dir/ready")
admin=$(sed -n 's/.*"admin":"\([^"]*\)".*/\1/p' "$dir/ready")

curl -fsS "http://$web/healthz"
curl -fsS "http://$admin/ready"; echo
echo "ready-file flow: ok"
