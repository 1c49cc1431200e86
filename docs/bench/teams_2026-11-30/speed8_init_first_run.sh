#!/bin/bash
# IPPO on MPE spread, 8 seeds as one program vs JaxMARL ippo_ff_mpe 8 seeds vmapped, 500k env steps each, 3 alternated pairs
cd /work/main
S="[0,1,2,3,4,5,6,7]"
for i in 1 2 3; do
  t0=$(date +%s.%N)
  XLA_FLAGS=--xla_cpu_enable_concurrency_optimized_scheduler=false .venv/bin/python -m jaxrl_dist.train configs/mpe_spread_ippo.yaml --set total_timesteps=500000 "population.seeds=$S" compile_cache=null eval_episodes=16 --run-dir /tmp/sp10/ours$i --no-progress 2>/tmp/sp10/ours$i.err | grep '^{' | tail -1 > /tmp/sp10/speed_ours_$i.json
  t1=$(date +%s.%N); echo "ours $i whole_s $(echo "$t1 - $t0" | bc) $(date +%H:%M:%S)" >> /tmp/sp10/pairs.txt
  t0=$(date +%s.%N)
  .bench/jaxmarl/bin/python benches/peers/jaxmarl_runner.py --seeds 8 --steps 500000 > /tmp/sp10/speed_jaxmarl_$i.json 2>/tmp/sp10/jaxmarl$i.err
  t1=$(date +%s.%N); echo "jaxmarl $i whole_s $(echo "$t1 - $t0" | bc) $(date +%H:%M:%S)" >> /tmp/sp10/pairs.txt
done
echo done >> /tmp/sp10/pairs.txt
