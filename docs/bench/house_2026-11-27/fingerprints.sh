#!/usr/bin/env bash
# Usage: fingerprints.sh SRC_DIR OUT_FILE  -- the 14 families fingerprinted on 2026-11-27
# (fingerprints_*.txt here); the runs themselves now live in benches/fingerprints.sh.
exec "$(dirname "$0")/../../../benches/fingerprints.sh" "$1" "$2" ppo_gymnax dqn_gymnax pqn_gymnax \
  ppo_pool_ale ppo_host ppo_host_2dev ppo_host_overlap dqn_host pqn_host ppo_host_mujoco \
  gru_shared gru_separate lstm population
