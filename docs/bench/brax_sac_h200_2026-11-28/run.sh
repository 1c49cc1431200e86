#!/bin/bash
# GPU lease script (2026-11-28, 21st session; one call, ~10 minutes): Brax hopper SAC with Brax's
# notebook settings, ours (configs/brax_hopper_sac.yaml through the launcher, one GPU) then Brax's
# own (benches/peers/brax/run_sac.py), each to 1,048,576 env steps (of the notebook's 6,553,600)
# under a time limit; then host MuJoCo SAC's speed on the GPU (HalfCheetah-v5, 1 env).
# Wheels carried in .whl/b (py3.12): brax 0.14.2, mujoco 4.0.0, mujoco-mjx 3.17.0, gymnasium
# 1.3.0, gymnax 1.0.1, tensorboardX 2.6.5 and their missing needs.
cd "$(dirname "$0")/../../.."
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/b/*.whl || exit 1
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:/tmp/site
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; lscpu | grep -E "Model name|^CPU\(s\)";
  python3 -c "import jax, flax, optax, brax, mujoco; print('jax', jax.__version__, jax.devices(), 'flax', flax.__version__, 'optax', optax.__version__, 'brax', brax.__version__, 'mujoco', mujoco.__version__)"; } > $OUT/info.txt 2>&1
cat $OUT/info.txt
STEPS=${STEPS:-1048576}
NOCK="checkpoint_minutes=0 checkpoint_every=0 sac.checkpoint_buffer=false compile_cache=null"
t0=$(date +%s)
timeout ${OURS_TIMEOUT:-230} python3 -m jaxrl_dist.launch --nproc-per-node 1 configs/brax_hopper_sac.yaml --run-dir /tmp/ours \
  --no-progress --set total_timesteps=$STEPS eval_every=1024 $NOCK > $OUT/ours.log 2>&1
echo "ours rc $? wall $(( $(date +%s) - t0 ))" | tee -a $OUT/ours.log; tail -4 $OUT/ours.log | cut -c1-1500
cp /tmp/ours/metrics.jsonl $OUT/ours_metrics.jsonl; cp /tmp/ours/summary.json $OUT/ours_summary.json 2>/dev/null
grep -h eval_return /tmp/ours/metrics.jsonl | cut -c1-400 | tail -10
t0=$(date +%s)
timeout ${BRAX_TIMEOUT:-230} python3 benches/peers/brax/run_sac.py --env hopper --num-timesteps $STEPS --num-evals 9 \
  --deterministic-eval --out $OUT/brax.json 2>&1 | grep -v -E "Warning|warnings.warn" > $OUT/brax.log
echo "brax rc ${PIPESTATUS[0]} wall $(( $(date +%s) - t0 ))" | tee -a $OUT/brax.log; tail -12 $OUT/brax.log | cut -c1-600
t0=$(date +%s)
timeout ${HOST_TIMEOUT:-75} python3 -m jaxrl_dist.launch --nproc-per-node 1 configs/mujoco_halfcheetah_sac.yaml --run-dir /tmp/host \
  --no-progress --set total_timesteps=20000 eval_every=0 eval_episodes=1 $NOCK > $OUT/host.log 2>&1
echo "host rc $? wall $(( $(date +%s) - t0 ))" | tee -a $OUT/host.log; tail -3 $OUT/host.log | cut -c1-1500
cp /tmp/host/metrics.jsonl $OUT/host_metrics.jsonl 2>/dev/null
