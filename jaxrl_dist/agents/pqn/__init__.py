"""PQN: parallelised Q-learning with Q(lambda) targets, no replay and no target network."""
