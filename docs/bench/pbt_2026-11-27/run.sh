#!/usr/bin/env bash
# Usage: run.sh OUT_DIR -- configs/cartpole_pbt.yaml on seeds 0, 1, 2, with PBT and without
# (pbt.enabled=false: the same 8 members side by side), 1 process x 2 CPU devices; then the
# cost of a round alone. Run from the repository root.
OUT=${1:-docs/bench/pbt_2026-11-27}; PY=${PYTHON:-/work/main/.venv/bin/python}
export XLA_FLAGS=--xla_cpu_enable_concurrency_optimized_scheduler=false
mkdir -p "$OUT/raw"
for seed in 0 1 2; do
  for arm in pbt nopbt; do
    d=$(mktemp -d); enabled=$([ $arm = pbt ] && echo true || echo false)
    /usr/bin/time -v timeout 1800 $PY -m jaxrl_dist.train configs/cartpole_pbt.yaml \
      --set seed=$seed --set pbt.enabled=$enabled --set checkpoint_minutes=0 \
      --cpu-devices 2 --run-dir "$d/run" --no-progress > "$d/out" 2> "$d/err"
    echo "$arm seed $seed rc=$? $(grep -o 'Elapsed (wall clock) time.*' $d/err)"
    mkdir -p "$OUT/raw/${arm}_seed$seed"
    cp "$d/run/summary.json" "$OUT/raw/${arm}_seed$seed/"
    gzip -c "$d/run/metrics.jsonl" > "$OUT/raw/${arm}_seed$seed/metrics.jsonl.gz"
    rm -rf "$d"
  done
done
PYTHONPATH=. $PY docs/bench/pbt_2026-11-27/round_cost.py > "$OUT/round_cost.json"
PYTHONPATH=. $PY docs/bench/pbt_2026-11-27/report.py "$OUT" > "$OUT/README.md"
