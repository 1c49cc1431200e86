#!/bin/bash
# SAC on HalfCheetah-v5 at 16 environments (SB3's default SAC: one gradient step per vector
# step), side by side: ours synchronous (1 CPU device), ours with overlap_actors (2 CPU
# devices: one learns, one acts the next vector step with the parameters one update old), sbx.
# $1 = repeat tag. Same warm-up and timing as ../sac_speed_2026-11-27/run.sh.
R=$1
cd /work/main
OUTD=${OUTD:-docs/bench/sac_speed_2026-11-28}
PEER=~/.cache/jaxrl_dist/peers/sbx-venv/bin/python
N=16; LS=4000; TOT=36000; UPC=125
ours() {   # tag devices [sets]
  local tag=$1 dev=$2; shift 2
  D=/tmp/side28_${tag}_$R; rm -rf $D
  timeout 1200 .venv/bin/python -m jaxrl_dist.train configs/mujoco_halfcheetah_sac.yaml --cpu-devices $dev --run-dir $D --no-progress \
    --set num_envs=$N total_timesteps=$TOT sac.learning_starts=$LS updates_per_call=$UPC eval_episodes=2 checkpoint_every=0 "$@" > $D.log 2>&1
  python3 - $D $N $LS $tag <<'PY' >> $OUTD/ours.jsonl
import json,sys
d,n,ls,tag=sys.argv[1],int(sys.argv[2]),int(sys.argv[3]),sys.argv[4]
rows=[json.loads(l) for l in open(d+'/metrics.jsonl') if '"sps"' in l and 'eval/return_mean' not in l]
start=[r for r in rows if r['env_steps']>=ls+1000][0]; end=rows[-1]
steps=end['env_steps']-start['env_steps']; dt=end['time_s']-start['time_s']
print(json.dumps({"peer":"jaxrl_dist","mode":tag,"n_envs":n,"env_steps_per_s":steps/dt,"gradient_updates_per_s":steps/n/dt,"timed_env_steps":steps}))
PY
  tail -1 $OUTD/ours.jsonl
}
peer() {
  timeout 1800 $PEER benches/peers/sbx/run_sac.py HalfCheetah-v5 $N $LS $TOT --lib sbx 2>/dev/null | tail -1 | tee -a $OUTD/sbx.jsonl
}
ours sync 1; ours overlap 2 overlap_actors=true; peer
