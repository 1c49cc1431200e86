"""PPO's deployed policy as ONNX (the record's ``export``): :func:`.learner.make_policy`'s
function written with the exporter's builder, layer for layer as :mod:`.networks` computes it.

Observation normalisation, the input scale, the actor's torso and hidden layers (``MLP``), for
``network.cell`` its GRU or LSTM step (``RecurrentMLP``: the carry is an input, the next carry
an output), the head, then the categorical's masked argmax or the Gaussian mean, tanh-squashed
and clipped to the bounds. The critic is not needed to act and is not in the policy's tree.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
from onnx import TensorProto

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

        def actor(x: str) -> str:
            x = graph.conv_torso(g, x, conv, conv_torso(net, spec.obs_shape), spec.obs_shape,
                                 lambda y: g.op("Relu", y))
            return graph.mlp(g, x, [f"{dense}{i}" for i in range(len(net.actor_hidden))],
                             net.activation)

        next_carry: list[str] = []
        if spec.agent_networks:   # networks._mlp: each agent's copy, picked by its index
            out = _per_agent(g, x, spec, lambda y: graph.dense(g, actor(y), head))
        else:
            x = actor(x)
            if cell != "none":
                x, next_carry = graph.CELLS[cell][0](g, x, carry_in, "actor/rnn/")
                x = graph.mlp(g, x, [f"actor/post_{i}" for i in range(len(net.head_hidden))],
                              net.activation)
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


def _per_agent(g: Graph, x: str, spec: EnvSpec, emit: Callable[[str], str]) -> str:
    """``EnvSpec.agent_networks`` copies of the actor (``emit`` with each agent's slice of the
    parameters, which carry a leading agent axis), each row's output its own agent's: the one
    its one-hot index (the input's last A features) names by argmax, as ``networks._agent_of``.
    """
    A, width = spec.agent_networks, spec.obs_shape[0]
    stacked = {k: v for k, v in g.params.items() if k.startswith("actor/MLP_0/")}
    for k in stacked:
        del g.params[k]
    index = g.op("Slice", x, g.const([width - A], "start", np.int64),
                 g.const([width], "stop", np.int64), g.const([1], "axis", np.int64))
    agent = g.op("ArgMax", index, axis=1, keepdims=1)                  # [B, 1] int64
    total = None
    for a in range(A):
        g.params.update({k: v[a] for k, v in stacked.items()})
        picked = g.op("Cast", g.op("Equal", agent, g.const([[a]], "agent", np.int64)),
                      to=TensorProto.FLOAT)
        term = g.op("Mul", emit(x), picked)
        total = term if total is None else g.op("Add", total, term)
    return total
