"""A feed-forward policy as an ONNX graph, written layer by layer with ``onnx.helper``.

The graph is rebuilt from what a checkpoint records (the algorithm, its config section, the
observation and action specs) and the policy's parameter pytree, layer for layer as the
learner's flax modules compute it: PPO's actor (``agents/ppo/networks.py``: observation
normalisation, the input scale, ``MLP``, the categorical's masked argmax or the Gaussian mean,
tanh-squashed and clipped to the bounds) and the Q-network of DQN and PQN
(``agents/qnet/networks.py``: LayerNorm, a dueling head, the greedy argmax). Convolutions are
ONNX ``Conv`` in NCHW, whatever the trainer's CPU path computes them with (``agents.conv``:
im2col), with the padding flax derives for SAME or VALID. Every parameter must be used: a tree
with leaves this module does not map (a recurrent core, a plug-in's network) is refused, not
exported half.

Opset 17 and later write ``LayerNormalization``; opset 11 to 16 the same statistics from
primitive ops, as flax computes them (``E[x^2] - E[x]^2``, clamped at 0).
"""

from __future__ import annotations

import itertools
import json
from typing import Any, Callable

import numpy as np
import onnx
from jax import lax
from onnx import TensorProto, helper, numpy_helper

from jaxrl_dist import agents, typed
from jaxrl_dist.agents.ppo.networks import _tanh_bounds
from jaxrl_dist.agents.torso import conv_torso, input_scale
from jaxrl_dist.distributions import MASKED_LOGIT
from jaxrl_dist.envs import EnvSpec
from jaxrl_dist.errors import UserError

MIN_OPSET = 11
LAYER_NORM_OPSET = 17      # LayerNormalization is an ONNX op from here on
REDUCE_AXES_INPUT = 18     # ReduceMean takes its axes as an input from here on
LAYER_NORM_EPS = 1e-6      # flax.linen.LayerNorm's default
OBS_NORM_EPS, OBS_NORM_CLIP = 1e-8, 10.0   # running_stats.standardize / normalize


class ExportError(UserError):
    """A policy this exporter cannot write, or bad export input: one line for the user."""


class _Graph:
    """Nodes and initialisers of one graph, with fresh names; ``op`` returns the output name."""

    def __init__(self, opset: int):
        self.opset, self.nodes, self.inits, self._count = opset, [], [], 0

    def name(self, hint: str) -> str:
        self._count += 1
        return f"{hint}_{self._count}"

    def const(self, value: Any, hint: str = "c", dtype: Any = np.float32) -> str:
        name = self.name(hint)
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype), name))
        return name

    def op(self, op_type: str, *inputs: str, **attrs: Any) -> str:
        out = self.name(op_type.lower())
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], **attrs))
        return out

    def reduce_mean(self, x: str, axis: int) -> str:
        if self.opset >= REDUCE_AXES_INPUT:
            return self.op("ReduceMean", x, self.const([axis], "axes", np.int64), keepdims=1)
        return self.op("ReduceMean", x, axes=[axis], keepdims=1)


class _Params:
    """The parameter pytree as ``{"a/b/kernel": array}``; ``take`` hands each out once, so
    ``left`` names whatever the graph did not use."""

    def __init__(self, tree: Any):
        self.flat: dict[str, np.ndarray] = {}

        def walk(prefix: str, node: Any) -> None:
            if isinstance(node, dict):
                for key, child in node.items():
                    walk(f"{prefix}/{key}" if prefix else str(key), child)
            else:
                self.flat[prefix] = np.asarray(node, np.float32)
        walk("", tree)

    def take(self, path: str) -> np.ndarray:
        if path not in self.flat:
            raise ExportError(f"the policy's parameters have no {path!r} (found "
                              f"{', '.join(sorted(self.flat))}): not a network this exporter "
                              f"maps")
        return self.flat.pop(path)

    def left(self) -> list[str]:
        return sorted(self.flat)


