"""The greedy Q-network policy as ONNX, DQN's and PQN's (their records' ``export``):
:func:`.networks.make_policy`'s function written with the exporter's builder, layer for layer as
``QNetwork`` computes it: LayerNorm after every conv and dense layer if asked, the dueling
head, the masked argmax.
"""

from __future__ import annotations

import itertools
from typing import Any

from jaxrl_dist.agents.torso import conv_torso
from jaxrl_dist.envs import EnvSpec
from jaxrl_dist.export import graph
from jaxrl_dist.export.graph import Emitter, Graph


def emitter(section: Any, spec: EnvSpec) -> Emitter:
    net = section.network

    def emit(g: Graph, x: str, mask: str | None, carry: list[str]) -> tuple[str, list[str]]:
        norms = itertools.count()   # flax numbers LayerNorm_i in creation order: convs first

        def norm(y: str) -> str:
            return graph.layer_norm(g, y, f"LayerNorm_{next(norms)}") if net.layer_norm else y

        x = graph.scale_input(g, x, spec.obs_dtype)
        x = graph.conv_torso(g, x, "Conv_", conv_torso(net, spec.obs_shape), spec.obs_shape,
                             lambda y: g.op("Relu", norm(y)))
        x = graph.mlp(g, x, [f"Dense_{i}" for i in range(len(net.hidden))], net.activation,
                      norm)
        head = len(net.hidden)
        if not net.dueling:
            q = graph.dense(g, x, f"Dense_{head}")
        else:   # value + advantage - mean(advantage)
            value = graph.dense(g, x, f"Dense_{head}")
            advantage = graph.dense(g, x, f"Dense_{head + 1}")
            q = g.op("Sub", g.op("Add", value, advantage), g.reduce_mean(advantage, -1))
        return graph.argmax(g, q, mask), []

    return Emitter(emit)
