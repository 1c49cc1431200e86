#!/usr/bin/env bash
# The house check for a change under a learner, the rollout or the environments: short runs of
# every family (PPO/DQN/PQN inside the program, ALE pools, host, overlapped, recurrent, a
# population, SAC/TD3/CrossQ inside the program and on a host environment), one line
# "name param_fingerprint" each. Bits differ between CPU kinds: run it on the commit before and
# the commit after on the same machine (`git worktree add /tmp/before BASE`), then diff the files.
# Usage: benches/fingerprints.sh SRC_DIR OUT_FILE [NAME...]   (NAMEs: only those families)
# ~10 min on 2 cores; PYTHON defaults to .venv/bin/python of this checkout.
set -u
HERE=$(cd "$(dirname "$0")/.." && pwd)
[ $# -ge 2 ] || { echo "usage: $0 SRC_DIR OUT_FILE [NAME...]" >&2; exit 2; }
SRC=$(cd "$1" && pwd) || { echo "fingerprints.sh: no directory $1" >&2; exit 2; }
OUT=$(realpath -m "$2"); shift 2
PY=${PYTHON:-$HERE/.venv/bin/python}
ONLY=" $* "
cd "$SRC"; : > "$OUT"
export XLA_FLAGS=--xla_cpu_enable_concurrency_optimized_scheduler=false JAX_PLATFORMS=cpu
run() {  # name, then args to jaxrl_dist.train
  local name=$1; shift
  [ "$ONLY" != "  " ] && [[ "$ONLY" != *" $name "* ]] && return 0
  local d; d=$(mktemp -d)
  local fp; fp=$(PYTHONPATH="$SRC" timeout 900 "$PY" -m jaxrl_dist.train "$@" --run-dir "$d/run" \
     --no-progress 2>"$d/err" | grep -o '"param_fingerprint": "[0-9a-f]*"' | tail -1)
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
run population configs/cartpole.yaml --set total_timesteps=8192 'population.seeds=[0,1,2]' $S --cpu-devices 2
O="total_timesteps=3000 updates_per_call=500 $S"
run sac_gymnax configs/pendulum_sac.yaml --set num_envs=2 sac.buffer_shards=2 $O --cpu-devices 2
run td3_gymnax configs/mujoco_halfcheetah_td3.yaml --set env=Pendulum-v1 td3.learning_starts=1000 \
  'td3.network.actor_hidden=[64,64]' 'td3.network.critic_hidden=[64,64]' td3.buffer_size=3000 num_envs=2 td3.buffer_shards=2 $O --cpu-devices 2
run crossq_gymnax configs/pendulum_crossq.yaml --set $O
run sac_host configs/mujoco_halfcheetah_sac.yaml --set total_timesteps=1500 updates_per_call=250 \
  sac.learning_starts=1000 'sac.network.actor_hidden=[64,64]' 'sac.network.critic_hidden=[64,64]' sac.buffer_size=1500 $S
