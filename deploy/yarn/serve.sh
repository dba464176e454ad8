#!/usr/bin/env bash
# Run one Primus service inside a skein container and publish where it listens.
#
#   bash serve.sh NAME COMMAND [ARGS...]
#
# Appends --ready-file to COMMAND, waits until the service has written it
# (which it does once serving), puts the bound address into the application's
# key-value store under NAME.address, then waits for the service and exits with
# its status. SIGTERM/SIGINT are passed on so the service can drain.
set -euo pipefail

name=$1
shift
ready="$PWD/$name.ready"
rm -f "$ready"

"$@" --ready-file "$ready" &
pid=$!
trap 'kill -TERM "$pid" 2>/dev/null || true' TERM INT

while [ ! -s "$ready" ]; do
  if ! kill -0 "$pid" 2>/dev/null; then
    status=0
    wait "$pid" || status=$?
    echo "serve.sh: $name exited with status $status before it was serving" >&2
    exit $((status == 0 ? 1 : status))
  fi
  sleep 0.2
done

address=$(python -c 'import json, sys; print(json.load(open(sys.argv[1]))["address"])' "$ready")
skein kv put current --key "$name.address" --value "$address"
echo "serve.sh: $name serving on $address"

status=0
wait "$pid" || status=$?
# A signal interrupts `wait` (status > 128) while the service is still
# draining: wait again for its own exit status.
if [ "$status" -gt 128 ] && kill -0 "$pid" 2>/dev/null; then
  status=0
  wait "$pid" || status=$?
fi
exit "$status"
