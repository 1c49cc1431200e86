#!/bin/bash
# Issue 52's MuJoCo measurements (300k steps; then HalfCheetah SAC at 1M), each a `bench host`
# that spans sittings: one job per (bench, seed), in the order below, taken by two workers,
# each pinned to one core of a 2-core machine with one XLA:CPU thread, so no core idles while
# another bench has seeds left. Run this script again and every finished seed is read back
# (from its run directory, or from docs/bench/mujoco_300k/<name>/host_seeds.jsonl when the run
# directories are gone: a fresh machine), every other resumes from its checkpoint; SIGTERM this
# script (or every `benches host`) to stop: the runs checkpoint.
# Results: docs/bench/mujoco_300k/<name>/host.md; run directories: $WORK/<name>/.
#   bash docs/bench/mujoco_300k/run.sh                  # every job, two workers
#   bash docs/bench/mujoco_300k/run.sh halfcheetah_td3  # one bench's seeds, one worker (core 0)
set -eu
cd "$(dirname "$0")/../../.."
WORK=${WORK:-runs/bench_host}
COMMON=(--seeds 0 1 2 --parallel 1 --pin --timeout 86400
        --set total_timesteps=300000 --set eval_every=25000 --set checkpoint_minutes=10)
HC=configs/mujoco_halfcheetah_sac.yaml
# name | config | extra overrides (after the common ones)
BENCHES=(
  "halfcheetah_sac|$HC|"
  "hopper_sac|$HC|--set env=gymnasium:Hopper-v5"
  # CrossQ's 2048-wide critics are ~26 GFLOP per step (weeks on 2 cores): 256x256 critics
  # here, twice SAC's step (the joint s/s' batch of 512), everything else the paper's.
  "halfcheetah_crossq_256|configs/mujoco_halfcheetah_crossq.yaml|--set crossq.network.critic_hidden=[256,256]"
  "halfcheetah_td3|configs/mujoco_halfcheetah_td3.yaml|"
  "walker2d_sac|$HC|--set env=gymnasium:Walker2d-v5"
  # The 1M-step HalfCheetah SAC (CleanRL's 9,635 at 1M): hours per seed, so last.
  "halfcheetah_sac_1m|$HC|--set total_timesteps=1000000"
)
ONLY=${1:-}
job() {   # core name seed: train one seed of one bench (the table covers all three)
  local core=$1 name=$2 seed=$3 spec config extra
  for spec in "${BENCHES[@]}"; do
    [ "${spec%%|*}" = "$name" ] || continue
    config=$(echo "$spec" | cut -d'|' -f2)
    read -ra extra <<< "$(echo "$spec" | cut -d'|' -f3)"   # zero or more --set words
    "${PYTHON:-python}" -m benches host --config "$config" "${COMMON[@]}" "${extra[@]}" \
      --train "$seed" --cores "$core" \
      --out "docs/bench/mujoco_300k/$name" --work "$WORK/$name"
    return $?
  done
  echo "run.sh: no bench named $name" >&2; return 2
}
JOBS=()
for spec in "${BENCHES[@]}"; do
  name=${spec%%|*}
  [ -n "$ONLY" ] && [ "$ONLY" != "$name" ] && continue
  for seed in 0 1 2; do JOBS+=("$name $seed"); done
done
# hopper_sac's and the CrossQ's seeds interleaved so both finish early in one sitting
[ -z "$ONLY" ] && JOBS=("hopper_sac 0" "halfcheetah_crossq_256 0" "halfcheetah_crossq_256 1"
  "halfcheetah_crossq_256 2" "hopper_sac 1" "hopper_sac 2" "${JOBS[@]}")
CLAIMS=$(mktemp -d)
worker() {   # core: take the next unclaimed job until none is left or one is stopped
  local core=$1 j rc
  for j in "${JOBS[@]}"; do
    mkdir "$CLAIMS/${j// /_}" 2>/dev/null || continue
    rc=0; job "$core" $j || rc=$?
    if [ $rc = 75 ]; then return 0; fi   # stopped (SIGTERM: the run checkpointed); a
  done                                   # failed seed (rc 1, in its table) goes on
}
if [ -n "$ONLY" ]; then worker 0; exit 0; fi
trap 'pkill -TERM -f "m benches host --config .* --out docs/bench/mujoco_300k/"; wait' TERM INT
worker 0 & worker 1 & wait
rm -rf "$CLAIMS"
