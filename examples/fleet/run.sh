#!/usr/bin/env bash
# Three gateways, one etcd and one Redis on loopback: push a config, watch all three follow.
#   examples/fleet/run.sh [path/to/sluice]     (default: build/sluice)
# Gateways on 127.0.0.1:18081-18083 (admin 19081-19083), etcd on 23790, Redis on 26379.
# Everything runs in a temp dir and is stopped (by PID) when the script ends.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
sluice=${1:-$here/../../build/sluice}
sluice=$(cd "$(dirname "$sluice")" && pwd)/$(basename "$sluice")
work=$(mktemp -d /tmp/sluice-fleet-XXXXXX)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

etcd --data-dir "$work/etcd" --listen-client-urls http://127.0.0.1:23790 \
    --advertise-client-urls http://127.0.0.1:23790 --listen-peer-urls http://127.0.0.1:23800 \
    --initial-advertise-peer-urls http://127.0.0.1:23800 --initial-cluster default=http://127.0.0.1:23800 \
    >"$work/etcd.log" 2>&1 &
pids+=($!)
redis-server --port 26379 --save '' --appendonly no >"$work/redis.log" 2>&1 &
pids+=($!)
until ETCDCTL_API=3 etcdctl --endpoints 127.0.0.1:23790 get /x >/dev/null 2>&1; do sleep 0.1; done

cp -r "$here/plugins" "$here/fleet.yaml" "$work/"
"$sluice" push -c "$work/fleet.yaml" --etcd http://127.0.0.1:23790 --prefix /fleet

for i in 1 2 3; do
    mkdir -p "$work/gw$i"
    sed "s/PORT/1808$i/; s/ADMIN/1908$i/" "$here/gw.yaml.in" >"$work/gw$i/gw.yaml"
    (cd "$work/gw$i" && exec "$sluice" run -c gw.yaml 2>gw.log) &
    pids+=($!)
done
for i in 1 2 3; do
    until curl -sf "http://127.0.0.1:1908$i/ready" >/dev/null; do sleep 0.1; done
done
for i in 1 2 3; do printf 'gw%d: ' "$i"; curl -s "http://127.0.0.1:1808$i/hello"; done

echo "-- a new answer, pushed once"
sed -i 's/say: hi/say: hey/' "$work/fleet.yaml"
"$sluice" push -c "$work/fleet.yaml" --etcd http://127.0.0.1:23790 --prefix /fleet
sleep 0.5
for i in 1 2 3; do printf 'gw%d: ' "$i"; curl -s "http://127.0.0.1:1808$i/hello"; done

echo "-- the limit is the fleet's: 12 requests spread over the three gateways"
for n in $(seq 0 11); do
    curl -s -o /dev/null -w '%{http_code} ' "http://127.0.0.1:1808$((n % 3 + 1))/hello"
done
echo
echo "-- etcd as the gateways see it"
curl -s http://127.0.0.1:19081/metrics | grep '^sluice_config_source'
if [ -t 0 ]; then
    echo "running in $work; Enter stops everything"
    read -r _
fi
