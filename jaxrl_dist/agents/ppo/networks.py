"""PPO's actor and critic networks (flax): an observation torso (MLP, or a CNN for [H, W, C] grids
and images), optionally a recurrent cell (``network.cell``: GRU or LSTM), and a head that
returns an action distribution (:mod:`jaxrl_dist.distributions`).

Networks hold no RNG state and know nothing about sharding; parameters are one plain pytree
``{"actor": ..., "critic": ...}`` so the optimizer, checkpoints and fingerprints see one tree.

A recurrent network is replayed over sequences by ``Recurrent.unroll``: the torso, the head and
the cells' input projections run batched over every step, only the carries' matmuls run in the
``lax.scan``, and a step marked as an episode's start begins from a fresh carry BEFORE the cell
sees it (the rollout resets the carry after the step that ended the previous episode: the same
carries, in the same order). With ``network.shared`` the critic is only an output layer on the
actor's cell (one cell, as PureJaxRL's ``ppo_rnn``): one carry per environment and half the
recurrent work of separate networks.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_dist.agents import conv
from jaxrl_dist.agents.ppo.config import NetworkConfig
from jaxrl_dist.agents.torso import conv_torso, input_scale
from jaxrl_dist.distributions import Categorical, DiagGaussian
from jaxrl_dist.envs import EnvError, EnvSpec


def tanh_bounds(config: NetworkConfig, spec: EnvSpec):
    """(low, high) as hashable tuples when actions are squashed, else None (clipped)."""
    if config.bounded_actions != "tanh" or not spec.continuous or spec.action_low is None:
        return None
    low, high = (np.broadcast_to(np.asarray(b, np.float32), (spec.action_dim,))
                 for b in (spec.action_low, spec.action_high))
    if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
        return None
    return tuple(map(float, low)), tuple(map(float, high))


def _env_action(bounds) -> Callable[[jax.Array], jax.Array]:
    """A drawn action -> what the environment receives: squashed into ``bounds`` (tanh), or
    as is."""
    def env_action(action: jax.Array) -> jax.Array:
        if bounds is None:
            return action
        low, high = map(jnp.asarray, bounds)
        return DiagGaussian(action, action, low, high).env_action(action)
    return env_action


class MLP(nn.Module):
    """Optional 3x3 convolutions (``conv``, for [H, W, C] inputs), then dense layers. Weights
    are orthogonal (gain sqrt 2, the head ``out_scale``) or, with ``init="lecun"``, flax's
    default lecun-normal everywhere; biases start at 0 either way."""

    hidden: Sequence[int]
    out_dim: int
    activation: str
    out_scale: float
    conv: Sequence[dict] = ()      # nn.Conv arguments per layer (agents.torso)
    init: str = "orthogonal"
    scale: float = 1.0             # applied to the input first (1/255 for uint8 frames)

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        act = getattr(nn, self.activation)
        x = x.astype(jnp.float32)
        if self.scale != 1.0:
            x = x * self.scale

        def kernel(scale: float):
            if self.init == "lecun":
                return nn.initializers.lecun_normal()
            return nn.initializers.orthogonal(scale)

        for layer in self.conv:
            x = nn.relu(nn.Conv(**layer, kernel_init=kernel(np.sqrt(2)),
                                conv_general_dilated=conv.conv_general_dilated)(x))
        x = x.reshape(x.shape[0], -1)  # without convolutions, images are flattened
        for size in self.hidden:
            x = act(nn.Dense(size, kernel_init=kernel(np.sqrt(2)))(x))
        return nn.Dense(self.out_dim, kernel_init=kernel(self.out_scale))(x)


def _read(obs: jax.Array, inputs: tuple[int, int] | None) -> jax.Array:
    """The features ``inputs`` (start, stop) of flat observations (all with None)."""
    return obs if inputs is None else obs[..., inputs[0]:inputs[1]]


def inputs_of(config: NetworkConfig, spec: EnvSpec
              ) -> tuple[tuple[int, int] | None, tuple[int, int] | None]:
    """What the actor and the critic read of an observation: all of it, or with a central
    critic (``EnvSpec.policy_features``, MAPPO) the agent's own features and the global
    state after them."""
    k = spec.policy_features
    if k is None:
        return None, None
    if len(spec.obs_shape) != 1 or config.torso == "cnn":
        raise EnvError(f"{spec.name}: team.critic=central reads flat observations with an MLP "
                       f"torso; set team.critic: local, or ppo.network.torso: mlp")
    if config.cell != "none" and config.shared:
        raise EnvError("team.critic=central needs the critic's own cell (it reads the global "
                       "state, the actor the agent's observation): set ppo.network.shared: "
                       "false")
    return (0, k), (k, spec.obs_shape[0])


def _agent_of(obs: jax.Array, agents: int) -> jax.Array:
    """[B, agents]: each row's agent as a one-hot, from its one-hot index (the last ``agents``
    features, ``team.agent_ids``); by argmax, so normalised observations still name it (every
    agent is one row of every environment: the index columns share their moments)."""
    return jax.nn.one_hot(jnp.argmax(obs[..., -agents:], -1), agents, dtype=jnp.float32)


def _mlp(agents: int, obs: jax.Array, *args: Any) -> jax.Array:
    """``MLP(*args)`` on ``obs``; with ``agents`` (``EnvSpec.agent_networks``) one copy of it
    per agent (its parameters with a leading agent axis, flax's ``nn.vmap``; the same names),
    each row answered by its own agent's copy. Every copy runs on every row (A x the
    arithmetic of one, small beside a step for the MLPs teams use), which keeps the batch
    whole and the rows in any order (minibatches shuffle them)."""
    if not agents:
        return MLP(*args)(obs)
    many = nn.vmap(MLP, variable_axes={"params": 0}, split_rngs={"params": True},
                   in_axes=None, out_axes=0, axis_size=agents)
    outs = many(*args, name="MLP_0")(obs)                 # [A, B, out]
    return jnp.einsum("abk,ba->bk", outs, _agent_of(obs, agents))


class Actor(nn.Module):
    config: NetworkConfig
    action_dim: int
    continuous: bool
    conv: Sequence[dict] = ()
    scale: float = 1.0
    bounds: tuple[tuple[float, ...], tuple[float, ...]] | None = None   # (low, high) for tanh
    inputs: tuple[int, int] | None = None   # the observation's features it reads (a slice)
    agents: int = 0                          # per-agent parameters (EnvSpec.agent_networks)

    @nn.compact
    def __call__(self, obs: jax.Array) -> Categorical | DiagGaussian:
        obs = _read(obs, self.inputs)
        out = _mlp(self.agents, obs, self.config.actor_hidden, self.action_dim,
                   self.config.activation, 0.01, self.conv, self.config.init, self.scale)
        if not self.continuous:
            return Categorical(out)
        if self.agents:
            log_std = _agent_of(obs, self.agents) @ self.param(
                "log_std", nn.initializers.zeros, (self.agents, self.action_dim))
        else:
            log_std = self.param("log_std", nn.initializers.zeros, (self.action_dim,))
        low, high = (None, None) if self.bounds is None else map(jnp.asarray, self.bounds)
        return DiagGaussian(out, jnp.broadcast_to(log_std, out.shape), low, high)


class Critic(nn.Module):
    config: NetworkConfig
    conv: Sequence[dict] = ()
    scale: float = 1.0
    inputs: tuple[int, int] | None = None   # the observation's features it reads (a slice)
    agents: int = 0                          # per-agent parameters (EnvSpec.agent_networks)

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        obs = _read(obs, self.inputs)
        return _mlp(self.agents, obs, self.config.critic_hidden, 1, self.config.activation,
                    1.0, self.conv, self.config.init, self.scale)[:, 0]


class Networks(NamedTuple):
    """Pure functions over the parameter tree; observations are batched ``[B, *obs]``
    (feed-forward) or :class:`Sequences` (recurrent: ``policy`` and ``value`` replay them)."""

    init: Callable[[jax.Array], Any]
    policy: Callable[..., Categorical | DiagGaussian]   # (params, obs, mask=None)
    value: Callable[[Any, jax.Array], jax.Array]
    env_action: Callable[[jax.Array], jax.Array]   # a drawn action -> the environment's
                                                   #   (the tanh squash, if any; no params)
    recurrent: Recurrent | None = None             # the cell's own functions, if any
    forward: Callable[..., tuple[Any, jax.Array]] | None = None
    #   (params, obs, mask) -> (policy, value) in one pass, where that is cheaper than two


def make_networks(config: NetworkConfig, spec: EnvSpec) -> Networks:
    if config.cell != "none":
        return make_recurrent_networks(config, spec)
    conv = conv_torso(config, spec.obs_shape)
    bounds = tanh_bounds(config, spec)
    scale = input_scale(spec.obs_dtype)
    reads_actor, reads_critic = inputs_of(config, spec)
    agents = spec.agent_networks
    actor = Actor(config, spec.action_dim, spec.continuous, conv, scale, bounds, reads_actor,
                  agents)
    critic = Critic(config, conv, scale, reads_critic, agents)
    dummy = np.zeros((1, *spec.obs_shape), np.float32)

    def init(key: jax.Array) -> Any:
        key_actor, key_critic = jax.random.split(key)
        return {"actor": actor.init(key_actor, dummy)["params"],
                "critic": critic.init(key_critic, dummy)["params"]}

    def policy(params: Any, obs: jax.Array, mask: jax.Array | None = None
               ) -> Categorical | DiagGaussian:
        dist = actor.apply({"params": params["actor"]}, obs)
        return dist.masked(mask) if mask is not None else dist

    def value(params: Any, obs: jax.Array) -> jax.Array:
        return critic.apply({"params": params["critic"]}, obs)

    return Networks(init, policy, value, _env_action(bounds))


# --------------------------------------------------------------------------------------------
# Recurrent networks (network.cell: gru | lstm)


def _kernel(init: str, scale: float):
    return nn.initializers.lecun_normal() if init == "lecun" else nn.initializers.orthogonal(scale)


class RecurrentMLP(nn.Module):
    """:class:`MLP`'s layers with a recurrent cell between the hidden layers and the output
    layer (``head_hidden``: more hidden layers after the cell, before the output). The torso
    and the head are methods so a replay runs them batched over all steps; the cell's
    parameters are flax's (names and initialisers: lecun inputs, orthogonal
    recurrent kernels) and are stepped by :func:`cell_step`; ``log_std`` is the
    state-independent log std of a Gaussian actor (``log_std_dim`` > 0)."""

    hidden: Sequence[int]
    out_dim: int
    activation: str
    out_scale: float
    cell: str
    cell_size: int
    conv: Sequence[dict] = ()
    weights: str = "orthogonal"    # ``network.init`` (a module's ``init`` is flax's method)
    scale: float = 1.0
    log_std_dim: int = 0
    inputs: tuple[int, int] | None = None   # the observation's features it reads (a slice)
    head_hidden: Sequence[int] = ()
    head_gain: float = float(np.sqrt(2))

    def setup(self):
        self.convs = [nn.Conv(**layer, kernel_init=_kernel(self.weights, np.sqrt(2)),
                              conv_general_dilated=conv.conv_general_dilated)
                      for layer in self.conv]
        self.dense = [nn.Dense(size, kernel_init=_kernel(self.weights, np.sqrt(2)))
                      for size in self.hidden]
        self.rnn = (nn.GRUCell(self.cell_size) if self.cell == "gru"
                    else nn.OptimizedLSTMCell(self.cell_size))
        self.post = [nn.Dense(size, kernel_init=_kernel(self.weights, self.head_gain))
                     for size in self.head_hidden]
        self.out = nn.Dense(self.out_dim, kernel_init=_kernel(self.weights, self.out_scale))
        if self.log_std_dim:
            self.log_std = self.param("log_std", nn.initializers.zeros, (self.log_std_dim,))

    def encode(self, x: jax.Array) -> jax.Array:
        """[B, *obs] -> [B, F]: the torso and hidden layers (no state)."""
        act = getattr(nn, self.activation)
        x = _read(x, self.inputs)
        x = x.astype(jnp.float32)
        if self.scale != 1.0:
            x = x * self.scale
        for layer in self.convs:
            x = nn.relu(layer(x))
        x = x.reshape(x.shape[0], -1)
        for layer in self.dense:
            x = act(layer(x))
        return x

    def head(self, y: jax.Array) -> jax.Array:
        return self.out(_hidden(self.post, self.activation, y))

    def std(self) -> jax.Array:
        return self.log_std

    def __call__(self, carry: Any, x: jax.Array) -> tuple[Any, jax.Array]:
        carry, y = self.rnn(carry, self.encode(x))   # creates the parameters (``init``)
        return carry, self.head(y)


class ValueHead(nn.Module):
    """The critic's hidden layers (``head_hidden``) and output layer on the actor's cell
    outputs (``network.shared``)."""

    weights: str = "orthogonal"
    head_hidden: Sequence[int] = ()
    activation: str = "tanh"
    head_gain: float = float(np.sqrt(2))

    def setup(self):
        self.post = [nn.Dense(size, kernel_init=_kernel(self.weights, self.head_gain))
                     for size in self.head_hidden]
        self.out = nn.Dense(1, kernel_init=_kernel(self.weights, 1.0))

    def __call__(self, y: jax.Array) -> jax.Array:
        return self.out(_hidden(self.post, self.activation, y))


def _hidden(layers: Sequence[nn.Dense], activation: str, y: jax.Array) -> jax.Array:
    """``layers`` each followed by ``activation`` (a head's layers after the cell)."""
    act = getattr(nn, activation)
    for layer in layers:
        y = act(layer(y))
    return y


class FusedCell(NamedTuple):
    """A GRU's or LSTM's weights with the gates side by side: one matmul on the inputs and one
    on the carry per step instead of one per gate (flax's ``GRUCell`` runs six)."""

    w_in: jax.Array    # [F, G*H]
    b_in: jax.Array    # [G*H]
    w_h: jax.Array     # [H, G*H]
    b_h: jax.Array     # [G*H]


_GATES = {"gru": "rzn", "lstm": "ifgo"}


def fuse_cell(cell: str, p: Any) -> FusedCell:
    """flax's parameters of ``nn.GRUCell`` / ``nn.OptimizedLSTMCell`` (``p``: the cell's
    subtree; names and initialisers stay flax's, so checkpoints are unchanged) as one
    :class:`FusedCell`. GRU: biases on the inputs and on ``hn`` (kept apart: ``r`` scales it);
    LSTM: biases on the carry."""
    gates = _GATES[cell]
    h = p[f"h{gates[0]}"]["kernel"].shape[0]
    zeros = jnp.zeros((h,), jnp.float32)

    def bias(prefix: str, gate: str) -> jax.Array:
        return p[f"{prefix}{gate}"].get("bias", zeros)

    return FusedCell(
        jnp.concatenate([p[f"i{g}"]["kernel"] for g in gates], -1),
        jnp.concatenate([bias("i", g) for g in gates]),
        jnp.concatenate([p[f"h{g}"]["kernel"] for g in gates], -1),
        jnp.concatenate([bias("h", g) for g in gates]))


def cell_step(cell: str, w: FusedCell, carry: Any, projected: jax.Array) -> tuple[Any, jax.Array]:
    """One step of the cell from its input projection ``projected`` = x @ w_in + b_in (which
    does not depend on the carry, so a replay computes it for every step before the scan and
    only the carry's matmul stays inside). The math is flax's cells' (``GRUCell``,
    ``OptimizedLSTMCell``), gate for gate."""
    if cell == "gru":
        h = carry
        xr, xz, xn = jnp.split(projected, 3, -1)
        hr, hz, hn = jnp.split(h @ w.w_h + w.b_h, 3, -1)
        r = jax.nn.sigmoid(xr + hr)
        z = jax.nn.sigmoid(xz + hz)
        n = jnp.tanh(xn + r * hn)
        h = (1.0 - z) * n + z * h
        return h, h
    c, h = carry
    i, f, g, o = jnp.split(projected + h @ w.w_h + w.b_h, 4, -1)
    c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
    h = jax.nn.sigmoid(o) * jnp.tanh(c)
    return (c, h), h


class Sequences(NamedTuple):
    """What a recurrent network replays: time-major steps and each sequence's first carry."""

    obs: jax.Array     # [L, B, *obs] (normalised as the networks see them)
    start: jax.Array   # [L, B] bool: the step begins an episode (the carry starts fresh)
    carry: Any         # {"actor": [B, ...], "critic": [B, ...]}: the carry before step 0


class Recurrent(NamedTuple):
    """A recurrent network pair's step functions; the carries of actor and critic have the
    same structure (:attr:`init_carry`: ONE environment's, zeros)."""

    init_carry: Callable[[], Any]
    policy_step: Callable[..., tuple[Any, Any]]
    #   (params, carry [B], obs [B, *obs], mask | None) -> (dist [B], carry)
    unroll: Callable[..., tuple[dict, dict | None]]
    #   (params, {name: carry [B]}, obs [L, B, *obs], start [L, B], keep_carries=False) ->
    #   ({name: outputs [L, B, out]}, {name: carries after each step [L, B, ...]} or None),
    #   names "actor"/"critic": the outputs wanted, stepped together in ONE scan (with
    #   ``network.shared`` both come from the actor's cell, stepped from the first carry given)
    value_step: Callable[[Any, Any, jax.Array], jax.Array]
    #   (params, critic carry [B], obs [B, *obs]) -> value [B]: one step from given carries


def reset_carry(start: jax.Array, initial: Any, carry: Any) -> Any:
    """``carry`` [*S, ...] with the entries whose ``start`` [*S] is set replaced by
    ``initial`` (ONE environment's carry)."""
    def pick(c0, c):
        return jnp.where(start.reshape(*start.shape, *(1,) * (c.ndim - start.ndim)), c0, c)
    return jax.tree.map(pick, initial, carry)


def make_recurrent_networks(config: NetworkConfig, spec: EnvSpec) -> Networks:
    if spec.agent_networks:
        raise EnvError(f"{spec.name}: team.parameters=per_agent runs feed-forward networks; "
                       f"with ppo.network.cell={config.cell} set team.parameters: shared (the "
                       f"agent's index, team.agent_ids, still tells the agents apart)")
    conv = conv_torso(config, spec.obs_shape)
    bounds = tanh_bounds(config, spec)
    scale = input_scale(spec.obs_dtype)
    cell = dict(cell=config.cell, cell_size=config.cell_size, conv=conv, weights=config.init,
                scale=scale, head_hidden=config.head_hidden, head_gain=config.head_gain)
    shared = config.shared
    reads_actor, reads_critic = inputs_of(config, spec)
    modules = {
        "actor": RecurrentMLP(config.actor_hidden, spec.action_dim, config.activation, 0.01,
                              log_std_dim=spec.action_dim if spec.continuous else 0,
                              inputs=reads_actor, **cell),
        "critic": (ValueHead(config.init, config.head_hidden, config.activation,
                             config.head_gain) if shared else
                   RecurrentMLP(config.critic_hidden, 1, config.activation, 1.0,
                                inputs=reads_critic, **cell))}
    dummy = np.zeros((1, *spec.obs_shape), np.float32)

    def cell_of(name: str) -> str:
        """The network whose torso and cell ``name``'s output is computed from."""
        return "actor" if shared else name

    def init_carry() -> Any:
        h = jnp.zeros((config.cell_size,), jnp.float32)
        return h if config.cell == "gru" else (h, h)   # LSTM: (c, h)

    def batched_carry(n: int) -> Any:
        return jax.tree.map(lambda x: jnp.broadcast_to(x, (n, *x.shape)), init_carry())

    def init(key: jax.Array) -> Any:
        key_actor, key_critic = jax.random.split(key)
        params = {"actor": modules["actor"].init(key_actor, batched_carry(1), dummy)["params"]}
        critic_input = (jnp.zeros((1, config.cell_size), jnp.float32),) if shared else (
            batched_carry(1), dummy)
        params["critic"] = modules["critic"].init(key_critic, *critic_input)["params"]
        return params

    def apply(params: Any, name: str, method: Any, *args: Any) -> Any:
        return modules[name].apply({"params": params[name]}, *args, method=method)

    def head(params: Any, name: str, y: jax.Array) -> jax.Array:
        """``name``'s output layer on cell outputs ``y`` [B, cell_size]."""
        module = modules[name]
        return apply(params, name, module.head if isinstance(module, RecurrentMLP) else None, y)

    def distribution(params: Any, out: jax.Array, mask: jax.Array | None):
        if not spec.continuous:
            dist = Categorical(out)
            return dist.masked(mask) if mask is not None else dist
        log_std = apply(params, "actor", RecurrentMLP.std)
        low, high = (None, None) if bounds is None else map(jnp.asarray, bounds)
        return DiagGaussian(out, jnp.broadcast_to(log_std, out.shape), low, high)

    def one_step(params: Any, name: str, carry: Any, obs: jax.Array) -> tuple[Any, jax.Array]:
        """One step of network ``name`` on [B, *obs] (the rollout's, the bootstrap's): the
        same fused cell as :func:`unroll`'s, so acting and replaying agree."""
        trunk = cell_of(name)
        w = fuse_cell(config.cell, params[trunk]["rnn"])
        features = apply(params, trunk, RecurrentMLP.encode, obs)
        carry, y = cell_step(config.cell, w, carry, features @ w.w_in + w.b_in)
        return carry, head(params, name, y)

    def policy_step(params: Any, carry: Any, obs: jax.Array, mask: jax.Array | None = None):
        carry, out = one_step(params, "actor", carry, obs)
        return distribution(params, out, mask), carry

    def unroll(params: Any, carry: dict[str, Any], obs: jax.Array, start: jax.Array,
               keep_carries: bool = False):
        L, B = start.shape
        flat = obs.reshape(L * B, *obs.shape[2:])
        outputs = list(carry)   # shared: one cell, stepped from the first carry given
        carry = {cell_of(name): c for name, c in reversed(carry.items())}
        cells = {name: fuse_cell(config.cell, params[name]["rnn"]) for name in carry}
        projected = {name: (apply(params, name, RecurrentMLP.encode, flat) @ w.w_in + w.b_in
                            ).reshape(L, B, -1) for name, w in cells.items()}
        initial = init_carry()

        def step(carry, xs):
            x, s = xs
            stepped = {name: cell_step(config.cell, cells[name], reset_carry(s, initial, c),
                                       x[name])
                       for name, c in carry.items()}
            carry = {name: c for name, (c, _) in stepped.items()}
            ys = {name: y for name, (_, y) in stepped.items()}
            return carry, (ys, carry if keep_carries else None)

        _, (ys, carries) = jax.lax.scan(step, carry, (projected, start))
        out = {name: head(params, name, ys[cell_of(name)].reshape(L * B, -1)).reshape(L, B, -1)
               for name in outputs}
        if carries is not None:
            carries = {name: carries[cell_of(name)] for name in outputs}
        return out, carries

    def value_step(params: Any, carry: Any, obs: jax.Array) -> jax.Array:
        return one_step(params, "critic", carry, obs)[1][:, 0]

    def policy(params: Any, seq: Sequences, mask: jax.Array | None = None):
        out, _ = unroll(params, {"actor": seq.carry["actor"]}, seq.obs, seq.start)
        return distribution(params, out["actor"], mask)

    def value(params: Any, seq: Sequences) -> jax.Array:
        out, _ = unroll(params, {"critic": seq.carry[cell_of("critic")]}, seq.obs, seq.start)
        return out["critic"][..., 0]

    def forward(params: Any, seq: Sequences, mask: jax.Array | None = None):
        carries = {name: seq.carry[cell_of(name)] for name in ("actor", "critic")}
        out, _ = unroll(params, carries, seq.obs, seq.start)   # both outputs in one scan
        return distribution(params, out["actor"], mask), out["critic"][..., 0]

    return Networks(init, policy, value, _env_action(bounds),
                    Recurrent(init_carry, policy_step, unroll, value_step), forward)
