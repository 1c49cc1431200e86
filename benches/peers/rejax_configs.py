"""rejax 0.1.3's own published CartPole configs for DQN and PQN (``configs/gymnax/cartpole.yaml``
of github.com/keraJLi/rejax, its ``dqn:`` and ``pqn:`` entries), as ``Algo.create`` keywords.
Shared by ``rejax_q_runner.py`` (learning) and ``bench rejax`` (speed); plain data, no imports."""

REJAX_CARTPOLE_DQN = {
    "env": "CartPole-v1",
    "agent": "DuelingQNetwork",
    "agent_kwargs": {"activation": "swish"},
    "num_envs": 10,
    "buffer_size": 50_000,
    "fill_buffer": 5_000,
    "batch_size": 100,
    "max_grad_norm": 10,
    "learning_rate": 0.001,
    "num_epochs": 5,
    "total_timesteps": 100_000,
    "eval_freq": 2_500,
    "polyak": 0.98,
    "eps_start": 1,
    "eps_end": 0.05,
    "exploration_fraction": 0.5,
    "gamma": 0.99,
    "ddqn": True,
    "normalize_observations": False,
}

# same file, ``pqn:`` entry, verbatim
REJAX_CARTPOLE_PQN = {
    "env": "CartPole-v1",
    "num_envs": 16,
    "num_steps": 128,
    "num_minibatches": 16,
    "max_grad_norm": 10,
    "learning_rate": 0.0003,
    "num_epochs": 5,
    "total_timesteps": 524288,
    "eval_freq": 16384,
    "eps_start": 1,
    "eps_end": 0.05,
    "exploration_fraction": 0.5,
    "gamma": 0.99,
    "td_lambda": 0.9,
    "normalize_observations": False,
}
