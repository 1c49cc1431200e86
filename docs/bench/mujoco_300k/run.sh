#!/bin/bash
# Issue 52's MuJoCo measurements (300k steps; then HalfCheetah SAC at 1M), in the order wanted, each a `bench host`
# that spans sittings: run this script again and every finished seed is read back from its run
# directory, every other resumes from its checkpoints (SIGTERM this script's bench to stop: the
# runs checkpoint). Two seeds at a time, each pinned to one core (a 2-core machine).
# Results: docs/bench/mujoco_300k/<name>/host.md; run directories: $WORK/<name>/.
#   bash docs/bench/mujoco_300k/run.sh            # all, in order
#   bash docs/bench/mujoco_300k/run.sh td3_halfcheetah   # one
set -eu
cd "$(dirname "$0")/../../.."
WORK=${WORK:-runs/bench_host}
COMMON=(--seeds 0 1 2 --parallel 2 --pin --timeout 86400
        --set total_timesteps=300000 --set eval_every=25000 --set checkpoint_minutes=10)
bench() {   # name config [--set ...]
  local name=$1 config=$2; shift 2
  [ -n "${ONLY:-}" ] && [ "$ONLY" != "$name" ] && return 0
  "${PYTHON:-python}" -m benches host --config "$config" "${COMMON[@]}" "$@" \
    --out "docs/bench/mujoco_300k/$name" --work "$WORK/$name"
}
ONLY=${1:-}
bench halfcheetah_sac configs/mujoco_halfcheetah_sac.yaml
bench halfcheetah_td3 configs/mujoco_halfcheetah_td3.yaml
# CrossQ's 2048-wide critics are ~26 GFLOP per step (weeks on 2 cores): 256x256 critics here,
# twice SAC's step (the joint s/s' batch of 512), everything else the paper's.
bench halfcheetah_crossq_256 configs/mujoco_halfcheetah_crossq.yaml \
  --set 'crossq.network.critic_hidden=[256,256]'
bench hopper_sac configs/mujoco_halfcheetah_sac.yaml --set env=gymnasium:Hopper-v5
bench walker2d_sac configs/mujoco_halfcheetah_sac.yaml --set env=gymnasium:Walker2d-v5
# The 1M-step HalfCheetah SAC (CleanRL's 9,635 at 1M): days on 2 cores, so last.
bench halfcheetah_sac_1m configs/mujoco_halfcheetah_sac.yaml --set total_timesteps=1000000
