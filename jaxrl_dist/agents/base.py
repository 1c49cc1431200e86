"""The shape every algorithm takes: :class:`Agent`, pure functions for ONE population member on
ONE device, written for the body of a ``shard_map`` over the layout's data axis.

The generic programs (:mod:`jaxrl_dist.programs`) compose them three ways:

* on device, fused: ``scan(collect(act) -> learn)``, several updates per compiled call;
* host actors: ``act`` jitted on a local device steps host environments; their batches, as
  global arrays, feed ``learn`` over the mesh;
* evaluation and export: ``policy`` alone (deterministic, post-processing included), stepping
  the carry as ``act`` does (``()`` for a feed-forward policy).

``act`` takes its randomness as pre-drawn ``noise`` (:attr:`Agent.noise` of a key), not as a
key: a rollout draws every step's noise in one batched op before its loop, which is what keeps
small rollouts fast; a host actor draws one step's worth.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax

from jaxrl_dist.types import RunState

# Metrics every learner reports (from the rollout's finished episodes, reduced over the mesh),
# aggregated over a logging interval by summing.
EPISODE_METRICS = {"episode_return_sum": "sum", "episode_length_sum": "sum", "episodes": "sum"}
AGGREGATIONS = ("mean", "last", "sum")


class Agent(NamedTuple):
    # -- state
    init_params: Callable[[jax.Array], Any]
    #   key -> parameters (the first of a seed's three streams: params, environments, training)
    init: Callable[..., tuple[Any, Any]]
    #   (key, params, swept hparams {name: f32[]}) -> (train, data)
    init_carry: Callable[[], Any]
    #   () -> ONE environment's recurrent carry; () for a feed-forward policy
    # -- acting (per step, a batch of environments)
    acting: Callable[[Any], Any]
    #   train -> what ``act`` reads (parameters, normalisation statistics)
    noise: Callable[[jax.Array, int], Any]
    #   (key, T) -> ONE environment's action randomness for T steps, one batched draw
    act: Callable[..., tuple[jax.Array, Any, dict]]
    #   (acting, carry [E], obs [E, *obs], mask [E, A] | None, noise [E, ...])
    #   -> (action [E, ...], carry, extras {name: [E, ...]})
    env_action: Callable[[jax.Array], jax.Array]
    #   a stored action -> what the environment receives (squash/scale); pure, parameter-free
    # -- learning
    learn: Callable[..., tuple[Any, Any, dict]]
    #   (train, data, Trajectory [T, E], key) -> (train, data, metrics {name: f32[]}), reduced
    #   over the data axis; must advance train.update
    # -- deployment
    policy: Callable[..., tuple[jax.Array, Any]]
    #   (policy params, carry [B], obs [B, *obs], mask [B, A] | None) -> (environment action
    #   [B, ...], carry), deterministic, normalisation and clipping/squashing to the bounds
    #   included; the carry is ``init_carry``'s (``()`` for a feed-forward policy, passed back)
    policy_params: Callable[[Any], Any]
    #   train -> the pytree ``policy`` needs (what a checkpoint's policy item holds)
    # -- declarations
    metrics: dict[str, str]
    #   name -> how a logging interval aggregates it ("mean", "last", "sum"); includes
    #   EPISODE_METRICS
    steps_per_env: int                     # rollout length per update
    keep_final_obs: bool = False           # rollout keeps each step's pre-reset observation
    checkpointed: RunState = RunState(True, True, True)   # slots saved (False: rebuilt)
    new_actors: Callable[[Any], Any] | None = None
    #   data -> data, when a resumed run rebuilt the actors instead of restoring them (a pool's
    #   new games): a learner whose data holds unfinished trajectories ends them there
    unroll_threefry: bool = True
    #   the update program's random numbers hashed unrolled (compile_cache.unrolled_threefry):
    #   the same bits either way; a compile-time choice measured per learner (PPO/DQN/PQN compile
    #   faster unrolled, the off-policy continuous learners' many sampling sites slower)


class Deployment(NamedTuple):
    """What running a trained policy needs of its algorithm: :class:`Agent`'s fields of the
    same names, built from the config section and the env spec alone (the record's ``policy``
    factory), so a run directory rebuilds them without the run's sizes or mesh. An agent
    factory builds its own from the same function, so the two cannot drift."""

    policy: Callable[..., tuple[jax.Array, Any]]   # as Agent.policy
    init_carry: Callable[[], Any]                  # as Agent.init_carry


def check_aggregations(agent: Agent) -> None:
    """Raise if the agent declares a metric aggregation the reporting does not know."""
    bad = {k: v for k, v in agent.metrics.items() if v not in AGGREGATIONS}
    if bad:
        raise ValueError(f"unknown metric aggregations {bad}; use one of {AGGREGATIONS}")


def check_metrics(agent: Agent, metrics: dict[str, Any]) -> None:
    """Raise if ``learn``'s metrics differ from what the agent declares (called at trace)."""
    declared, got = set(agent.metrics), set(metrics)
    if declared != got:
        raise ValueError(f"learner metrics differ from its declaration: missing "
                         f"{sorted(declared - got)}, undeclared {sorted(got - declared)}")

