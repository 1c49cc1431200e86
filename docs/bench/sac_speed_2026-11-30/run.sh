#!/bin/bash
# side by side, alternated: ours vs sbx vs sb3, SAC HalfCheetah-v5; $1 = n_envs, $2 = repeat tag
N=$1; R=$2
cd /work/main
OUTD=${OUTD:-docs/bench/sac_speed_2026-11-27}
PEER=/work/main/.bench/sbx/bin/python
if [ $N = 1 ]; then LS=1000; TOT=6000; UPC=1000; else LS=4000; TOT=36000; UPC=125; fi
ours() {
  D=/tmp/side_ours_${N}_$R; rm -rf $D
  timeout 1200 .venv/bin/python -m jaxrl_dist.train configs/mujoco_halfcheetah_sac.yaml --cpu-devices 1 --run-dir $D --no-progress \
    --set num_envs=$N total_timesteps=$TOT sac.learning_starts=$LS updates_per_call=$UPC eval_episodes=1 checkpoint_every=0 > $D.log 2>&1
  python3 - $D $N $LS <<'PY' >> $OUTD/ours.jsonl
import json,sys
d,n,ls=sys.argv[1],int(sys.argv[2]),int(sys.argv[3])
rows=[json.loads(l) for l in open(d+'/metrics.jsonl') if '"sps"' in l]
start=[r for r in rows if r['env_steps']>=ls+1000][0]; end=rows[-1]
steps=end['env_steps']-start['env_steps']; dt=end['time_s']-start['time_s']
print(json.dumps({"peer":"jaxrl_dist","n_envs":n,"env_steps_per_s":steps/dt,"gradient_updates_per_s":steps/n/dt,"timed_env_steps":steps}))
PY
  tail -1 $OUTD/ours.jsonl
}
peer() {
  timeout 1800 $PEER benches/peers/sbx/run_sac.py HalfCheetah-v5 $N $LS $TOT --lib $1 2>/dev/null | tail -1 | tee -a $OUTD/$1.jsonl
}
ours; peer sbx; [ "$3" = sb3 ] && peer sb3
true
