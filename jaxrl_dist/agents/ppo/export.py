"""PPO's deployed policy as ONNX (the record's ``export``): :func:`.learner.make_policy`'s
function written with the exporter's builder, layer for layer as :mod:`.networks` computes it.

Observation normalisation, the input scale, the actor's torso and hidden layers (``MLP``), for
``network.cell`` its GRU or LSTM step (``RecurrentMLP``: the carry is an input, the next carry
an output), the head, then the categorical's masked argmax or the Gaussian mean, tanh-squashed
and clipped to the bounds. The critic is not needed to act and is not in the policy's tree.
"""

from __future__ import annotations

import numpy as np

from jaxrl_dist.agents.ppo.config import PPOConfig
from jaxrl_dist.agents.ppo.networks import tanh_bounds
from jaxrl_dist.agents.torso import conv_torso
from jaxrl_dist.envs import EnvSpec
from jaxrl_dist.export import graph
from jaxrl_dist.export.graph import Emitter, ExportError, Graph


def emitter(p: PPOConfig, spec: EnvSpec) -> Emitter:
    net = p.network
    cell = net.cell
    if cell != "none" and cell not in graph.CELLS:
        raise ExportError(f"ppo.network.cell={cell} has no ONNX form here "
                          f"(exportable: none, {', '.join(graph.CELLS)})")
    carry = () if cell == "none" else tuple((name, int(net.cell_size))
                                            for name in graph.CELLS[cell][1])

    def emit(g: Graph, x: str, mask: str | None, carry_in: list[str]
             ) -> tuple[str, list[str]]:
        if p.normalize_observations:          # update.normalize_obs -> running_stats.normalize
            x = graph.normalize_observations(g, x, "obs_moments")
        else:                                 # stored, unused
            for name in ("mean", "var"):
                g.param(f"obs_moments/{name}")
        x = graph.scale_input(g, x, spec.obs_dtype)
        if cell == "none":                    # MLP: compact names
            conv, dense, head = "actor/MLP_0/Conv_", "actor/MLP_0/Dense_", \
                f"actor/MLP_0/Dense_{len(net.actor_hidden)}"
        else:                                 # RecurrentMLP: setup() attribute names
            conv, dense, head = "actor/convs_", "actor/dense_", "actor/out"
        x = graph.conv_torso(g, x, conv, conv_torso(net, spec.obs_shape), spec.obs_shape,
                             lambda y: g.op("Relu", y))
        x = graph.mlp(g, x, [f"{dense}{i}" for i in range(len(net.actor_hidden))],
                      net.activation)
        next_carry: list[str] = []
        if cell != "none":
            x, next_carry = graph.CELLS[cell][0](g, x, carry_in, "actor/rnn/")
        out = graph.dense(g, x, head)
        if not spec.continuous:
            return graph.argmax(g, out, mask), next_carry
        g.param("actor/log_std")              # the mode does not depend on it
        bounds = tanh_bounds(net, spec)
        if bounds is not None:                # DiagGaussian.env_action: low + (tanh u + 1) h
            low, high = (np.asarray(b, np.float32) for b in bounds)
            half = np.float32(0.5) * (high - low)
            out = g.op("Add", g.const(low, "low"),
                       g.op("Mul", g.op("Add", g.op("Tanh", out), g.const(1.0)),
                            g.const(half)))
        return graph.clip_to_bounds(g, out, spec), next_carry

    return Emitter(emit, carry)
