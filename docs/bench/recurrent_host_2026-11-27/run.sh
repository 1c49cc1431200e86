#!/usr/bin/env bash
# 8 seeds GRU + 4 seeds MLP of the host CartPole-without-velocities, one at a time.
cd "$(git rev-parse --show-toplevel)"   # measured at commit 848a81e
export JAXRL_DIST_PLUGINS=examples.cartpole_no_velocity
for arm in gru mlp; do
  seeds="0 1 2 3 4 5 6 7"; extra=""
  [ $arm = mlp ] && { seeds="0 1 2 3"; extra="ppo.network.cell=none ppo.network.shared=false"; }
  for s in $seeds; do
    d=runs/pomdp/$arm-$s
    [ -f $d/summary.json ] && continue
    rm -rf $d
    timeout 1500 python -m jaxrl_dist.train configs/gymnasium_cartpole_pomdp_gru.yaml \
      --set seed=$s $extra --run-dir $d --no-progress > runs/pomdp/$arm-$s.log 2>&1
    echo "$arm $s $(tail -1 runs/pomdp/$arm-$s.log)" >> runs/pomdp/results.txt
  done
done
