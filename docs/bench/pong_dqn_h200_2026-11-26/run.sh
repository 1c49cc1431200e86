#!/bin/bash
# GPU lease script (2026-11-26, 11th session): Pong DQN through the launcher on one GPU, ale-py's
# CUDA FFI path; DI-engine's network speed; CleanRL dqn_atari_jax speed. Sequential, one at a time.
cd "$(dirname "$0")/.."
I="python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target"
$I /tmp/common .whl/ours/gymnasium*.whl .whl/ours/farama*.whl .whl/ours/tensorboardx*.whl .whl/ours/ale_py*.whl
$I /tmp/ours .whl/ours/gymnax*.whl
$I /tmp/cleanrl .whl/cleanrl/*.whl
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:/tmp/ours:/tmp/common
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; lscpu | grep -E "Model name|^CPU\(s\)";
  python3 -c "import jax, flax, optax, ale_py, gymnasium; print('jax', jax.__version__, jax.devices(), 'flax', flax.__version__, 'optax', optax.__version__, 'ale_py', ale_py.__version__, 'gymnasium', gymnasium.__version__)"; } > $OUT/info.txt 2>&1
cat $OUT/info.txt
NOCK="checkpoint_minutes=0 checkpoint_every=0 dqn.checkpoint_buffer=false compile_cache=null"
stamp() { while IFS= read -r l; do printf '%s %s\n' "$(date +%s.%N | cut -c1-14)" "$l"; done; }
# B: DI-engine's 14.3M network, 200 updates (38,400 env steps, 2,000 gradient steps of 64), speed only
t0=$(date +%s)
timeout 150 python3 -m jaxrl_dist.launch --nproc-per-node 1 configs/pong_dqn.yaml --run-dir /tmp/B --no-progress \
  --set 'dqn.network.cnn_channels=[128, 128, 512]' dqn.buffer_size=20160 dqn.learning_starts=960 total_timesteps=38400 updates_per_call=5 eval_every=0 $NOCK > $OUT/B.log 2>&1
rc=$?; echo "B rc $rc wall $(( $(date +%s) - t0 ))" | tee -a $OUT/B.log; tail -3 $OUT/B.log | cut -c1-2500
cp /tmp/B/metrics.jsonl $OUT/B_metrics.jsonl 2>/dev/null
if [ $rc -ne 0 ]; then tail -60 /tmp/B/logs/*0* 2>/dev/null | cut -c1-400; exit 1; fi
# A: the shipped Pong DQN config to 1.5M env steps (no checkpoints), through the launcher
t0=$(date +%s)
timeout ${A_TIMEOUT:-390} python3 -m jaxrl_dist.launch --nproc-per-node 1 configs/pong_dqn.yaml --run-dir /tmp/A --no-progress --set $NOCK > $OUT/A.log 2>&1
echo "A rc $? wall $(( $(date +%s) - t0 ))" | tee -a $OUT/A.log; tail -3 $OUT/A.log | cut -c1-2500
cp /tmp/A/metrics.jsonl $OUT/A_metrics.jsonl; cp /tmp/A/summary.json $OUT/A_summary.json 2>/dev/null
python3 - <<'PY'
import json
rows=[json.loads(l) for l in open('/tmp/A/metrics.jsonl')]
for r in rows[::max(1,len(rows)//25)]+rows[-1:]:
    print(r.get('env_steps'), round(r.get('time_s',0),1), r.get('episode_return'), r.get('eval_return', ''))
PY
grep -h '"eval' /tmp/A/metrics.jsonl | head -0
# C: CleanRL dqn_atari_jax (1 env, train every 4 steps, batch 32), learning from 10k steps, speed only
t0=$(date +%s)
cd /tmp && timeout ${C_TIMEOUT:-75} env PYTHONPATH=/tmp/cleanrl:/tmp/common python3 $OLDPWD/benches/peers/cleanrl/run_dqn_atari_jax.py $OLDPWD/.gpu/cleanrl \
  --env-id PongNoFrameskip-v4 --learning-starts 10000 --buffer-size 100000 --seed 1 2>&1 | grep -v -E "leaked|nanobind" | stamp > $OUT/C.log
echo "C wall $(( $(date +%s) - t0 ))" | tee -a $OUT/C.log; grep SPS $OUT/C.log | tail -3; grep -c SPS $OUT/C.log
# Second call, same warm machine (seed1.*):
#   python3 -m jaxrl_dist.launch --nproc-per-node 1 configs/pong_dqn.yaml --run-dir /tmp/A1 --no-progress \
#     --set seed=1 eval_every=800 checkpoint_minutes=0 checkpoint_every=0 dqn.checkpoint_buffer=false compile_cache=null
# .gpu/cleanrl held dqn_atari_jax.py and cleanrl_utils/ from vwxyzjn/cleanrl fe8d8a03 (benches/peers/cleanrl/README.md).
