#!/bin/bash
# Prepared for the next GPU lease (not yet run): where does ours lose ~1.35x to Brax's own SAC
# on hopper (README.md here)? Ours without periodic evaluations (training speed alone, and the
# final evaluation's time from the summary), then Brax's with its own timings recorded
# (run_sac.py keeps eval/epoch_eval_time, training/sps). Same wheels as run.sh (.whl/b, carried).
# Usage on the device: bash docs/bench/brax_sac_h200_2026-11-28/next_lease.sh (about 6 minutes)
cd "$(dirname "$0")/../../.."
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/b/*.whl 2>&1 | grep -v "already exists"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:/tmp/site
STEPS=${STEPS:-524288}
NOCK="checkpoint_minutes=0 checkpoint_every=0 sac.checkpoint_buffer=false compile_cache=null"
t0=$(date +%s)
timeout 200 python3 -m jaxrl_dist.launch --nproc-per-node 1 configs/brax_hopper_sac.yaml --run-dir /tmp/ours2 \
  --no-progress --set total_timesteps=$STEPS eval_every=0 $NOCK > $OUT/ours2.log 2>&1
echo "ours rc $? wall $(( $(date +%s) - t0 ))"; tail -2 $OUT/ours2.log | cut -c1-1500
cp /tmp/ours2/summary.json $OUT/ours2_summary.json 2>/dev/null
t0=$(date +%s)
timeout 200 python3 benches/peers/brax/run_sac.py --env hopper --num-timesteps $STEPS --num-evals 3 \
  --deterministic-eval --out $OUT/brax2.json 2>&1 | grep -v -E "Warning|warnings.warn" > $OUT/brax2.log
echo "brax rc ${PIPESTATUS[0]} wall $(( $(date +%s) - t0 ))"; tail -4 $OUT/brax2.log | cut -c1-1500
