"""What DQN and PQN share: the Q-network, epsilon-greedy acting and its schedule, and the
config keys of both (:mod:`.config`, jax-free)."""
