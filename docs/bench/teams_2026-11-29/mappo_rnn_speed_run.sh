#!/bin/bash
# Recurrent MAPPO on MPE spread, 8 seeds as one program vs JaxMARL's mappo_rnn_mpe.py 8 seeds
# vmapped, 100k env steps each (48 updates of 16 envs x 128 steps), alternated pairs
cd /work/main
S="[0,1,2,3,4,5,6,7]"
for i in $(seq 1 ${PAIRS:-2}); do
  t0=$(date +%s.%N)
  XLA_FLAGS=--xla_cpu_enable_concurrency_optimized_scheduler=false timeout 1500 .venv/bin/python -m jaxrl_dist.train configs/mpe_spread_mappo_rnn.yaml --set total_timesteps=100000 "population.seeds=$S" compile_cache=null eval_episodes=16 --run-dir /tmp/mr/ours$i --no-progress 2>/tmp/mr/ours$i.err | grep '^{' | tail -1 > /tmp/mr/speed_ours_$i.json
  t1=$(date +%s.%N); echo "ours $i whole_s $(echo "$t1 - $t0" | bc) $(date +%H:%M)" >> /tmp/mr/pairs.txt
  t0=$(date +%s.%N)
  timeout 1500 .bench/jaxmarl/bin/python benches/peers/jaxmarl_mappo_runner.py --seeds 8 --seed 1 --steps 100000 --eval-episodes 16 > /tmp/mr/speed_jaxmarl_$i.json 2>/tmp/mr/jaxmarl$i.err
  t1=$(date +%s.%N); echo "jaxmarl $i whole_s $(echo "$t1 - $t0" | bc) $(date +%H:%M)" >> /tmp/mr/pairs.txt
done
echo done >> /tmp/mr/pairs.txt