def _dense(g: _Graph, p: _Params, x: str, prefix: str) -> str:
    kernel, bias = p.take(f"{prefix}/kernel"), p.take(f"{prefix}/bias")
    return g.op("Add", g.op("MatMul", x, g.const(kernel, "kernel")), g.const(bias, "bias"))


def _layer_norm(g: _Graph, p: _Params, x: str, prefix: str) -> str:
    """flax's LayerNorm over the last axis: (x - mean) * (rsqrt(var + eps) * scale) + bias."""
    scale, bias = g.const(p.take(f"{prefix}/scale"), "scale"), g.const(p.take(f"{prefix}/bias"),
                                                                      "bias")
    if g.opset >= LAYER_NORM_OPSET:
        return g.op("LayerNormalization", x, scale, bias, axis=-1, epsilon=LAYER_NORM_EPS)
    mean = g.reduce_mean(x, -1)
    mean_sq = g.reduce_mean(g.op("Mul", x, x), -1)
    var = g.op("Max", g.op("Sub", mean_sq, g.op("Mul", mean, mean)), g.const(0.0, "zero"))
    inv = g.op("Reciprocal", g.op("Sqrt", g.op("Add", var, g.const(LAYER_NORM_EPS, "eps"))))
    return g.op("Add", g.op("Mul", g.op("Sub", x, mean), g.op("Mul", inv, scale)), bias)


def _activation(g: _Graph, x: str, name: str) -> str:
    """The configs' activations as jax.nn computes them (gelu: its tanh approximation)."""
    if name == "relu":
        return g.op("Relu", x)
    if name == "tanh":
        return g.op("Tanh", x)
    if name == "elu":
        return g.op("Elu", x, alpha=1.0)
    if name in ("silu", "swish"):
        return g.op("Mul", x, g.op("Sigmoid", x))
    if name == "gelu":   # x * 0.5 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
        cube = g.op("Mul", g.op("Mul", x, x), x)
        inner = g.op("Add", x, g.op("Mul", g.const(0.044715), cube))
        tanh = g.op("Tanh", g.op("Mul", g.const(np.sqrt(2 / np.pi)), inner))
        return g.op("Mul", x, g.op("Mul", g.const(0.5), g.op("Add", g.const(1.0), tanh)))
    raise ExportError(f"activation {name!r} has no ONNX form here")


def _torso(g: _Graph, p: _Params, x: str, prefix: str, convs: tuple[dict, ...],
           obs_shape: tuple[int, ...], after_conv: Callable[[str], str]) -> str:
    """[N, H, W, C] through ``convs`` (flax ``nn.Conv`` arguments, agents.torso), each followed
    by ``after_conv`` on NHWC values, then flattened in flax's (H, W, C) order."""
    if not convs:
        return g.op("Flatten", x, axis=1) if len(obs_shape) != 1 else x
    size = np.asarray(obs_shape[:2])
    for i, layer in enumerate(convs):
        kernel = p.take(f"{prefix}Conv_{i}/kernel")                    # HWIO
        bias = p.take(f"{prefix}Conv_{i}/bias")
        strides = tuple(layer.get("strides", (1, 1)))
        pads = lax.padtype_to_pads(tuple(size), kernel.shape[:2], strides, layer["padding"])
        nchw = g.op("Transpose", x, perm=[0, 3, 1, 2])
        y = g.op("Conv", nchw, g.const(kernel.transpose(3, 2, 0, 1), "kernel"),
                 g.const(bias, "bias"), kernel_shape=list(kernel.shape[:2]),
                 strides=list(strides), pads=[pads[0][0], pads[1][0], pads[0][1], pads[1][1]])
        x = after_conv(g.op("Transpose", y, perm=[0, 2, 3, 1]))
        size = (size + np.asarray([sum(pads[0]), sum(pads[1])]) - kernel.shape[:2]) \
            // np.asarray(strides) + 1
    return g.op("Flatten", x, axis=1)


def _argmax(g: _Graph, scores: str, mask: str | None) -> str:
    """The first maximal legal action, as int32 (jnp.argmax's dtype)."""
    if mask is not None:
        scores = g.op("Where", mask, scores, g.const(MASKED_LOGIT, "masked"))
    return g.op("Cast", g.op("ArgMax", scores, axis=-1, keepdims=0), to=TensorProto.INT32)


