"""A policy as an ONNX graph, written op by op with ``onnx.helper``: the builder every
algorithm's emitter calls, and the model around what it emits.

No algorithm is named here. An algorithm that exports names an emitter in its registry record
(``Algorithm(export="module:function")``, imported when an export starts, as ``make`` is when
a run starts): ``(section, spec) -> Emitter``, living beside the networks it mirrors
(``agents/ppo/export.py``, ``agents/qnet/export.py``). It writes the graph of the record's
``policy`` layer for layer from the checkpoint's parameter tree with this module's public
helpers: :class:`Graph` (ops, constants, and the parameters, each handed out once),
:func:`dense`, :func:`mlp`, :func:`layer_norm`, :func:`batch_norm`, :func:`activation`,
:func:`conv_torso`,
:func:`scale_input`, :func:`normalize_observations`, the cells :func:`gru` and :func:`lstm`,
:func:`argmax`, :func:`clip_to_bounds`. :func:`build_model` adds the inputs, outputs and
metadata, and refuses a tree with parameters the emitter did not use: never half a network.

Convolutions are ONNX ``Conv`` in NCHW, whatever the trainer's CPU path computes them with
(``agents.conv``: im2col), with the padding flax derives for SAME or VALID. Opset 17 and later
write ``LayerNormalization``; opset 11 to 16 the same statistics from primitive ops, as flax
computes them (``E[x^2] - E[x]^2``, clamped at 0).
"""

from __future__ import annotations

import json
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np
import onnx
from jax import lax
from onnx import TensorProto, helper, numpy_helper

from jaxrl_dist import agents, typed
from jaxrl_dist.agents.torso import input_scale
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


class Graph:
    """The nodes and initialisers of one graph, with fresh names (``op`` returns its output's
    name), and the policy's parameter tree as ``{"a/b/kernel": array}``: ``param`` hands each
    out once, so ``unused`` names whatever the emitter did not map."""

    def __init__(self, opset: int, params: Any):
        self.opset, self.nodes, self.inits, self._count = opset, [], [], 0
        self.params: dict[str, np.ndarray] = {}

        def walk(prefix: str, node: Any) -> None:
            if isinstance(node, dict):
                for key, child in node.items():
                    walk(f"{prefix}/{key}" if prefix else str(key), child)
            else:
                self.params[prefix] = np.asarray(node, np.float32)
        walk("", params)

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

    def param(self, path: str) -> np.ndarray:
        """The parameter at ``path`` (``"actor/Dense_0/kernel"``), taken out of the tree."""
        if path not in self.params:
            raise ExportError(f"the policy's parameters have no {path!r} (found "
                              f"{', '.join(sorted(self.params))}): not a network this "
                              f"exporter maps")
        return self.params.pop(path)

    def unused(self) -> list[str]:
        return sorted(self.params)


def dense(g: Graph, x: str, path: str, bias: bool = True) -> str:
    """flax ``Dense`` ``path``: x @ kernel (+ bias; a cell's bias-free projections without)."""
    y = g.op("MatMul", x, g.const(g.param(f"{path}/kernel"), "kernel"))
    return g.op("Add", y, g.const(g.param(f"{path}/bias"), "bias")) if bias else y


def layer_norm(g: Graph, x: str, path: str) -> str:
    """flax's LayerNorm over the last axis: (x - mean) * (rsqrt(var + eps) * scale) + bias."""
    scale, bias = g.const(g.param(f"{path}/scale"), "scale"), g.const(g.param(f"{path}/bias"),
                                                                      "bias")
    if g.opset >= LAYER_NORM_OPSET:
        return g.op("LayerNormalization", x, scale, bias, axis=-1, epsilon=LAYER_NORM_EPS)
    mean = g.reduce_mean(x, -1)
    mean_sq = g.reduce_mean(g.op("Mul", x, x), -1)
    var = g.op("Max", g.op("Sub", mean_sq, g.op("Mul", mean, mean)), g.const(0.0, "zero"))
    inv = g.op("Reciprocal", g.op("Sqrt", g.op("Add", var, g.const(LAYER_NORM_EPS, "eps"))))
    return g.op("Add", g.op("Mul", g.op("Sub", x, mean), g.op("Mul", inv, scale)), bias)


def batch_norm(g: Graph, x: str, path: str, stats: str, eps: float) -> str:
    """A batch normalisation in eval mode (flax's BatchNorm, CrossQ's batch renormalisation):
    per feature, (x - mean) * (scale * rsqrt(var + eps)) + bias, with the running statistics
    ``{stats}/mean``, ``{stats}/var`` and the parameters ``{path}/scale``, ``{path}/bias``."""
    mean = g.const(g.param(f"{stats}/mean"), "bn_mean")
    var = g.const(g.param(f"{stats}/var"), "bn_var")
    inv = g.op("Reciprocal", g.op("Sqrt", g.op("Add", var, g.const(eps, "bn_eps"))))
    mul = g.op("Mul", g.const(g.param(f"{path}/scale"), "bn_scale"), inv)
    return g.op("Add", g.op("Mul", g.op("Sub", x, mean), mul),
                g.const(g.param(f"{path}/bias"), "bn_bias"))


