"""SAC's, TD3's and CrossQ's deployed policies as ONNX (their records' ``export``):
:func:`.networks.deployment`'s function written with the exporter's builder, layer for layer as
:mod:`.networks` computes it: observation normalisation, the input scale, the actor's hidden
layers (CrossQ: each batch renormalisation in eval mode, by its running statistics), tanh of
its action head (SAC, CrossQ: of the mean; the log-std head is not needed to act), rescaled
from [-1, 1] onto the bounds and clipped to them. The critics are not in the policy's tree."""

from __future__ import annotations

import numpy as np

from jaxrl_dist.agents.offpolicy.config import OffPolicyConfig
from jaxrl_dist.agents.offpolicy.networks import bounds
from jaxrl_dist.agents.offpolicy.renorm import EPS as RENORM_EPS
from jaxrl_dist.envs import EnvSpec
from jaxrl_dist.export import graph
from jaxrl_dist.export.graph import Emitter, Graph


def _emitter(algo: str, c: OffPolicyConfig, spec: EnvSpec, actor: str = "actor",
             renorm: bool = False, log_std_head: bool = True) -> Emitter:
    """``actor``: where the actor's parameters are in the policy's tree; ``renorm``: batch
    renormalisation layers in it; ``log_std_head``: a Gaussian's second head (stored, unused
    by the mode)."""
    low, high = bounds(algo, spec)
    hidden = len(c.network.actor_hidden)

    def emit(g: Graph, x: str, mask: str | None, carry: list[str]) -> tuple[str, list[str]]:
        del mask, carry   # continuous actions, feed-forward
        if c.normalize_observations:          # networks.normalize_obs
            x = graph.normalize_observations(g, x, "obs_moments")
        else:                                 # stored, unused
            for name in ("mean", "var"):
                g.param(f"obs_moments/{name}")
        x = graph.scale_input(g, x, spec.obs_dtype)
        if len(spec.obs_shape) != 1:
            x = g.op("Flatten", x, axis=1)
        if renorm:   # networks._renorm_hidden: BatchRenorm_0, then Dense_i, act, BatchRenorm_i+1
            def norm(x, i):
                return graph.batch_norm(g, x, f"{actor}/BatchRenorm_{i}",
                                        f"actor/batch_stats/BatchRenorm_{i}", RENORM_EPS)
            x = norm(x, 0)
            for i in range(hidden):
                x = norm(graph.activation(g, graph.dense(g, x, f"{actor}/Dense_{i}"),
                                          c.network.activation), i + 1)
        else:
            x = graph.mlp(g, x, [f"{actor}/Dense_{i}" for i in range(hidden)],
                          c.network.activation)
        a = g.op("Tanh", graph.dense(g, x, f"{actor}/Dense_{hidden}"))
        if log_std_head:                      # the log std's head: the mode does not use it
            for name in ("kernel", "bias"):
                g.param(f"{actor}/Dense_{hidden + 1}/{name}")
        # networks.to_bounds: low + (a + 1) (high - low) / 2, then envs.to_env_action's clip
        a = g.op("Add", g.const(low, "low"),
                 g.op("Mul", g.op("Add", a, g.const(1.0)),
                      g.const(np.float32(0.5) * (high - low), "half")))
        return graph.clip_to_bounds(g, a, spec), []

    return Emitter(emit)


def sac_emitter(c: OffPolicyConfig, spec: EnvSpec) -> Emitter:
    return _emitter("sac", c, spec)


def td3_emitter(c: OffPolicyConfig, spec: EnvSpec) -> Emitter:
    return _emitter("td3", c, spec, log_std_head=False)


def crossq_emitter(c: OffPolicyConfig, spec: EnvSpec) -> Emitter:
    # flax's {"params", "batch_stats"}: the parameters one level down
    return _emitter("crossq", c, spec, "actor/params", c.network.batch_norm_actor)
