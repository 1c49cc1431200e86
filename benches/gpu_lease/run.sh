#!/bin/bash
# The GPU lease's checks for issue 67, as ONE command on the device machine (run from the
# repository root there, `.whl` carried: benches/gpu_lease/wheels.sh made it here):
#   bash benches/gpu_lease/run.sh
# CartPole PPO at 4 and 2,048 environments, ours with gpu_command_buffers auto and xla beside
# rejax, 2 alternated repeats; then host SAC on HalfCheetah-v5 with one environment. ~7-8 min on
# an H200; everything lands in $OUT (accel.md, accel.json, the log, the GPU and jax versions).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/gpu_lease_out}; mkdir -p "$OUT"
I="python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target"
$I /tmp/ours .whl/ours/*.whl || exit 1
$I /tmp/rejax .whl/rejax/*.whl || exit 1
export PYTHONUNBUFFERED=1 MUJOCO_GL=egl
printf '#!/bin/sh\nPYTHONPATH=/tmp/rejax exec python3 "$@"\n' > /tmp/rejaxpy && chmod +x /tmp/rejaxpy
export PYTHONPATH=$PWD:/tmp/ours
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import jax, jaxlib; print('jax', jax.__version__, 'jaxlib', jaxlib.__version__, jax.devices())"
} 2>&1 | tee "$OUT/machine.txt"
# ACCEL_ARGS: other sizes (a dry run of this script on a CPU: "--envs 4 --updates 5 --repeats 1
# --host-sac-steps 1500")
timeout ${BUDGET_S:-480} python3 -m benches accel --num-seeds 0 ${ACCEL_ARGS:---envs 4 2048 \
    --updates 50 --repeats 2 --host-sac-steps 3000} --rejax-python /tmp/rejaxpy --out "$OUT" \
    2>&1 | tee "$OUT/accel.log"