def activation(g: Graph, x: str, name: str) -> str:
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


def mlp(g: Graph, x: str, paths: Sequence[str], act: str,
        after_dense: Callable[[str], str] | None = None) -> str:
    """Hidden layers: ``act(after_dense(dense(x)))`` for each ``Dense`` in ``paths``
    (``after_dense``: e.g. a LayerNorm; none by default)."""
    for path in paths:
        y = dense(g, x, path)
        x = activation(g, after_dense(y) if after_dense is not None else y, act)
    return x


def conv_torso(g: Graph, x: str, prefix: str, convs: Sequence[dict],
               obs_shape: Sequence[int], after_conv: Callable[[str], str]) -> str:
    """[N, H, W, C] through ``convs`` (flax ``nn.Conv`` arguments, ``agents.torso``;
    parameters ``{prefix}{i}``), each followed by ``after_conv`` on NHWC values, then
    flattened in flax's (H, W, C) order; without convs, observations of more than one axis
    are flattened."""
    if not convs:
        return g.op("Flatten", x, axis=1) if len(obs_shape) != 1 else x
    size = np.asarray(obs_shape[:2])
    for i, layer in enumerate(convs):
        kernel = g.param(f"{prefix}{i}/kernel")                         # HWIO
        bias = g.param(f"{prefix}{i}/bias")
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


def scale_input(g: Graph, x: str, obs_dtype: str) -> str:
    """``agents.torso.input_scale``: uint8 frames times 1/255, other inputs as they are."""
    scale = input_scale(obs_dtype)
    return g.op("Mul", x, g.const(scale, "scale")) if scale != 1.0 else x


def normalize_observations(g: Graph, x: str, path: str) -> str:
    """``running_stats.normalize`` by the moments ``{path}/mean`` and ``{path}/var``:
    (x - mean) / sqrt(var + 1e-8), clipped to +-10."""
    mean = g.const(g.param(f"{path}/mean"), "obs_mean")
    std = g.op("Sqrt", g.op("Add", g.const(g.param(f"{path}/var"), "obs_var"),
                            g.const(OBS_NORM_EPS)))
    return g.op("Clip", g.op("Div", g.op("Sub", x, mean), std),
                g.const(-OBS_NORM_CLIP), g.const(OBS_NORM_CLIP))


def argmax(g: Graph, scores: str, mask: str | None) -> str:
    """The first maximal legal action, as int32 (jnp.argmax's dtype)."""
    if mask is not None:
        scores = g.op("Where", mask, scores, g.const(MASKED_LOGIT, "masked"))
    return g.op("Cast", g.op("ArgMax", scores, axis=-1, keepdims=0), to=TensorProto.INT32)


def clip_to_bounds(g: Graph, x: str, spec: EnvSpec) -> str:
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

def gru(g: Graph, x: str, carry: list[str], prefix: str) -> tuple[str, list[str]]:
    """flax.linen.GRUCell (``{prefix}ir``, ``iz``, ``in`` with biases, ``hr``, ``hz`` without,
    ``hn`` with one; the reset gate multiplies W_hn h + b_hn)::

        r = sigmoid(W_ir x + b_ir + W_hr h)
        z = sigmoid(W_iz x + b_iz + W_hz h)
        n = tanh(W_in x + b_in + r * (W_hn h + b_hn))
        h' = (1 - z) * n + z * h                    (output and carry: h')
    """
    h, = carry
    r = g.op("Sigmoid", g.op("Add", dense(g, x, f"{prefix}ir"),
                             dense(g, h, f"{prefix}hr", bias=False)))
    z = g.op("Sigmoid", g.op("Add", dense(g, x, f"{prefix}iz"),
                             dense(g, h, f"{prefix}hz", bias=False)))
    n = g.op("Tanh", g.op("Add", dense(g, x, f"{prefix}in"),
                          g.op("Mul", r, dense(g, h, f"{prefix}hn"))))
    new_h = g.op("Add", g.op("Mul", g.op("Sub", g.const(1.0, "one"), z), n), g.op("Mul", z, h))
    return new_h, [new_h]


def lstm(g: Graph, x: str, carry: list[str], prefix: str) -> tuple[str, list[str]]:
    """flax.linen.OptimizedLSTMCell, carry (c, h) (``{prefix}ii``, ``if``, ``ig``, ``io``
    without biases, ``hi``, ``hf``, ``hg``, ``ho`` with them)::

        i, f, o = sigmoid(W_h* h + b_h* + W_i* x),  g = tanh(W_hg h + b_hg + W_ig x)
        c' = f * c + i * g,  h' = o * tanh(c')      (output h'; carry (c', h'))
    """
    c, h = carry

    def gate(name: str, fn: str) -> str:
        return g.op(fn, g.op("Add", dense(g, h, f"{prefix}h{name}"),
                             dense(g, x, f"{prefix}i{name}", bias=False)))
    i, f, cand, o = (gate("i", "Sigmoid"), gate("f", "Sigmoid"), gate("g", "Tanh"),
                     gate("o", "Sigmoid"))
    new_c = g.op("Add", g.op("Mul", f, c), g.op("Mul", i, cand))
    new_h = g.op("Mul", o, g.op("Tanh", new_c))
    return new_h, [new_c, new_h]


