"""PPO: config section (config.py, jax-free), networks, losses, optimizer, the per-member update
(update.py, the only home of its collectives) and the programs behind the Learner interface
(learner.py)."""
