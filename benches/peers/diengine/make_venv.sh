#!/usr/bin/env bash
# Recreate the DI-engine 0.5.3 CPU venv from scratch (niced; ~2-4 min, 1.8 GB). Usage: make_venv.sh [VENV]
set -euo pipefail
D=$(cd "$(dirname "$0")" && pwd)                  # benches/peers/diengine
VENV=${1:-$(cd "$D/../../.." && pwd)/.bench/diengine}   # default: the checkout's .bench/diengine
VENV=$(realpath -m "$VENV")                       # the last step runs from /tmp
rm -rf "$VENV"
nice -n 19 python3.11 -m venv "$VENV"
nice -n 19 "$VENV/bin/pip" install torch==2.13.0          # resolves to 2.13.0+cpu from /opt/wheels here
nice -n 19 "$VENV/bin/pip" install --no-deps DI-engine==0.5.3
nice -n 19 "$VENV/bin/pip" install -r "$D/requirements.txt" -c "$D/constraints.txt"   # numpy<2
"$D/apply_patch.sh" "$VENV"
cd /tmp && nice -n 19 "$VENV/bin/python" -c "import ding, dizoo, ale_py, cv2; print('ok', ding.__version__)"
