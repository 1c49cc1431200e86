#!/usr/bin/env bash
# Create the sbx (Stable-Baselines3's JAX port) peer venv, outside the package's own venv: sbx-rl
# 0.28 pins jax < 0.11 and pulls Stable-Baselines3 with torch (the CPU wheel here).
# Usage: make_venv.sh [VENV]      default VENV: $HOME/.cache/jaxrl_dist/peers/sbx-venv
set -euo pipefail
VENV=$(realpath -m "${1:-$HOME/.cache/jaxrl_dist/peers/sbx-venv}")
PY=${PYTHON:-$(command -v python3.11)}
source "$(dirname "$0")/../torch_cpu_index.sh"   # EXTRA: PyTorch's CPU index when it answers
rm -rf "$VENV"
mkdir -p "$(dirname "$VENV")"
nice -n 19 "$PY" -m venv "$VENV"
nice -n 19 "$VENV/bin/pip" install --no-input "${EXTRA[@]}" "torch==2.13.0+cpu" "sbx-rl==0.28.0" "gymnasium[mujoco]==1.4.0"
cd /tmp && "$VENV/bin/python" -c "
import jax, sbx, stable_baselines3, gymnasium
gymnasium.make('HalfCheetah-v5').reset(seed=0)
print('ok jax', jax.__version__, 'sbx', sbx.__version__, 'sb3', stable_baselines3.__version__)"
"$VENV/bin/pip" freeze > "$VENV/freeze.txt"
echo "venv: $VENV"
