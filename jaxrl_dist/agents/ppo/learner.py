"""PPO's programs behind the :class:`~jaxrl_dist.agents.Learner` interface: init, the
K-updates-per-call update and the evaluation, each ONE jitted ``shard_map`` over the layout's
mesh. The body (:mod:`.update`) is written for ONE member; a population runs it under ``vmap``
over the members on each device (the data-axis collectives then reduce each member separately).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.sharding import Mesh

from jaxrl_dist import rollout
from jaxrl_dist.agents import Learner
from jaxrl_dist.agents.ppo.networks import make_networks
from jaxrl_dist.agents.ppo.update import (TrainState, init_params, make_init_fn,
                                          make_update_fn, normalize_obs)
from jaxrl_dist.config import Config
from jaxrl_dist.envs import EnvSpec
from jaxrl_dist.evaluate import make_eval_program
from jaxrl_dist.population import hparam_name
from jaxrl_dist.sharding import LOCAL_MEMBER_AXIS, Layout
from jaxrl_dist.sizes import Sizes
from jaxrl_dist.types import RunState


def make_learner(config: Config, sizes: Sizes, spec: EnvSpec, layout: Layout | Mesh
                 ) -> Learner:
    layout = layout if isinstance(layout, Layout) else Layout(layout)
    spec = rollout.spec_in(spec, layout)
    nets = make_networks(config.network, spec)
    init_local = make_init_fn(config, sizes, spec, nets)
    one_update = make_update_fn(config, sizes, spec, nets, layout)
    params_of = functools.partial(init_params, nets)

    def update_local(state: RunState, num_updates: int):
        return jax.lax.scan(one_update, state, None, length=num_updates)

    specs = RunState(layout.train, layout.envs)
    if layout.members:   # the same bodies, vmapped over this device's members
        def init_body(seed_keys, swept):
            # Parameters member by member (lax.map, not vmap): the orthogonal initializer's
            # batched LAPACK QR deadlocked 2-device CPU programs (jaxlib 0.10.2), and this way
            # member k starts from exactly the single run's parameters.
            return jax.vmap(init_local)(seed_keys, swept, jax.lax.map(params_of, seed_keys))
        update_body = jax.vmap(update_local, in_axes=(0, None), axis_name=LOCAL_MEMBER_AXIS)
    else:
        def init_body(seed_key, swept):
            return init_local(seed_key, swept, params_of(seed_key))
        update_body = update_local
    mesh = layout.mesh
    # out_shardings spelled out: XLA would hand zero-size outputs (MJX states have some)
    # back replicated in a multi-process job, not in the shardings the update compiles for.
    init_program = jax.jit(jax.shard_map(init_body, mesh=mesh,
                                         in_specs=(layout.train, layout.train), out_specs=specs,
                                         check_vma=spec.check_vma),
                           out_shardings=RunState(layout.sharding(layout.train),
                                                  layout.sharding(layout.envs)))

    def init(seed_key: jax.Array, swept: dict[str, jax.Array] | None = None) -> RunState:
        return init_program(seed_key, swept or {})

    def update(state: RunState, num_updates: int):
        body = jax.shard_map(lambda s: update_body(s, num_updates), mesh=mesh,
                             in_specs=(specs,), out_specs=(specs, layout.train),
                             check_vma=spec.check_vma)
        return body(state)

    update = jax.jit(update, static_argnums=1, donate_argnums=0)

    def abstract_state() -> RunState:
        """What init() returns, as ShapeDtypeStructs with shardings: lets the update program
        compile without (and concurrently with) running init."""
        lead = (layout.members,) if layout.members else ()
        key = jax.ShapeDtypeStruct((*lead, 2), jnp.uint32)
        swept = {hparam_name(k): jax.ShapeDtypeStruct(lead, jnp.float32)
                 for k in config.population.sweep}
        shapes = jax.eval_shape(init, key, swept)

        def like(tree, spec):
            return jax.tree.map(lambda x: jax.ShapeDtypeStruct(
                x.shape, x.dtype, sharding=layout.sharding(spec)), tree)

        return RunState(like(shapes.train, layout.train), like(shapes.envs, layout.envs))

    # EVALUATION acts as training does: on observations normalised by the training moments.
    def policy(acting, obs, mask):
        params, moments = acting
        return nets.policy(params, normalize_obs(config, moments, obs), mask)

    eval_program = make_eval_program(config, spec, policy, layout)

    @jax.jit
    def evaluate(train: TrainState, seed_keys: jax.Array) -> dict[str, jax.Array]:
        return eval_program((train.params, train.obs_moments), seed_keys, train.update)

    return Learner(init, update, evaluate, abstract_state, layout, init_program)
