#!/bin/bash
cd /work/main
S=$(python3 -c "print(list(range(16)))" | tr -d ' ')
for i in 1 2; do
  t0=$(date +%s.%N)
  .venv/bin/python -m jaxrl_dist.train configs/mpe_spread_ippo.yaml --set total_timesteps=500000 "population.seeds=$S" compile_cache=null eval_episodes=16 --run-dir /tmp/sp16/ours$i --no-progress 2>/tmp/sp16/ours$i.err | grep '^{' | tail -1 > /tmp/sp16/speed16_ours_$i.json
  t1=$(date +%s.%N); echo "ours $i whole_s $(echo "$t1 - $t0" | bc)" >> /tmp/sp16/pairs.txt
  t0=$(date +%s.%N)
  .bench/jaxmarl/bin/python benches/peers/jaxmarl_runner.py --seeds 16 --steps 500000 > /tmp/sp16/speed16_jaxmarl_$i.json 2>/tmp/sp16/jaxmarl$i.err
  t1=$(date +%s.%N); echo "jaxmarl $i whole_s $(echo "$t1 - $t0" | bc)" >> /tmp/sp16/pairs.txt
done
echo done >> /tmp/sp16/pairs.txt
