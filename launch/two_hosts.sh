#!/bin/bash
# Two hosts by hand (no scheduler): run the launcher on each host over ssh.
#   HOST0=10.0.0.1 HOST1=10.0.0.2 bash launch/two_hosts.sh configs/cartpole.yaml [args...]
# HOST0 runs the coordinator on PORT; both hosts need the repo at REPO_DIR (same versions: the
# workers compare config and package versions before training) and RUN_DIR on shared storage.
# PYTHON is the interpreter on the hosts (default: the README's venv, REPO_DIR/.venv).
set -euo pipefail

CONFIG=${1:?usage: HOST0=... HOST1=... bash launch/two_hosts.sh CONFIG [trainer args...]}
shift
: "${HOST0:?set HOST0 (coordinator host)}" "${HOST1:?set HOST1}"
PORT=${PORT:-5555}
NPROC=${NPROC:-1}                       # processes per host (one per GPU)
REPO_DIR=${REPO_DIR:-~/jaxrl_dist}
RUN_DIR=${RUN_DIR:-runs/two-hosts-$(date +%Y%m%d-%H%M%S)}
PYTHON=${PYTHON:-.venv/bin/python}

pids=()
for rank in 0 1; do
  host_var=HOST$rank
  ssh "${!host_var}" "cd $REPO_DIR && exec $PYTHON -m jaxrl_dist.launch \
      --nnodes 2 --node-rank $rank --nproc-per-node $NPROC --coordinator $HOST0:$PORT \
      $CONFIG --run-dir $RUN_DIR $*" &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=$?; done
exit $status
