"""A policy as an ONNX graph, written layer by layer with ``onnx.helper``.

The graph is rebuilt from what a checkpoint records (the algorithm, its config section, the
observation and action specs) and the policy's parameter pytree, layer for layer as the
learner's flax modules compute it: PPO's actor (``agents/ppo/networks.py``: observation
normalisation, the input scale, ``MLP``, the categorical's masked argmax or the Gaussian mean,
tanh-squashed and clipped to the bounds) and the Q-network of DQN and PQN
(``agents/qnet/networks.py``: LayerNorm, a dueling head, the greedy argmax). A recurrent PPO
actor (``ppo.network.cell: gru | lstm``, ``RecurrentMLP``) is one step of it: the carry is an
input and the next carry an output (:func:`carry_layout`). Convolutions are
ONNX ``Conv`` in NCHW, whatever the trainer's CPU path computes them with (``agents.conv``:
im2col), with the padding flax derives for SAME or VALID. Every parameter must be used: a tree
with leaves this module does not map (a plug-in's network) is refused, not exported half.

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
from jaxrl_dist.agents.ppo.networks import tanh_bounds
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
    """[N, H, W, C] through ``convs`` (flax ``nn.Conv`` arguments, agents.torso; parameters
    ``{prefix}{i}``), each followed by ``after_conv`` on NHWC values, then flattened in flax's
    (H, W, C) order."""
    if not convs:
        return g.op("Flatten", x, axis=1) if len(obs_shape) != 1 else x
    size = np.asarray(obs_shape[:2])
    for i, layer in enumerate(convs):
        kernel = p.take(f"{prefix}{i}/kernel")                         # HWIO
        bias = p.take(f"{prefix}{i}/bias")
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


# The cells are written out in primitive ops (MatMul, Add, Sigmoid, Tanh, Mul, Sub), not as
# ONNX's GRU / LSTM operators: those differ from flax in conventions that matter here (ONNX GRU
# applies the reset gate before the recurrent matrix unless linear_before_reset=1, orders its
# gates z, r, h and keeps two bias vectors per gate; ONNX LSTM orders gates i, o, f, c and wants
# a sequence axis), and a primitive graph mirrors flax's equations term by term, which the
# parity check then proves.

def _matmul(g: _Graph, p: _Params, x: str, path: str, bias: bool) -> str:
    """flax ``Dense`` (or ``DenseParams``) ``path``: x @ kernel (+ bias when it has one)."""
    y = g.op("MatMul", x, g.const(p.take(f"{path}/kernel"), "kernel"))
    return g.op("Add", y, g.const(p.take(f"{path}/bias"), "bias")) if bias else y


def _gru(g: _Graph, p: _Params, x: str, carry: list[str], prefix: str
         ) -> tuple[str, list[str]]:
    """flax.linen.GRUCell (``{prefix}ir``, ``iz``, ``in`` with biases, ``hr``, ``hz`` without,
    ``hn`` with one; the reset gate multiplies W_hn h + b_hn)::

        r = sigmoid(W_ir x + b_ir + W_hr h)
        z = sigmoid(W_iz x + b_iz + W_hz h)
        n = tanh(W_in x + b_in + r * (W_hn h + b_hn))
        h' = (1 - z) * n + z * h                    (output and carry: h')
    """
    h, = carry
    r = g.op("Sigmoid", g.op("Add", _matmul(g, p, x, f"{prefix}ir", True),
                             _matmul(g, p, h, f"{prefix}hr", False)))
    z = g.op("Sigmoid", g.op("Add", _matmul(g, p, x, f"{prefix}iz", True),
                             _matmul(g, p, h, f"{prefix}hz", False)))
    n = g.op("Tanh", g.op("Add", _matmul(g, p, x, f"{prefix}in", True),
                          g.op("Mul", r, _matmul(g, p, h, f"{prefix}hn", True))))
    new_h = g.op("Add", g.op("Mul", g.op("Sub", g.const(1.0, "one"), z), n), g.op("Mul", z, h))
    return new_h, [new_h]


def _lstm(g: _Graph, p: _Params, x: str, carry: list[str], prefix: str
          ) -> tuple[str, list[str]]:
    """flax.linen.OptimizedLSTMCell, carry (c, h) (``{prefix}ii``, ``if``, ``ig``, ``io``
    without biases, ``hi``, ``hf``, ``hg``, ``ho`` with them)::

        i, f, o = sigmoid(W_h* h + b_h* + W_i* x),  g = tanh(W_hg h + b_hg + W_ig x)
        c' = f * c + i * g,  h' = o * tanh(c')      (output h'; carry (c', h'))
    """
    c, h = carry

    def gate(name: str, fn: str) -> str:
        return g.op(fn, g.op("Add", _matmul(g, p, h, f"{prefix}h{name}", True),
                             _matmul(g, p, x, f"{prefix}i{name}", False)))
    i, f, cand, o = (gate("i", "Sigmoid"), gate("f", "Sigmoid"), gate("g", "Tanh"),
                     gate("o", "Sigmoid"))
    new_c = g.op("Add", g.op("Mul", f, c), g.op("Mul", i, cand))
    new_h = g.op("Mul", o, g.op("Tanh", new_c))
    return new_h, [new_c, new_h]


CELLS = {"gru": (_gru, ("h",)), "lstm": (_lstm, ("c", "h"))}   # carry leaves, in flax's order


def carry_layout(record: dict[str, Any]) -> list[tuple[str, int]]:
    """The policy's carry as ``[(name, size)]`` in the order of its leaves (``Policy``'s carry
    flattened by ``jax.tree.leaves``): ``[("h", H)]`` for a GRU, ``[("c", H), ("h", H)]`` for an
    LSTM (flax's (c, h)), ``[]`` for a feed-forward policy. The ONNX inputs are ``{name}_in``
    [batch, size], the outputs ``{name}_out``."""
    if record["algo"] != "ppo":
        return []
    net = typed.build(agents.get("ppo").section, record["section"], "ppo.").network
    cell = getattr(net, "cell", "none")
    if cell == "none":
        return []
    if cell not in CELLS:
        raise ExportError(f"ppo.network.cell={cell} has no ONNX form here "
                          f"(exportable: none, {', '.join(CELLS)})")
    return [(name, int(net.cell_size)) for name in CELLS[cell][1]]


def _ppo(g: _Graph, p: _Params, section: Any, spec: EnvSpec, x: str, mask: str | None,
         carry: list[str]) -> tuple[str, list[str]]:
    """PPO's deployed policy (agents/ppo/learner.py ``policy``): the actor's mode on normalised
    observations, then the environment's action; a recurrent actor (``RecurrentMLP``: the
    torso, the cell, the head) also returns its next carry."""
    net = section.network
    cell = getattr(net, "cell", "none")
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
    if cell == "none":                       # MLP: compact names
        conv, dense, head = "actor/MLP_0/Conv_", "actor/MLP_0/Dense_", \
            f"actor/MLP_0/Dense_{len(net.actor_hidden)}"
    else:                                    # RecurrentMLP: setup() attribute names
        conv, dense, head = "actor/convs_", "actor/dense_", "actor/out"
    x = _torso(g, p, x, conv, conv_torso(net, spec.obs_shape), spec.obs_shape,
               lambda y: g.op("Relu", y))
    for i, _ in enumerate(net.actor_hidden):
        x = _activation(g, _dense(g, p, x, f"{dense}{i}"), net.activation)
    next_carry: list[str] = []
    if cell != "none":
        x, next_carry = CELLS[cell][0](g, p, x, carry, "actor/rnn/")
    out = _dense(g, p, x, head)
    if not spec.continuous:
        return _argmax(g, out, mask), next_carry
    p.take("actor/log_std")                  # the mode does not depend on it
    bounds = tanh_bounds(net, spec)
    if bounds is not None:                   # DiagGaussian.env_action: low + (tanh u + 1) h
        low, high = (np.asarray(b, np.float32) for b in bounds)
        half = np.float32(0.5) * (high - low)
        out = g.op("Add", g.const(low, "low"),
                   g.op("Mul", g.op("Add", g.op("Tanh", out), g.const(1.0)), g.const(half)))
    return _clip_to_bounds(g, out, spec), next_carry


def _q_network(g: _Graph, p: _Params, section: Any, spec: EnvSpec, x: str,
               mask: str | None, carry: list[str]) -> tuple[str, list[str]]:
    """DQN's and PQN's greedy policy (agents/qnet/networks.py ``QNetwork``, ``greedy``)."""
    net = section.network
    norms = itertools.count()   # flax numbers LayerNorm_i in creation order: convs first

    def norm(y: str) -> str:
        return _layer_norm(g, p, y, f"LayerNorm_{next(norms)}") if net.layer_norm else y

    scale = input_scale(spec.obs_dtype)
    if scale != 1.0:
        x = g.op("Mul", x, g.const(scale, "scale"))
    x = _torso(g, p, x, "Conv_", conv_torso(net, spec.obs_shape), spec.obs_shape,
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
    return _argmax(g, q, mask), []


EMITTERS = {"ppo": _ppo, "dqn": _q_network, "pqn": _q_network}
OBS_TYPES = {"float32": TensorProto.FLOAT, "uint8": TensorProto.UINT8}


def build_model(record: dict[str, Any], params: Any, opset: int,
                metadata: dict[str, str] | None = None) -> onnx.ModelProto:
    """The ONNX model of a checkpoint's policy: ``record`` is its ``meta["policy"]``
    (algorithm, config section, env spec), ``params`` ONE member's policy arrays.

    Inputs ``obs`` [batch, *obs_shape] (float32, or uint8 for uint8 frames) and, for tasks
    with action masks, ``mask`` [batch, A] (bool); output ``actions``: int32 [batch] for
    discrete actions, float32 [batch, A] for continuous ones, in the environment's units. A
    recurrent policy is one step: also inputs ``{name}_in`` and outputs ``{name}_out``, float32
    [batch, size], for each entry of :func:`carry_layout` (``h`` for a GRU; ``c``, ``h`` for an
    LSTM)."""
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
    layout = carry_layout(record)
    g, p = _Graph(opset), _Params(params)
    inputs = [helper.make_tensor_value_info("obs", OBS_TYPES[spec.obs_dtype],
                                            ["batch", *spec.obs_shape])]
    mask = None
    if spec.masked:
        inputs.append(helper.make_tensor_value_info("mask", TensorProto.BOOL,
                                                    ["batch", spec.action_dim]))
        mask = "mask"
    inputs += [helper.make_tensor_value_info(f"{name}_in", TensorProto.FLOAT, ["batch", size])
               for name, size in layout]
    x = g.op("Cast", "obs", to=TensorProto.FLOAT)   # Policy.__call__: float32 observations
    action, next_carry = EMITTERS[algo](g, p, section, spec, x, mask,
                                        [f"{name}_in" for name, _ in layout])
    if p.left():
        raise ExportError(f"the policy has parameters this exporter does not map "
                          f"({', '.join(p.left())}): not a {algo} network it knows")
    g.nodes.append(helper.make_node("Identity", [action], ["actions"]))
    outputs = [helper.make_tensor_value_info(
        "actions", TensorProto.FLOAT if spec.continuous else TensorProto.INT32,
        ["batch", spec.action_dim] if spec.continuous else ["batch"])]
    for (name, size), value in zip(layout, next_carry, strict=True):
        g.nodes.append(helper.make_node("Identity", [value], [f"{name}_out"]))
        outputs.append(helper.make_tensor_value_info(f"{name}_out", TensorProto.FLOAT,
                                                     ["batch", size]))
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


def carry_metadata(layout: list[tuple[str, int]], initial: list[Any]) -> dict[str, str]:
    """A recurrent policy's ``carry`` as the metadata records it (a JSON list, one entry per
    carry tensor in input order): its name, ONNX input and output, shape per environment,
    dtype, and the value an episode starts from (``initial``: ONE environment's carry leaves,
    recorded as ``"zeros"`` when all are 0, else as numbers). ``{}`` feed-forward."""
    if not layout:
        return {}
    if len(initial) != len(layout):
        raise ExportError(f"the policy's initial carry has {len(initial)} arrays, its cell "
                          f"{len(layout)}")
    entries = []
    for (name, size), value in zip(layout, initial):
        value = np.asarray(value, np.float32)
        if value.shape != (size,):
            raise ExportError(f"the policy's initial carry {name!r} has shape {value.shape}, "
                              f"its cell ({size},)")
        entries.append({"name": name, "input": f"{name}_in", "output": f"{name}_out",
                        "shape": [size], "dtype": "float32",
                        "initial": "zeros" if not value.any() else value.tolist()})
    return {"carry": json.dumps(entries)}
