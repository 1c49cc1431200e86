#!/usr/bin/env bash
# Usage: fingerprints.sh SRC_DIR OUT_FILE  -- short runs of every family, param_fingerprint each.
SRC=$1; OUT=$2; PY=${PYTHON:-.venv/bin/python}   # SRC: a checkout of the commit to fingerprint
cd "$SRC"; : > "$OUT"
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
run dqn_gymnax configs/cartpole_dqn.yaml --set total_timesteps=6000 $S --cpu-devices 2
run pqn_gymnax configs/cartpole_pqn.yaml --set total_timesteps=8192 $S --cpu-devices 2
run ppo_pool_ale configs/breakout_ppo.yaml --set total_timesteps=2048 num_envs=4 ppo.num_steps=64 updates_per_call=2 eval_every=0 $S
run ppo_host configs/gymnasium_cartpole.yaml --set total_timesteps=4096 updates_per_call=2 $S
run ppo_host_2dev configs/gymnasium_cartpole.yaml --set total_timesteps=4096 updates_per_call=2 $S --cpu-devices 2
run ppo_host_overlap configs/gymnasium_cartpole.yaml --set total_timesteps=4096 updates_per_call=2 overlap_actors=true $S --cpu-devices 2
run dqn_host configs/cartpole_dqn.yaml --set env=gymnasium:CartPole-v1 total_timesteps=6000 $S
run pqn_host configs/cartpole_pqn.yaml --set env=gymnasium:CartPole-v1 total_timesteps=8192 $S
run ppo_host_mujoco configs/mujoco_inverted_pendulum.yaml --set total_timesteps=4096 updates_per_call=2 $S
run gru_shared configs/cartpole_pomdp_gru.yaml --set total_timesteps=8192 $S --cpu-devices 2
run gru_separate configs/cartpole_pomdp_gru.yaml --set total_timesteps=8192 ppo.network.shared=false $S --cpu-devices 2
run lstm configs/cartpole_pomdp_gru.yaml --set total_timesteps=8192 ppo.network.cell=lstm $S
run population configs/cartpole.yaml --set total_timesteps=8192 population.seeds=[0,1,2] $S --cpu-devices 2
