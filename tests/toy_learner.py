"""A toy second learner: REINFORCE with a linear softmax policy, in a few dozen lines.

It exists to prove the learner seams are real: it plugs in from OUTSIDE the package
(``JAXRL_DIST_PLUGINS=toy_learner`` with this directory on ``PYTHONPATH``) and runs through the
trainer, the launcher, checkpoints, populations, the summary, ``policy.load`` and the ONNX
export, none of which know it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from jaxrl_dist.agents import Algorithm, register
from jaxrl_dist.agents.base import EPISODE_METRICS, Agent, Deployment
from jaxrl_dist.errors import ConfigError
from jaxrl_dist.gradients import global_mean_grad
from jaxrl_dist.rollout import episode_sums
from jaxrl_dist.typed import doc


@dataclass(frozen=True, kw_only=True)
class ReinforceConfig:
    num_steps: int = doc("rollout length per environment per update", default=16)
    learning_rate: float = doc("Adam learning rate", default=0.01)
    gamma: float = doc("discount of the returns-to-go", default=0.99)


def check(c: ReinforceConfig) -> None:
    if not (c.num_steps >= 1 and c.learning_rate > 0 and 0 <= c.gamma <= 1):
        raise ConfigError(f"reinforce: bad values {c}")


class TrainState(NamedTuple):
    params: Any
    opt_state: Any
    key: jax.Array
    update: jax.Array
    hparams: Any


def logits(params, obs, mask=None):
    out = obs.reshape(obs.shape[0], -1) @ params["w"] + params["b"]
    return out if mask is None else jnp.where(mask, out, -1e9)


def make_policy(c: ReinforceConfig, spec) -> Deployment:
    """The greedy policy, from (section, spec) alone: what ``policy.load`` rebuilds."""
    def policy(params, carry, obs, mask=None):
        return jnp.argmax(logits(params, obs, mask), -1), carry
    return Deployment(policy, tuple)


def emitter(c: ReinforceConfig, spec):
    """The same greedy policy as ONNX, with the exporter's builder (imported here: onnx only
    when exporting)."""
    from jaxrl_dist.export import graph

    def emit(g, x, mask, carry):
        if len(spec.obs_shape) != 1:
            x = g.op("Flatten", x, axis=1)
        out = g.op("Add", g.op("MatMul", x, g.const(g.param("w"))), g.const(g.param("b")))
        return graph.argmax(g, out, mask), []
    return graph.Emitter(emit)


def make_agent(c: ReinforceConfig, sizes, spec, layout) -> Agent:
    axis, num_actions = layout.data_axis, spec.action_dim
    obs_size = int(jnp.prod(jnp.array(spec.obs_shape)))

    def init_params(key):
        return {"w": 0.01 * jax.random.normal(key, (obs_size, num_actions)),
                "b": jnp.zeros(num_actions)}

    def init(key, params, swept):
        return TrainState(params, optax.adam(c.learning_rate).init(params), key,
                          jnp.int32(0), swept), ()

    def act(params, carry, obs, mask, noise):
        return jnp.argmax(logits(params, obs, mask) + noise, -1), carry, {}

    def learn(train, data, trajectory, key):
        steps = trajectory.steps
        not_done = 1.0 - jnp.logical_or(steps.terminated, steps.truncated).astype(jnp.float32)

        def back(g, x):                        # returns-to-go within the rollout
            g = x[0] + c.gamma * x[1] * g
            return g, g
        _, returns = jax.lax.scan(back, jnp.zeros_like(steps.reward[0]),
                                  (steps.reward, not_done), reverse=True)
        baseline = jax.lax.pmean(jnp.mean(returns), axis)

        def loss(params):   # this device's mean loss, and it again as the reported value
            logp = jax.nn.log_softmax(logits(params, steps.obs.reshape(-1, *spec.obs_shape)))
            taken = jnp.take_along_axis(logp, steps.action.reshape(-1, 1), 1)[:, 0]
            value = -jnp.mean(taken * (returns.reshape(-1) - baseline))
            return value, value

        # the package's one rule: the gradient of the mean loss over the GLOBAL batch
        grads, value, _ = global_mean_grad(loss, train.params, axis)
        lr = train.hparams.get("learning_rate", c.learning_rate)
        updates, opt_state = optax.adam(lr).update(grads, train.opt_state)
        metrics = {**jax.lax.psum(episode_sums(steps), axis), "loss": value}
        return TrainState(optax.apply_updates(train.params, updates), opt_state, train.key,
                          train.update + 1, train.hparams), data, metrics

    return Agent(**make_policy(c, spec)._asdict(), init_params=init_params, init=init,
                 acting=lambda train: train.params,
                 noise=lambda key, t: jax.random.gumbel(key, (t, num_actions)),
                 act=act, env_action=lambda a: a, learn=learn,
                 policy_params=lambda train: train.params,
                 metrics={**EPISODE_METRICS, "loss": "mean"}, steps_per_env=c.num_steps)


register(Algorithm(name="reinforce", section=ReinforceConfig, check=check,
                   sweepable=("reinforce.learning_rate",), steps_per_env=lambda c: c.num_steps,
                   make="toy_learner:make_agent", policy="toy_learner:make_policy",
                   export="toy_learner:emitter", doc="REINFORCE, linear policy (tests only)"))
