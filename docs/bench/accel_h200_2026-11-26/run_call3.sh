#!/bin/bash
# GPU lease script: CartPole populations (256, 1024 seeds), ours vs rejax vmapped.
cd "$(dirname "$0")/.."
I="python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target"
$I /tmp/common .whl/ours/gymnasium*.whl .whl/ours/farama*.whl .whl/ours/tensorboardx*.whl
$I /tmp/ours .whl/ours/gymnax*.whl
$I /tmp/rejax .whl/rejax/*.whl
export PYTHONUNBUFFERED=1
printf '#!/bin/sh\nPYTHONPATH=/tmp/rejax:/tmp/common exec python3 "$@"\n' > /tmp/rejaxpy && chmod +x /tmp/rejaxpy
export PYTHONPATH=$PWD:/tmp/ours:/tmp/common
timeout 270 python3 -m jaxrl_dist.bench accel --envs 4 2048 --updates 50 --repeats 2 --num-seeds 0 --rejax-python /tmp/rejaxpy --out $OUT
