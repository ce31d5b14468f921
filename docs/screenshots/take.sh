#!/usr/bin/env bash
# Screenshots of TensorBoard's Scalars, HParams and Mesh dashboards for a run or sweep
# directory, with headless Chromium (Debian's `chromium` package):
#   .venv/bin/python train.py -m impl=gather_matmul,block_sparse steps=60 eval_every=20 \
#       hydra.sweep.dir=/tmp/sweep
#   bash docs/screenshots/take.sh /tmp/sweep docs/screenshots
set -euo pipefail
logdir=$1
out=${2:-docs/screenshots}
port=${PORT:-6177}
here=$(cd "$(dirname "$0")/../.." && pwd)
"$here/.venv/bin/python" -m tensorboard.main --logdir "$logdir" --host 127.0.0.1 \
    --port "$port" --load_fast false >/dev/null 2>&1 &
server=$!
trap 'kill $server' EXIT
until curl -sf "http://127.0.0.1:$port/data/runs" | grep -q train; do sleep 1; done
profile=$(mktemp -d)
shoot() {  # shoot <file> <dashboard fragment>
  chromium --headless --no-sandbox --disable-quic --no-first-run --disable-sync \
    --disable-background-networking --disable-component-update --enable-unsafe-swiftshader \
    --user-data-dir="$profile" --hide-scrollbars --window-size=1400,900 \
    --virtual-time-budget=30000 --screenshot="$out/$1" "http://127.0.0.1:$port/#$2" 2>/dev/null
}
shoot scalars.png "scalars&tagFilter=step_time_ms%7Caccuracy&_smoothingWeight=0"
shoot hparams.png "hparams"
shoot mesh.png "mesh"
