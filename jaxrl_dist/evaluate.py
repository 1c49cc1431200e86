"""Evaluation on dedicated environments spread over every device.

Each eval environment plays ONE episode with the mode of the policy (or, with
``eval_deterministic: false``, actions sampled from it); returns are reduced over
the whole mesh, so every process gets the same mean/std and can take the same decision (early
stop at a target return). Eval keys come from their own stream, so evaluating does not change
what training does.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
from jax.sharding import Mesh

from jaxrl_dist import envs as envs_lib
from jaxrl_dist import rollout
from jaxrl_dist.config import Config
from jaxrl_dist.distributions import action_noise
from jaxrl_dist.envs import EnvSpec
from jaxrl_dist.sharding import DATA_AXIS, LOCAL_MEMBER_AXIS, Layout

EVAL_STREAM = 0x5EED  # folded into the seed so eval keys never collide with training keys


def _device_varying(tree: Any, axes: tuple[str, ...]) -> Any:
    """Mark per-device loop state as varying over every mesh axis (shard_map's type system
    requires a loop carry to keep its type, and stepping makes every leaf device-varying)."""
    def cast(x):
        aval = jax.typeof(x)
        varying = getattr(aval, "vma", None)  # older jax; 0.10 has manual_axis_type.varying
        if varying is None:
            varying = aval.manual_axis_type.varying
        missing = tuple(a for a in axes if a not in varying)
        return jax.lax.pcast(x, missing, to="varying") if missing else x
    return jax.tree.map(cast, tree)


def make_eval_program(config: Config, spec: EnvSpec, policy: Callable[..., Any],
                      layout: Layout | Mesh
                      ) -> Callable[[Any, jax.Array, jax.Array], dict[str, jax.Array]]:
    """(acting state, seed key, update index) -> {"return_mean", "return_std", "length_mean"}.

    ``policy(acting state, raw observations [E, *obs], legal-action mask or None)`` is the
    learner's action distribution (the acting state is whatever it needs: parameters,
    observation moments). The seed key is an argument so one compiled program serves every
    seed. In a population every argument and result has a leading member dimension."""
    layout = layout if isinstance(layout, Layout) else Layout(layout)
    spec = rollout.spec_in(spec, layout)
    local_envs = config.eval_episodes // layout.data_size
    max_steps = spec.max_episode_steps
    deterministic = config.eval_deterministic

    def local_eval(acting, seed_key, update):
        key = jax.random.fold_in(jax.random.fold_in(seed_key, EVAL_STREAM), update)
        env_ids = jax.lax.axis_index(DATA_AXIS) * local_envs + jnp.arange(local_envs)
        key_reset, key_steps = jax.random.split(key)
        slots = jax.vmap(lambda k: envs_lib.reset(spec, k))(rollout.env_keys(key_reset, env_ids))

        def cond(carry):
            t, _, _, _, done = carry
            return jnp.logical_and(t < max_steps, jnp.logical_not(jnp.all(done)))

        def body(carry):
            t, slots, ret, length, done = carry
            dist = policy(acting, slots.obs, slots.mask)
            keys = rollout.env_keys(jax.random.fold_in(key_steps, t), env_ids)
            if deterministic:
                action = dist.mode()
            else:   # per-environment noise from its own key: the same on any topology
                action = dist.sample_from_noise(jax.vmap(lambda k: action_noise(
                    jax.random.fold_in(k, 1), spec.continuous, (spec.action_dim,)))(keys))
            action = dist.env_action(action)
            slots, out = envs_lib.step(spec, envs_lib.step_keys(keys), slots, action,
                                      autoreset=False)   # one episode each
            ret = jnp.where(done, ret, ret + out.reward)
            length = jnp.where(done, length, length + 1)
            done = done | out.terminated | out.truncated
            return t + 1, slots, ret, length, done

        zeros = jnp.zeros(local_envs)
        carry = (jnp.int32(0), *_device_varying(
            (slots, zeros, zeros, jnp.zeros(local_envs, bool)), layout.axes))
        _, _, ret, length, _ = jax.lax.while_loop(cond, body, carry)
        sums = jax.lax.psum(jnp.stack([jnp.sum(ret), jnp.sum(jnp.square(ret)), jnp.sum(length),
                                       jnp.float32(local_envs)]), DATA_AXIS)
        mean = sums[0] / sums[3]
        return {"return_mean": mean,
                "return_std": jnp.sqrt(jnp.maximum(sums[1] / sums[3] - jnp.square(mean), 0.0)),
                "length_mean": sums[2] / sums[3]}

    body = (jax.vmap(local_eval, axis_name=LOCAL_MEMBER_AXIS) if layout.members
            else local_eval)
    return jax.jit(jax.shard_map(body, mesh=layout.mesh, in_specs=(layout.train,) * 3,
                                 out_specs=layout.train, check_vma=spec.check_vma))