def _clip_to_bounds(g: _Graph, x: str, spec: EnvSpec) -> str:
    """envs.to_env_action: continuous actions clipped to the space's bounds."""
    if spec.action_low is not None:
        x = g.op("Max", x, g.const(spec.action_low, "low"))
    if spec.action_high is not None:
        x = g.op("Min", x, g.const(spec.action_high, "high"))
    return x


def _ppo(g: _Graph, p: _Params, section: Any, spec: EnvSpec, x: str, mask: str | None) -> str:
    """PPO's deployed policy (agents/ppo/learner.py ``policy``): the actor's mode on normalised
    observations, then the environment's action."""
    net = section.network
    cell = getattr(net, "cell", "none")
    if cell != "none":
        raise ExportError(f"ppo.network.cell={cell}: recurrent policies are not exported yet "
                          f"(feed-forward networks only)")
    if section.normalize_observations:       # update.normalize_obs -> running_stats.normalize
        mean = g.const(p.take("obs_moments/mean"), "obs_mean")
        std = g.op("Sqrt", g.op("Add", g.const(p.take("obs_moments/var"), "obs_var"),
                                g.const(OBS_NORM_EPS)))
        x = g.op("Clip", g.op("Div", g.op("Sub", x, mean), std),
                 g.const(-OBS_NORM_CLIP), g.const(OBS_NORM_CLIP))
    else:                                    # stored, unused
        for name in ("mean", "var"):
            p.take(f"obs_moments/{name}")
    scale = input_scale(spec.obs_dtype)
    if scale != 1.0:
        x = g.op("Mul", x, g.const(scale, "scale"))
    mlp = "actor/MLP_0/"
    x = _torso(g, p, x, mlp, conv_torso(net, spec.obs_shape), spec.obs_shape,
               lambda y: g.op("Relu", y))
    for i, _ in enumerate(net.actor_hidden):
        x = _activation(g, _dense(g, p, x, f"{mlp}Dense_{i}"), net.activation)
    out = _dense(g, p, x, f"{mlp}Dense_{len(net.actor_hidden)}")
    if not spec.continuous:
        return _argmax(g, out, mask)
    p.take("actor/log_std")                  # the mode does not depend on it
    bounds = _tanh_bounds(net, spec)
    if bounds is not None:                   # DiagGaussian.env_action: low + (tanh u + 1) h
        low, high = (np.asarray(b, np.float32) for b in bounds)
        half = np.float32(0.5) * (high - low)
        out = g.op("Add", g.const(low, "low"),
                   g.op("Mul", g.op("Add", g.op("Tanh", out), g.const(1.0)), g.const(half)))
    return _clip_to_bounds(g, out, spec)


def _q_network(g: _Graph, p: _Params, section: Any, spec: EnvSpec, x: str,
               mask: str | None) -> str:
    """DQN's and PQN's greedy policy (agents/qnet/networks.py ``QNetwork``, ``greedy``)."""
    net = section.network
    norms = itertools.count()   # flax numbers LayerNorm_i in creation order: convs first

    def norm(y: str) -> str:
        return _layer_norm(g, p, y, f"LayerNorm_{next(norms)}") if net.layer_norm else y

    scale = input_scale(spec.obs_dtype)
    if scale != 1.0:
        x = g.op("Mul", x, g.const(scale, "scale"))
    x = _torso(g, p, x, "", conv_torso(net, spec.obs_shape), spec.obs_shape,
               lambda y: g.op("Relu", norm(y)))
    for i, _ in enumerate(net.hidden):
        x = _activation(g, norm(_dense(g, p, x, f"Dense_{i}")), net.activation)
    head = len(net.hidden)
    if not net.dueling:
        q = _dense(g, p, x, f"Dense_{head}")
    else:   # value + advantage - mean(advantage)
        value = _dense(g, p, x, f"Dense_{head}")
        advantage = _dense(g, p, x, f"Dense_{head + 1}")
        q = g.op("Sub", g.op("Add", value, advantage), g.reduce_mean(advantage, -1))
    return _argmax(g, q, mask)


