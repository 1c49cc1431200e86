#!/bin/bash
# TPU pod slice: the same command on every TPU VM host; jax.distributed.initialize() discovers
# the pod itself (--auto), one process per host driving all of that host's TPU chips.
#   TPU_NAME=my-v5p-64 ZONE=us-east5-a bash launch/tpu_pod.sh configs/cartpole.yaml [args...]
# The repository must be checked out at the same path on every host, with
#   pip install -c constraints.txt -e '.[tpu]'
# and RUN_DIR on storage every host sees (an NFS/Filestore or gcsfuse mount). PYTHON is the
# interpreter on the hosts (default: the README's venv, REPO_DIR/.venv).
set -euo pipefail

CONFIG=${1:?usage: TPU_NAME=... ZONE=... bash launch/tpu_pod.sh CONFIG [trainer args...]}
shift
: "${TPU_NAME:?set TPU_NAME}" "${ZONE:?set ZONE}"
REPO_DIR=${REPO_DIR:-\~/jaxrl_dist}
RUN_DIR=${RUN_DIR:-/mnt/shared/runs/$TPU_NAME-$(date +%Y%m%d-%H%M%S)}
PYTHON=${PYTHON:-.venv/bin/python}

gcloud compute tpus tpu-vm ssh "$TPU_NAME" --zone "$ZONE" --worker=all --command \
  "cd $REPO_DIR && $PYTHON -m jaxrl_dist.launch --auto $CONFIG --run-dir $RUN_DIR $*"
