#!/usr/bin/env bash
# Create the Stable-Baselines3 PPO peer venv (CPU torch), outside the package's own venv.
# Usage: make_venv.sh [VENV]      default VENV: $HOME/.cache/jaxrl_dist/peers/sb3-venv
# Installs the exact pins of requirements.txt (niced; about 1 GB on disk, a few minutes).
set -euo pipefail
D=$(cd "$(dirname "$0")" && pwd)                              # benches/peers/sb3
VENV=$(realpath -m "${1:-$HOME/.cache/jaxrl_dist/peers/sb3-venv}")
PY=${PYTHON:-}
if [ -z "$PY" ]; then
  if [ -x /root/.pyenv/versions/3.11.7/bin/python3.11 ]; then PY=/root/.pyenv/versions/3.11.7/bin/python3.11
  else PY=$(command -v python3.11) || { echo "python3.11 not found (set PYTHON=...)" >&2; exit 1; }; fi
fi
"$PY" -c 'import sys; assert sys.version_info[:2] == (3, 11), sys.version' || { echo "$PY is not Python 3.11" >&2; exit 1; }

source "$D/../torch_cpu_index.sh"   # EXTRA: PyTorch's CPU index when it answers

rm -rf "$VENV"
mkdir -p "$(dirname "$VENV")"
nice -n 19 "$PY" -m venv "$VENV"
nice -n 19 "$VENV/bin/pip" install --no-input "${EXTRA[@]}" -r "$D/requirements.txt"
cd /tmp && "$VENV/bin/python" -c "
import torch, stable_baselines3, gymnasium, mujoco
gymnasium.make('HalfCheetah-v5').reset(seed=0)
print('ok torch', torch.__version__, 'sb3', stable_baselines3.__version__, 'gymnasium', gymnasium.__version__, 'mujoco', mujoco.__version__)"
echo "venv: $VENV"
