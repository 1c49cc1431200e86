#!/usr/bin/env bash
# Apply ddp_cpu.patch (CPU/gloo DDP for DI-engine 0.5.3) to a venv's site-packages.
# Usage: apply_patch.sh [VENV]   (default: the checkout's .bench/diengine). Idempotent.
set -euo pipefail
D=$(cd "$(dirname "$0")" && pwd)                  # benches/peers/diengine
VENV=${1:-$(cd "$D/../../.." && pwd)/.bench/diengine}
PATCH=$D/ddp_cpu.patch
SP=$(nice -n 19 "$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
cd "$SP"
if patch -p1 -R --dry-run -s -f < "$PATCH" >/dev/null 2>&1; then
  echo "already applied in $SP"; exit 0
fi
patch -p1 -N -s < "$PATCH"
find ding/utils ding/worker -name '__pycache__' -prune -exec rm -rf {} +
echo "applied to $SP"
