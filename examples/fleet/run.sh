#!/usr/bin/env bash
# Three gateways, one etcd and one Redis on loopback: push a config, watch all three follow.
#   examples/fleet/run.sh [path/to/sluice]     (default: sluice on PATH, else build/sluice)
# Gateways on 127.0.0.1:18081-18083 (admin 19081-19083), etcd on 23790, Redis on 26379;
# FLEET_PORTS="GW1 GW2 GW3 ADMIN1 ADMIN2 ADMIN3 ETCD ETCD_PEER REDIS" picks others (CI does).
# Everything runs in a temp dir and is stopped (by PID) when the script ends. It exits 1
# when a gateway does not answer as it should.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
sluice=${1:-$(command -v sluice || echo "$here/../../build/sluice")}
sluice=$(cd "$(dirname "$sluice")" && pwd)/$(basename "$sluice")
read -r gw1 gw2 gw3 adm1 adm2 adm3 etcd peer redis <<<"${FLEET_PORTS:-18081 18082 18083 19081 19082 19083 23790 23800 26379}"
gws=("$gw1" "$gw2" "$gw3")
adms=("$adm1" "$adm2" "$adm3")
work=$(mktemp -d /tmp/sluice-fleet-XXXXXX)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

# Every gateway answers /hello with $1 within 5 s, else the script fails.
answers() {
    for i in 0 1 2; do
        local got="" n=0
        while [ "$got" != "$1" ] && [ $n -lt 50 ]; do
            got=$(curl -s "http://127.0.0.1:${gws[$i]}/hello" || true)
            [ "$got" = "$1" ] || { sleep 0.1; n=$((n + 1)); }
        done
        printf 'gw%d: %s\n' $((i + 1)) "$got"
        [ "$got" = "$1" ] || { echo "FAIL: gw$((i + 1)) answered '$got', not '$1'"; exit 1; }
    done
}

etcd --data-dir "$work/etcd" --listen-client-urls "http://127.0.0.1:$etcd" \
    --advertise-client-urls "http://127.0.0.1:$etcd" --listen-peer-urls "http://127.0.0.1:$peer" \
    --initial-advertise-peer-urls "http://127.0.0.1:$peer" --initial-cluster "default=http://127.0.0.1:$peer" \
    >"$work/etcd.log" 2>&1 &
pids+=($!)
redis-server --port "$redis" --save '' --appendonly no >"$work/redis.log" 2>&1 &
pids+=($!)
until ETCDCTL_API=3 etcdctl --endpoints "127.0.0.1:$etcd" get /x >/dev/null 2>&1; do sleep 0.1; done

cp -r "$here/plugins" "$here/fleet.yaml" "$work/"
"$sluice" push -c "$work/fleet.yaml" --etcd "http://127.0.0.1:$etcd" --prefix /fleet

for i in 0 1 2; do
    mkdir -p "$work/gw$i"
    sed "s/PORT/${gws[$i]}/; s/ADMIN/${adms[$i]}/; s/REDIS/$redis/; s/ETCD/$etcd/" "$here/gw.yaml.in" >"$work/gw$i/gw.yaml"
    (cd "$work/gw$i" && exec "$sluice" run -c gw.yaml 2>gw.log) &
    pids+=($!)
done
for i in 0 1 2; do
    until curl -sf "http://127.0.0.1:${adms[$i]}/ready" >/dev/null; do sleep 0.1; done
done
answers "hi from the fleet"

echo "-- a new answer, pushed once"
sed -i 's/say: hi/say: hey/' "$work/fleet.yaml"
"$sluice" push -c "$work/fleet.yaml" --etcd "http://127.0.0.1:$etcd" --prefix /fleet
answers "hey from the fleet"

echo "-- the limit is the fleet's: 12 requests spread over the three gateways"
sleep 1.2 # the bucket (rate 5, burst 5) fills again after the requests above
codes=""
for n in $(seq 0 11); do
    codes+="$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:${gws[$((n % 3))]}/hello") "
done
echo "$codes"
# 4 requests per gateway: a limit per gateway (burst 5) would pass all 12
passed=$(grep -o 200 <<<"$codes" | wc -l)
if [ "$passed" -lt 1 ] || [ "$passed" -gt 9 ]; then
    echo "FAIL: $passed of 12 passed; the fleet's limit passes about 5"
    exit 1
fi
echo "-- etcd as the gateways see it"
curl -s "http://127.0.0.1:$adm1/metrics" | grep '^sluice_config_source'
if [ -t 0 ]; then
    echo "running in $work; Enter stops everything"
    read -r _
fi
