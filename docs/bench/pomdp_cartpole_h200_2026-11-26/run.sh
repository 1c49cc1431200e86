#!/bin/bash
# GPU lease script (2026-11-26, 12th session): recurrent PPO (configs/cartpole_pomdp_gru.yaml, 16
# seeds vmapped, 500k env steps each) vs PureJaxRL's ppo_rnn.py on the same task and budget, on one
# GPU; one after the other, ours first, then theirs, then ours again if time is left.
cd "$(dirname "$0")/../../.."
I="python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target"
$I /tmp/common .whl/ours/gymnasium*.whl .whl/ours/farama*.whl .whl/ours/tensorboardx*.whl
$I /tmp/ours .whl/ours/gymnax*.whl
$I /tmp/pj .whl/rejax/gymnax*.whl .whl/rejax/distrax*.whl .whl/rejax/tfp_nightly*.whl .whl/rejax/dm_tree*.whl .whl/rejax/decorator*.whl .whl/rejax/gast*.whl
export PYTHONUNBUFFERED=1
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; lscpu | grep -E "Model name|^CPU\(s\)";
  python3 -c "import jax, flax, optax; print('jax', jax.__version__, jax.devices(), 'flax', flax.__version__, 'optax', optax.__version__)"; } > $OUT/info.txt 2>&1
cat $OUT/info.txt
S=100,101,102,103,104,105,106,107,108,109,110,111,112,113,114,115
ours() { t0=$(date +%s); PYTHONPATH=$PWD:/tmp/ours:/tmp/common timeout ${1} python3 -m jaxrl_dist.seeds configs/cartpole_pomdp_gru.yaml --seeds $S --set compile_cache=null > $OUT/$2.json 2> $OUT/$2.err
  echo "$2 rc $? wall $(( $(date +%s) - t0 ))"; tail -3 $OUT/$2.err | cut -c1-400; python3 -c "import json,sys; d=json.load(open(sys.argv[1])); import numpy as np; e=np.array(d['final_eval']); print(sys.argv[1], 'wall', round(d['wall_s'],1), 'mean', e.mean(), 'min', e.min(), 'n>=475', (e>=475).sum())" $OUT/$2.json; }
theirs() { t0=$(date +%s); PYTHONPATH=/tmp/pj:/tmp/common timeout ${1} python3 benches/peers/purejaxrl_rnn_runner.py --config configs/cartpole_pomdp_gru.yaml --seeds $S --src .bench/purejaxrl_src > $OUT/$2.json 2> $OUT/$2.err
  echo "$2 rc $? wall $(( $(date +%s) - t0 ))"; tail -3 $OUT/$2.err | cut -c1-400; python3 -c "import json,sys; d=json.load(open(sys.argv[1])); import numpy as np; e=np.array(d['final_eval']); print(sys.argv[1], 'wall', round(d['wall_s'],1), 'compile', round(d['compile_s'],1), 'train', round(d['train_s'],1), 'mean', e.mean(), 'min', e.min(), 'n>=475', (e>=475).sum())" $OUT/$2.json; }
ours ${T1:-200} ours1
theirs ${T2:-200} theirs1
[ -n "$SECOND" ] && { ours 150 ours2; theirs 150 theirs2; }
true
# Second call (a fresh machine, same kind): the same two functions in the other order,
# `theirs 150 theirs2; ours 150 ours2` (files *2.*, info2.txt).
