"""The replay every off-policy learner shares (DQN, SAC, TD3): the buffer in config-fixed
shards and its sampling (:mod:`.buffer`), and the checks of its config keys (:mod:`.config`,
jax-free: the CLI checks a config before jax is imported)."""
