#!/bin/bash
# Issue 52's MuJoCo measurements (300k steps; then HalfCheetah SAC at 1M), each a `bench host`
# that spans sittings: run this script again and every finished seed is read back from its run
# directory, every other resumes from its checkpoints (SIGTERM every `benches host` to stop: the runs
# checkpoint). Two lanes side by side, each pinned to one core of a 2-core machine with one
# XLA:CPU thread, each running its benches in order, one seed at a time (no core idles while
# a bench's last seed runs, as two seeds of one bench at a time left it).
# Results: docs/bench/mujoco_300k/<name>/host.md; run directories: $WORK/<name>/.
#   bash docs/bench/mujoco_300k/run.sh                  # both lanes
#   bash docs/bench/mujoco_300k/run.sh halfcheetah_td3  # one bench, on core 0
set -eu
cd "$(dirname "$0")/../../.."
WORK=${WORK:-runs/bench_host}
COMMON=(--seeds 0 1 2 --parallel 1 --pin --timeout 86400
        --set total_timesteps=300000 --set eval_every=25000 --set checkpoint_minutes=10)
bench() {   # core name config [--set ...]
  local core=$1 name=$2 config=$3; shift 3
  [ -n "${ONLY:-}" ] && [ "$ONLY" != "$name" ] && return 0
  [ -n "${ONLY:-}" ] && core=0
  "${PYTHON:-python}" -m benches host --config "$config" "${COMMON[@]}" --cores "$core" "$@" \
    --out "docs/bench/mujoco_300k/$name" --work "$WORK/$name"
}
ONLY=${1:-}
lane0() {
  bench 0 halfcheetah_sac configs/mujoco_halfcheetah_sac.yaml
  bench 0 hopper_sac configs/mujoco_halfcheetah_sac.yaml --set env=gymnasium:Hopper-v5
  bench 0 walker2d_sac configs/mujoco_halfcheetah_sac.yaml --set env=gymnasium:Walker2d-v5
  # The 1M-step HalfCheetah SAC (CleanRL's 9,635 at 1M): days on 1 core, so last.
  bench 0 halfcheetah_sac_1m configs/mujoco_halfcheetah_sac.yaml --set total_timesteps=1000000
}
lane1() {
  bench 1 halfcheetah_td3 configs/mujoco_halfcheetah_td3.yaml
  # CrossQ's 2048-wide critics are ~26 GFLOP per step (weeks on 2 cores): 256x256 critics
  # here, twice SAC's step (the joint s/s' batch of 512), everything else the paper's.
  bench 1 halfcheetah_crossq_256 configs/mujoco_halfcheetah_crossq.yaml \
    --set 'crossq.network.critic_hidden=[256,256]'
}
if [ -n "$ONLY" ]; then lane0; lane1; exit 0; fi
trap 'pkill -TERM -f "m benches host"; wait' TERM INT
lane0 & lane1 & wait
