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

# same repository, ``configs/gymnax/pendulum.yaml``'s ``sac:`` entry, verbatim
REJAX_PENDULUM_SAC = {
    "env": "Pendulum-v1",
    "agent_kwargs": {"activation": "swish"},
    "num_envs": 1,
    "buffer_size": 10_000,
    "fill_buffer": 256,
    "batch_size": 256,
    "learning_rate": 0.01,
    "num_epochs": 1,
    "total_timesteps": 10_000,
    "eval_freq": 100,
    "gamma": 0.99,
    "polyak": 0.98,
    "target_entropy_ratio": None,
    "normalize_observations": True,
}

# The same settings in our configs/pendulum_sac.yaml's keys (``--set``), for ``bench rejax``:
# rejax's SAC (rejax/algos/sac.py) has 64x64 networks (its default hidden sizes), twin critics,
# alpha from 1.0 (log_alpha 0) tuned towards -|A|, one Adam rate for every network, no gradient
# clipping (max_grad_norm defaults to inf), a Polyak target step after every iteration
# (tau = 1 - polyak), actor and critic updated every step, and observations normalised.
OURS_AS_REJAX_PENDULUM_SAC = (
    "num_envs=1", "sac.buffer_size=10000", "sac.learning_starts=256", "sac.batch_size=256",
    "sac.actor_lr=0.01", "sac.critic_lr=0.01", "sac.alpha_lr=0.01", "sac.tau=0.02",
    "sac.utd=1", "sac.policy_delay=1", "sac.alpha=1.0", "sac.max_grad_norm=null",
    "sac.normalize_observations=true", "sac.network.activation=swish",
    "sac.network.actor_hidden=[64,64]", "sac.network.critic_hidden=[64,64]",
)
