#!/bin/bash
# usage: speed2.sh CONFIG TAG MODE [--set ...]: MODE p1d2 | p2 ; prints sps
CFG=$1; TAG=$2; MODE=$3; shift 3
cd /work/main
PY=/work/main/.venv/bin/python
OUT=/work/fp/mp/$TAG; rm -rf $OUT
export JAXRL_DIST_CACHE=/tmp/mpcache_$TAG
if [ $MODE = p1d2 ]; then
  timeout 900 $PY -m jaxrl_dist.train $CFG --cpu-devices ${DEVS:-2} --run-dir $OUT --no-progress "$@" > $OUT.log 2>&1
else
  timeout 900 $PY -m jaxrl_dist.launch --nproc-per-node 2 --cpu-devices-per-proc 1 $LAUNCH_EXTRA $CFG --run-dir $OUT "$@" > $OUT.log 2>&1
fi
python3 - $OUT <<'PY'
import json,sys
try:
    s=json.load(open(sys.argv[1]+'/summary.json'))
    print(sys.argv[1].split('/')[-1], 'sps', round(s['sps']), 'replicate', s.get('replicate_learn'), 'fp', s['param_fingerprint'][:16], 'eval', s.get('eval_return'), 'loop', round(s.get('loop_time_s', 0) or 0,1))
except Exception as e: print(sys.argv[1], 'FAILED', e)
PY
