#!/bin/bash
# GPU lease script: CartPole populations (256, 1024 seeds), ours vs rejax vmapped.
cd "$(dirname "$0")/.."
I="python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target"
$I /tmp/common .whl/ours/gymnasium*.whl .whl/ours/farama*.whl .whl/ours/tensorboardx*.whl
$I /tmp/ours .whl/ours/gymnax*.whl
$I /tmp/rejax .whl/rejax/*.whl
export PYTHONUNBUFFERED=1
OURS="env PYTHONPATH=$PWD:/tmp/ours:/tmp/common python3"
REJAX="env PYTHONPATH=/tmp/rejax:/tmp/common python3"
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; lscpu | grep "Model name";
  $OURS -c "import jax, flax, optax, orbax.checkpoint, gymnax; print('jax', jax.__version__, jax.devices(), 'flax', flax.__version__, 'optax', optax.__version__)"; } 2>&1
HP=$(cat .gpu/hp.json)
seeds() { python3 -c "print(','.join(map(str, range($1))))"; }
ours() {  # N tag variant extra-sets...
  local n=$1 tag=$2 v=$3; shift 3; rm -rf /tmp/run_$tag
  local t0=$(date +%s.%N)
  timeout 150 env PYTHONPATH=$PWD/.gpu/$v:/tmp/ours:/tmp/common python3 -m jaxrl_dist.train configs/cartpole.yaml --set "population.seeds=[$(seeds $n)]" compile_cache=null "$@" --run-dir /tmp/run_$tag --no-progress > $OUT/$tag.log 2>&1
  echo "rc $? command_wall_s $(python3 -c "print(round($(date +%s.%N)-$t0,1))")" >> $OUT/$tag.log
  tail -3 $OUT/$tag.log | cut -c1-1500
}
rejax() {
  local n=$1 tag=$2; local t0=$(date +%s.%N)
  timeout 150 $REJAX benches/peers/rejax_runner.py --env CartPole-v1 --seeds $(seeds $n) --total-timesteps 500000 --hparams "$HP" --eval-points 1 > $OUT/$tag.log 2>&1
  echo "rc $? command_wall_s $(python3 -c "print(round($(date +%s.%N)-$t0,1))")" >> $OUT/$tag.log
  python3 - $OUT/$tag.log <<'PY'
import json,sys
for l in open(sys.argv[1]):
    if l.startswith('{"trainer"'):
        d=json.loads(l); f=d["final_eval"]
        print("rejax", len(f), "seeds: solved", sum(v>=475 for v in f), "mean", sum(f)/len(f), "wall", d["wall_s"], "compile", d["compile_s"], "train", d["train_s"])
    elif l.startswith("rc "): print(l.strip())
PY
}
for n in 256 1024; do
  ours $n C$n C; ours $n A$n A; ours $n B$n B; rejax $n rejax$n
done
