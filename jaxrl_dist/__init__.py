"""jaxrl_dist: data-parallel reinforcement learning (PPO, DQN, PQN, and algorithms that plug
in) on one global JAX mesh, from one CPU to many hosts.

Importing the package does not import jax, so ``python -m jaxrl_dist.train`` and
``python -m jaxrl_dist.launch`` can set XLA flags before jax starts.
"""

__version__ = "0.1.0"