# flax's cells by name: the step, and the carry's leaves in flax's order
CELLS = {"gru": (gru, ("h",)), "lstm": (lstm, ("c", "h"))}


class Emitter(NamedTuple):
    """What an algorithm's ``export`` factory returns for a (section, spec): the graph of its
    ``policy``, one step of it for a recurrent policy."""

    emit: Callable[..., tuple[str, list[str]]]
    #   (g: Graph, obs: float32 [batch, *obs], mask: bool [batch, A] | None, carry: [name of
    #   each carry input]) -> (actions in the environment's units, [next carry, same order])
    carry: tuple[tuple[str, int], ...] = ()
    #   the policy's carry as (name, size) per leaf, in ``jax.tree.leaves`` order of its
    #   ``init_carry()``; () for a feed-forward policy


def emitter(record: dict[str, Any]) -> Emitter:
    """The emitter of a checkpoint's policy (``meta["policy"]``: algorithm, section, env),
    from the algorithm's registry record."""
    algo = record["algo"]
    algorithm = agents.get(algo)
    make = algorithm.emitter_factory()
    if make is None:
        raise ExportError(f"algorithm '{algo}' has no ONNX emitter: give its Algorithm record "
                          f"export='module:function' (see agents/ppo/export.py)")
    section = typed.build(algorithm.section, record["section"], f"{algo}.")
    return make(section, EnvSpec.from_description(record["env"]))


def carry_layout(record: dict[str, Any]) -> list[tuple[str, int]]:
    """The policy's carry as ``[(name, size)]`` in the order of its leaves (``[]``
    feed-forward): the ONNX inputs are ``{name}_in`` [batch, size], the outputs
    ``{name}_out``."""
    return list(emitter(record).carry)


OBS_TYPES = {"float32": TensorProto.FLOAT, "uint8": TensorProto.UINT8}


def build_model(record: dict[str, Any], params: Any, opset: int,
                metadata: dict[str, str] | None = None) -> onnx.ModelProto:
    """The ONNX model of a checkpoint's policy: ``record`` is its ``meta["policy"]``
    (algorithm, config section, env spec), ``params`` ONE member's policy arrays.

    Inputs ``obs`` [batch, *obs_shape] (float32, or uint8 for uint8 frames) and, for tasks
    with action masks, ``mask`` [batch, A] (bool); output ``actions``: int32 [batch] for
    discrete actions, float32 [batch, A] for continuous ones, in the environment's units. A
    recurrent policy is one step: also inputs ``{name}_in`` and outputs ``{name}_out``, float32
    [batch, size], for each entry of the emitter's carry (``h`` for a GRU; ``c``, ``h`` for an
    LSTM)."""
    algo = record["algo"]
    em = emitter(record)
    if not MIN_OPSET <= opset <= onnx.defs.onnx_opset_version():
        raise ExportError(f"--opset must be in {MIN_OPSET}..{onnx.defs.onnx_opset_version()} "
                          f"(this onnx package's newest), got {opset}")
    spec = EnvSpec.from_description(record["env"])
    if spec.obs_dtype not in OBS_TYPES:
        raise ExportError(f"observations of dtype {spec.obs_dtype} have no ONNX input here")
    g = Graph(opset, params)
    inputs = [helper.make_tensor_value_info("obs", OBS_TYPES[spec.obs_dtype],
                                            ["batch", *spec.obs_shape])]
    mask = None
    if spec.masked:
        inputs.append(helper.make_tensor_value_info("mask", TensorProto.BOOL,
                                                    ["batch", spec.action_dim]))
        mask = "mask"
    inputs += [helper.make_tensor_value_info(f"{name}_in", TensorProto.FLOAT, ["batch", size])
               for name, size in em.carry]
    x = g.op("Cast", "obs", to=TensorProto.FLOAT)   # Policy.__call__: float32 observations
    action, next_carry = em.emit(g, x, mask, [f"{name}_in" for name, _ in em.carry])
    if g.unused():
        raise ExportError(f"the policy has parameters this exporter does not map "
                          f"({', '.join(g.unused())}): not a {algo} network it knows")
    g.nodes.append(helper.make_node("Identity", [action], ["actions"]))
    outputs = [helper.make_tensor_value_info(
        "actions", TensorProto.FLOAT if spec.continuous else TensorProto.INT32,
        ["batch", spec.action_dim] if spec.continuous else ["batch"])]
    for (name, size), value in zip(em.carry, next_carry, strict=True):
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
