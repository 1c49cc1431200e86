#!/bin/bash
# usage: speed.sh CONFIG TAG MODE [--set ...]: MODE p1d2 (1 process x 2 CPU devices) | p2 (2
# processes x 1 through the launcher); prints the summary's env steps/s and what ran.
CFG=$1; TAG=$2; MODE=$3; shift 3
cd "$(dirname "$0")/../../.."
PY=${PYTHON:-.venv/bin/python}
OUT=${WORK:-/tmp/replicate_act}/$TAG; rm -rf $OUT; mkdir -p $(dirname $OUT)
export JAXRL_DIST_CACHE=/tmp/racache_$TAG
if [ $MODE = p1d2 ]; then
  timeout 900 $PY -m jaxrl_dist.train $CFG --cpu-devices ${DEVS:-2} --run-dir $OUT --no-progress "$@" > $OUT.log 2>&1
else
  timeout 900 $PY -m jaxrl_dist.launch --nproc-per-node 2 --cpu-devices-per-proc 1 $LAUNCH_EXTRA $CFG --run-dir $OUT --no-progress "$@" > $OUT.log 2>&1
fi
$PY - $OUT <<'PY'
import json,sys
try:
    s=json.load(open(sys.argv[1]+'/summary.json'))
    print(sys.argv[1].split('/')[-1], 'sps', round(s['sps']), 'replicate_learn', s.get('replicate_learn'), 'replicate_act', s.get('replicate_act'), 'fp', s['param_fingerprint'][:16], 'eval', s.get('eval_return'), 'steps', s['env_steps'])
except Exception as e: print(sys.argv[1], 'FAILED', e)
PY
