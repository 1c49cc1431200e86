"""Learning algorithms behind one small interface, :class:`Learner`: what the trainer, the
many-seeds runner and the benches call. The trainer knows nothing of PPO; a new algorithm is a
new ``agents/<name>/`` package whose ``make_learner`` returns the same record.

jax-free at import (the config reads ``agents.ppo.config`` before jax is imported); each
algorithm's programs are imported when a learner is made.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, NamedTuple

if TYPE_CHECKING:
    from jaxrl_dist.config import Config
    from jaxrl_dist.envs import EnvSpec
    from jaxrl_dist.sharding import Layout
    from jaxrl_dist.sizes import Sizes


class Learner(NamedTuple):
    """An algorithm's programs over the layout's mesh; all take and return global arrays.

    The state is one pytree, ``RunState(train, envs)``: ``train`` is the learner's own state
    (replicated over the data axis; it has a ``params`` field, which replica checks and
    fingerprints read), ``envs`` the environments (sharded). Seeds are arguments, never config
    reads inside a program, so a population is the same programs with a member axis.
    """

    init: Callable[..., Any]          # (seed key(s), swept hparams=None) -> RunState
    update: Any                       # jit: (RunState, n updates) -> (RunState, metrics);
                                      #   donates the state; static n, so .lower(abstract, n)
    evaluate: Any                     # jit: (train state, seed key(s)) -> {"return_mean",
                                      #   "return_std", "length_mean"}, reduced over the mesh
    abstract_state: Callable[[], Any]  # init()'s result as ShapeDtypeStructs with shardings
    layout: Layout
    init_program: Any                 # jit behind init: (seed key(s), swept dict) -> RunState,
                                      #   to .lower() and compile with options of one's own


def make_learner(config: Config, sizes: Sizes, spec: EnvSpec, layout: Layout) -> Learner:
    """The learner of ``config`` (PPO, today's only algorithm) for ``spec`` over ``layout``."""
    from jaxrl_dist.agents.ppo.learner import make_learner as make_ppo
    return make_ppo(config, sizes, spec, layout)
