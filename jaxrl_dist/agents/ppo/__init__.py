"""PPO: its config section and registry record (config.py, jax-free), networks, losses,
optimizer, ``learn`` (update.py, the only home of its collectives) and the Agent that
:mod:`jaxrl_dist.programs` composes (learner.py)."""