EMITTERS = {"ppo": _ppo, "dqn": _q_network, "pqn": _q_network}
OBS_TYPES = {"float32": TensorProto.FLOAT, "uint8": TensorProto.UINT8}


def build_model(record: dict[str, Any], params: Any, opset: int,
                metadata: dict[str, str] | None = None) -> onnx.ModelProto:
    """The ONNX model of a checkpoint's policy: ``record`` is its ``meta["policy"]``
    (algorithm, config section, env spec), ``params`` ONE member's policy arrays.

    Inputs ``obs`` [batch, *obs_shape] (float32, or uint8 for uint8 frames) and, for tasks
    with action masks, ``mask`` [batch, A] (bool); output ``actions``: int32 [batch] for
    discrete actions, float32 [batch, A] for continuous ones, in the environment's units."""
    algo = record["algo"]
    if algo not in EMITTERS:
        raise ExportError(f"no ONNX exporter for algorithm {algo!r} (exportable: "
                          f"{', '.join(sorted(EMITTERS))})")
    if not MIN_OPSET <= opset <= onnx.defs.onnx_opset_version():
        raise ExportError(f"--opset must be in {MIN_OPSET}..{onnx.defs.onnx_opset_version()} "
                          f"(this onnx package's newest), got {opset}")
    algorithm = agents.get(algo)
    section = typed.build(algorithm.section, record["section"], f"{algo}.")
    spec = EnvSpec.from_description(record["env"])
    if spec.obs_dtype not in OBS_TYPES:
        raise ExportError(f"observations of dtype {spec.obs_dtype} have no ONNX input here")
    g, p = _Graph(opset), _Params(params)
    inputs = [helper.make_tensor_value_info("obs", OBS_TYPES[spec.obs_dtype],
                                            ["batch", *spec.obs_shape])]
    mask = None
    if spec.masked:
        inputs.append(helper.make_tensor_value_info("mask", TensorProto.BOOL,
                                                    ["batch", spec.action_dim]))
        mask = "mask"
    x = g.op("Cast", "obs", to=TensorProto.FLOAT)   # Policy.__call__: float32 observations
    action = EMITTERS[algo](g, p, section, spec, x, mask)
    if p.left():
        raise ExportError(f"the policy has parameters this exporter does not map "
                          f"({', '.join(p.left())}): not a feed-forward {algo} network")
    g.nodes.append(helper.make_node("Identity", [action], ["actions"]))
    outputs = [helper.make_tensor_value_info(
        "actions", TensorProto.FLOAT if spec.continuous else TensorProto.INT32,
        ["batch", spec.action_dim] if spec.continuous else ["batch"])]
    graph = helper.make_graph(g.nodes, f"{algo}_policy", inputs, outputs, g.inits)
    opsets = [helper.make_opsetid("", opset)]
    model = helper.make_model(graph, opset_imports=opsets, producer_name="jaxrl_dist",
                              ir_version=helper.find_min_ir_version_for(opsets),
                              doc_string=f"deterministic {algo} policy for {spec.name}")
    if metadata:
        helper.set_model_props(model, metadata)
    onnx.checker.check_model(model, full_check=True)
    return model


def spaces(spec: EnvSpec) -> dict[str, str]:
    """The observation and action spaces as the metadata records them (JSON strings)."""
    obs = {"shape": list(spec.obs_shape), "dtype": spec.obs_dtype}
    if spec.continuous:
        def bound(b):
            return None if b is None else np.asarray(b, np.float64).tolist()
        action = {"type": "box", "shape": [spec.action_dim], "dtype": "float32",
                  "low": bound(spec.action_low), "high": bound(spec.action_high)}
    else:
        action = {"type": "discrete", "n": spec.action_dim, "dtype": "int32",
                  "masked": spec.masked}
    return {"observation_space": json.dumps(obs), "action_space": json.dumps(action)}
