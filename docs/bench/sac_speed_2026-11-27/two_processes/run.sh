#!/bin/bash
# SAC HalfCheetah-v5, 2 envs, UTD 1 per env step: 1 process x 2 devices vs 2 processes (+ split)
cd /work/main
PY=/work/main/.venv/bin/python
SETS="total_timesteps=8000 num_envs=2 sac.buffer_shards=2 sac.utd=2 sac.learning_starts=2000 updates_per_call=500 eval_episodes=2"
export JAXRL_DIST_CACHE=/tmp/mpcache_sac
run() { # tag mode extra
  OUT=/work/fp/mp/sac_$1; rm -rf $OUT
  if [ $2 = p1d2 ]; then timeout 900 $PY -m jaxrl_dist.train configs/mujoco_halfcheetah_sac.yaml --cpu-devices 2 --run-dir $OUT --no-progress --set $SETS $3 > $OUT.log 2>&1
  else timeout 900 $PY -m jaxrl_dist.launch --nproc-per-node 2 --cpu-devices-per-proc 1 configs/mujoco_halfcheetah_sac.yaml --run-dir $OUT --set $SETS $3 > $OUT.log 2>&1; fi
  python3 - $OUT <<'PY'
import json,sys
rows=[json.loads(l) for l in open(sys.argv[1]+'/metrics.jsonl') if '"sps"' in l]
s=json.load(open(sys.argv[1]+'/summary.json'))
print(sys.argv[1].split('/')[-1], 'row sps', [round(r['sps']) for r in rows], 'replicate', s.get('replicate_learn'), 'fp', s['param_fingerprint'][:12])
PY
}
run "$@"
