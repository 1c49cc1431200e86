#!/usr/bin/env bash
# Usage: fingerprints.sh SRC_DIR OUT_FILE  -- short runs without a pbt: section, param_fingerprint
# each: the PBT branch must leave them bit-identical.
SRC=$1; OUT=$2; PY=${PYTHON:-/work/main/.venv/bin/python}
cd "$SRC"; : > "$OUT"
export XLA_FLAGS=--xla_cpu_enable_concurrency_optimized_scheduler=false
run() {  # name, then args to jaxrl_dist.train
  local name=$1; shift
  local d=$(mktemp -d)
  local fp=$(PYTHONPATH="$SRC" timeout 900 $PY -m jaxrl_dist.train "$@" --run-dir "$d/run" --no-progress 2>"$d/err" \
     | grep -o '"param_fingerprint": "[0-9a-f]*"' | tail -1)
  echo "$name $fp" | tee -a "$OUT"
  [ -z "$fp" ] && tail -3 "$d/err" | tee -a "$OUT"
  rm -rf "$d"
}
S="checkpoint_every=0 eval_episodes=2"
run ppo_gymnax configs/cartpole.yaml --set total_timesteps=8192 $S --cpu-devices 2
run ppo_gymnax_lr configs/cartpole.yaml --set total_timesteps=8192 ppo.learning_rate=1e-3 ppo.anneal_lr=false $S
run dqn_gymnax configs/cartpole_dqn.yaml --set total_timesteps=6000 $S --cpu-devices 2
run pqn_gymnax configs/cartpole_pqn.yaml --set total_timesteps=8192 $S --cpu-devices 2
run population configs/cartpole.yaml --set total_timesteps=8192 population.seeds=[0,1,2] $S --cpu-devices 2
run population_sweep configs/cartpole.yaml --set total_timesteps=8192 "population.sweep.ppo.learning_rate=[1e-4,1e-3]" $S --cpu-devices 2
run sac configs/pendulum_sac.yaml --set total_timesteps=2000 $S
