"""SAC, TD3 and CrossQ: the squashed Gaussian's log-density, entropy tuning, the global-mean
gradient of every loss, CrossQ's batch renormalisation (statistics of the global batch, their
gradient), the same parameters on 1 and 2 devices (CrossQ: 1, 2 and 4; an environment inside
the program and a host one), kill -9 and --resume (the buffer and CrossQ's running statistics
in the checkpoint), 2 processes through the launcher, and bad input in one line."""

import json
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from helpers import CLI_RUN, CROSSQ, CROSSQ_CLI_RUN, SAC, TD3, max_rel_diff, params_of, \
    run_launcher, summaries, train_cli, train_in_process, write_config
from jaxrl_dist import compile_cache
from jaxrl_dist import config as config_lib
from jaxrl_dist import sharding
from jaxrl_dist import sizes as sizes_lib
from jaxrl_dist.agents.offpolicy import crossq as crossq_lib, parts, sac as sac_lib
from jaxrl_dist.agents.offpolicy import td3 as td3_lib
from jaxrl_dist.agents.offpolicy import renorm as renorm_lib
from jaxrl_dist.agents.offpolicy.config import CrossQNetworkConfig, NetworkConfig
from jaxrl_dist.agents.offpolicy import networks as networks_lib
from jaxrl_dist.config import ConfigError
from jaxrl_dist.distributions import TanhGaussian
from jaxrl_dist.envs import EnvError, EnvSpec, make_env
from jaxrl_dist.gradients import global_mean_grad
from jaxrl_dist.programs import make_learner
from jaxrl_dist.sharding import DATA_AXIS, REPLICATED, SHARDED
from jaxrl_dist.trainer import train



def _config(base, **section):
    algo = base["algo"]
    return config_lib.from_dict({**base, algo: {**base[algo], **section}})


# ------------------------------------------------------------------------------------- math

@pytest.mark.timeout(60)
def test_squashed_log_prob_is_the_change_of_variables():
    """log p(tanh u) = log N(u) - log(1 - tanh(u)^2) summed over dimensions, computed here in
    float64 the plain way (including u far in the tails, where 1 - tanh^2 underflows in
    float32 but the learner's form stays exact); and the 1-D density integrates to 1."""
    rng = np.random.default_rng(0)
    mean = rng.normal(size=(5, 3)) * 2
    log_std = rng.uniform(-2, 1, size=(5, 3))
    normal = rng.normal(size=(5, 3))
    normal[0, 0] = 12.0 / np.exp(log_std[0, 0])        # u far out: tanh(u) = 1 in float32
    a, log_prob = TanhGaussian(jnp.asarray(mean, jnp.float32),
                               jnp.asarray(log_std, jnp.float32)).sample_and_log_prob(
        jnp.asarray(normal, jnp.float32))
    u = mean + np.exp(log_std) * normal
    gaussian = -0.5 * normal**2 - log_std - 0.5 * np.log(2 * np.pi)
    # log(1 - tanh(u)^2) = log(4) - 2 log(e^u + e^-u)  (float64, no cancellation)
    expected = np.sum(gaussian - np.log(4.0) + 2 * np.logaddexp(u, -u), axis=1)
    assert np.allclose(expected[1:], np.sum(gaussian - np.log(1 - np.tanh(u) ** 2), 1)[1:])
    np.testing.assert_allclose(np.asarray(a), np.tanh(u), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(np.asarray(log_prob), expected, rtol=1e-5, atol=1e-4)
    # the density of a = tanh(u) on (-1, 1): its integral is 1
    grid = np.linspace(-1 + 1e-7, 1 - 1e-7, 400_001)
    u_grid = np.arctanh(grid)
    dist = TanhGaussian(jnp.float32([[0.7]]), jnp.float32([[-0.3]]))
    z = (u_grid - 0.7) / np.exp(-0.3)
    _, lp = dist.sample_and_log_prob(jnp.asarray(z[:, None], jnp.float32))
    assert abs(np.trapezoid(np.exp(np.asarray(lp, np.float64)), grid) - 1.0) < 1e-3
    np.testing.assert_allclose(np.asarray(dist.mode()), np.tanh([[0.7]]), rtol=1e-6)


def _nets(algo):
    """Small networks for Pendulum's spaces, and their initial parameters (jitted, with the
    programs' unrolled threefry: one quick compile, not one per op)."""
    spec = make_env("Pendulum-v1")
    make = {"sac": networks_lib.gaussian_networks, "td3": networks_lib.deterministic_networks}
    nets = make[algo](NetworkConfig(actor_hidden=(16,), critic_hidden=(16, 16)), spec)
    with compile_cache.unrolled_threefry():
        params = jax.jit(lambda k: {"actor": nets.init_actor(jax.random.fold_in(k, 0)),
                                    "critic": nets.init_critic(jax.random.fold_in(k, 1))})(
            jax.random.PRNGKey(0))
    return nets, params


class _ScaledRewards:
    """Pendulum's gymnax adapter with its rewards multiplied in the environment."""

    def __init__(self, adapter, scale):
        self.adapter, self.scale = adapter, scale

    def reset(self, key):
        return self.adapter.reset(key)

    def step(self, key, state, action):
        out = self.adapter.step(key, state, action)
        return out._replace(reward=out.reward * self.scale)


@pytest.mark.timeout(300)
def test_reward_scale_is_rewards_scaled_in_the_environment():
    """sac.reward_scale (Brax's reward_scaling) multiplies the sampled rewards: the same
    parameters as rewards scaled by the environment itself, other parameters than unscaled."""
    import dataclasses

    def run(config, spec):
        state, _ = train_in_process(config, 1, spec)
        return sharding.to_host(state.train.params)

    spec = make_env("Pendulum-v1")
    base = dict(SAC, total_timesteps=4 * 2 * 40, updates_per_call=40)   # 40 updates, one call
    scaled = run(config_lib.from_dict({**base, "sac": dict(SAC["sac"], reward_scale=3.0)}), spec)
    env_scaled = run(config_lib.from_dict(base), dataclasses.replace(
        spec, adapter=_ScaledRewards(spec.adapter, 3.0)))
    plain = run(config_lib.from_dict(base), spec)
    assert max_rel_diff(scaled, env_scaled) <= 1e-5
    assert max_rel_diff(scaled, plain) > 1e-3
    with pytest.raises(ConfigError, match="reward_scale must be > 0"):
        config_lib.from_dict({**base, "sac": dict(SAC["sac"], reward_scale=0.0)})


@pytest.mark.timeout(120)
def test_entropy_tuning_moves_alpha_toward_the_target():
    """The alpha part of SAC's actor loss: below the target entropy log(alpha) grows, above it
    shrinks, and its gradient is -(mean log pi + target) exactly; the actor's gradient does
    not depend on it."""
    nets, params = _nets("sac")
    actor, critic = params["actor"], params["critic"]
    rng = np.random.default_rng(1)
    x = jnp.asarray(rng.normal(size=(64, 3)), jnp.float32)
    normal = jnp.asarray(rng.normal(size=(64, 1)), jnp.float32)
    trainable = {"actor": actor, "log_alpha": jnp.float32(0.0)}

    @jax.jit
    def grads_and_entropy(trainable, target):
        return jax.grad(lambda t: sac_lib.sac_actor_loss(nets, t, critic, jnp.float32(0.0),
                                                            x, normal, target), has_aux=True)(
            trainable)

    _, (_, entropy) = grads_and_entropy(trainable, 0.0)
    for target, sign in ((float(entropy) + 1.0, 1.0), (float(entropy) - 1.0, -1.0)):
        grads, _ = grads_and_entropy(trainable, target)
        np.testing.assert_allclose(float(grads["log_alpha"]), -(target - float(entropy)),
                                   rtol=1e-5)
        step = -1e-2 * float(grads["log_alpha"])          # one gradient-descent step
        assert np.sign(step) == sign                      # alpha toward the target entropy
    fixed, _ = grads_and_entropy({"actor": actor}, 0.0)   # alpha fixed (no autotune)
    assert max_rel_diff(fixed["actor"], grads["actor"]) < 1e-6


# ------------------------------------------------------------------ the gradient, the topology

@pytest.mark.timeout(120)
@pytest.mark.parametrize("num_devices", [1, 4])
@pytest.mark.parametrize("algo", ["sac", "td3"])
def test_gradient_is_the_global_batch_mean(algo, num_devices):
    """Every loss SAC and TD3 differentiate (the critic ensemble's, the actor's, SAC's alpha's)
    through global_mean_grad under shard_map equals the single-device gradient of the full
    batch's mean loss; raw gradients, since Adam's first step would hide a scale error."""
    nets, params = _nets(algo)
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(64, 3)), jnp.float32)
    a = jnp.asarray(rng.uniform(-1, 1, size=(64, 1)), jnp.float32)
    y = jnp.asarray(rng.normal(size=64), jnp.float32)
    normal = jnp.asarray(rng.normal(size=(64, 1)), jnp.float32)
    mesh = sharding.make_mesh(jax.devices()[:num_devices])

    def check(loss_fn, diff, replicated, sharded):
        full_batch = jax.jit(jax.grad(lambda p, r, s: loss_fn(p, *r, *s), has_aux=True))
        expected, expected_aux = full_batch(diff, replicated, sharded)
        fn = jax.jit(jax.shard_map(
            lambda p, r, s: global_mean_grad(loss_fn, p, DATA_AXIS, *r, *s)[:2], mesh=mesh,
            in_specs=(REPLICATED, REPLICATED, SHARDED), out_specs=(REPLICATED, REPLICATED)))
        grads, aux = fn(diff, replicated, sharded)
        assert max_rel_diff(grads, expected) < 1e-5
        np.testing.assert_allclose(np.asarray(aux), np.asarray(expected_aux), rtol=1e-5,
                                   atol=1e-6)

    check(lambda p, x, a, y: parts.critic_loss(nets, p, x, a, y), params["critic"], (),
          (x, a, y))
    if algo == "sac":
        trainable = {"actor": params["actor"], "log_alpha": jnp.float32(-0.5)}
        check(lambda t, c, x, n: sac_lib.sac_actor_loss(nets, t, c, None, x, n, -1.0),
              trainable, (params["critic"],), (x, normal))
    else:
        check(lambda t, c, x: td3_lib.td3_actor_loss(nets, t, c, x), {"actor": params["actor"]},
              (params["critic"],), (x,))


# ------------------------------------------------------------ CrossQ's batch renormalisation

def _renorm_reference(x, w, params, running, momentum, renorm):
    """numpy float64, the whole batch at once: the weighted mean and biased variance, the
    layer's output (sbx's renormalised form: r and d clipped, without gradient), the running
    statistics' step, the batch's mean, and r, d."""
    eps = renorm_lib.EPS
    mean = np.sum(w[:, None] * x, 0) / np.sum(w)
    var = np.sum(w[:, None] * (x - mean) ** 2, 0) / np.sum(w)
    running_std = np.sqrt(running["var"] + eps)
    r = np.clip(np.sqrt(var + eps) / running_std, 1 / renorm_lib.R_MAX, renorm_lib.R_MAX)
    d = np.clip((mean - running["mean"]) / running_std, -renorm_lib.D_MAX, renorm_lib.D_MAX)
    use_mean, use_var = (mean - d * np.sqrt(var) / r, var / r**2) if renorm else (mean, var)
    y = (x - use_mean) / np.sqrt(use_var + eps) * params["scale"] + params["bias"]
    new = {"mean": momentum * running["mean"] + (1 - momentum) * mean,
           "var": momentum * running["var"] + (1 - momentum) * var}
    return y, new, mean, r, d


@pytest.mark.timeout(120)
@pytest.mark.parametrize("num_devices", [1, 2, 4])
def test_batch_renorm_statistics_are_the_global_batchs(num_devices):
    """One BatchRenorm layer in train mode, its batch sharded over 1, 2 or 4 devices, equals
    numpy on the whole batch: the statistics are the GLOBAL batch's (weighted: a pool's reset
    samples count 0), not a device's, with and without renormalisation; the running
    statistics take one momentum step; eval mode normalises by the running statistics. The
    features are chosen so r clips at both ends, d clips, and a mean of 100 would lose digits
    to E[x^2] - E[x]^2 without the shift by the running mean."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 5)) * [10.0, 3.0, 0.1, 1.0, 1.0] + [100.0, 0.0, 0.0, 20.0, 0.5]
    w = (rng.uniform(size=64) > 0.25).astype(np.float64)
    params = {"scale": rng.uniform(0.5, 2.0, 5), "bias": rng.normal(size=5)}
    running = {"mean": np.array([99.0, 0.0, 0.0, 0.0, 0.3]),
               "var": np.array([90.0, 0.1, 4.0, 1.0, 1.2])}
    f32 = lambda tree: jax.tree.map(lambda v: jnp.asarray(v, jnp.float32), tree)  # noqa: E731
    variables = f32({"params": params, "batch_stats": running})
    layer = renorm_lib.BatchRenorm(momentum=0.9, axis_name=DATA_AXIS)
    mesh = sharding.make_mesh(jax.devices()[:num_devices])
    train_mode = jax.jit(jax.shard_map(
        lambda v, x, w, renorm: layer.apply(v, x, True, w, renorm, mutable=["batch_stats"]),
        mesh=mesh, in_specs=(REPLICATED, SHARDED, SHARDED, REPLICATED),
        out_specs=(SHARDED, REPLICATED)))
    for renorm in (False, True):
        y, new = train_mode(variables, f32(x), f32(w), jnp.bool_(renorm))
        y_ref, new_ref, mean, r, d = _renorm_reference(x, w, params, running, 0.9, renorm)
        np.testing.assert_allclose(np.asarray(y), y_ref, rtol=1e-4, atol=1e-4)
        for name in ("mean", "var"):
            np.testing.assert_allclose(np.asarray(new["batch_stats"][name]), new_ref[name],
                                       rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(r[1:3], [renorm_lib.R_MAX, 1 / renorm_lib.R_MAX])  # r clipped
    assert d[3] == renorm_lib.D_MAX                                               # d clipped
    # a device's own shard (what peers normalise by) has other statistics
    local = np.sum(w[:16, None] * x[:16], 0) / np.sum(w[:16])
    assert not np.allclose(local, mean, rtol=1e-3)
    y_eval = layer.apply(variables, f32(x))   # eval mode: no collective, no batch statistics
    expected = ((x - running["mean"]) / np.sqrt(running["var"] + renorm_lib.EPS)
                * params["scale"] + params["bias"])
    np.testing.assert_allclose(np.asarray(y_eval), expected, rtol=1e-5, atol=1e-4)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("num_devices", [2, 4])
def test_crossq_gradient_and_statistics_are_the_global_batchs(num_devices):
    """CrossQ's critic loss (one pass over [s; s'] and [a; a'], batch statistics inside) and
    its actor loss (the actor in train mode, the critics in eval mode) through global_mean_grad
    on N devices equal the same on one device holding the whole batch: gradients, losses and
    the new running statistics, with batch statistics and renormalised. The gradient passes
    through the statistics' pmean, whose transpose sums every device's part: the global
    batch's gradient, as a single device's batch normalisation has it."""
    spec = make_env("Pendulum-v1")
    nets = networks_lib.renorm_networks(CrossQNetworkConfig(actor_hidden=(16,),
                                                            critic_hidden=(16, 16)), spec,
                                        DATA_AXIS)
    with compile_cache.unrolled_threefry():
        params, stats = jax.jit(lambda k: (
            {"actor": nets.init_actor(jax.random.fold_in(k, 0)),
             "critic": nets.init_critic(jax.random.fold_in(k, 1))}, nets.init_stats()))(
            jax.random.PRNGKey(0))
    rng = np.random.default_rng(2)
    # running statistics away from their start, so that renormalisation corrects something
    stats = jax.tree_util.tree_map_with_path(
        lambda path, v: v * rng.uniform(0.5, 2.0, v.shape).astype(np.float32)
        if "var" in jax.tree_util.keystr(path) else
        v + rng.normal(scale=0.3, size=v.shape).astype(np.float32), stats)

    def draw(*shape, low=None):
        return jnp.asarray(rng.uniform(-1, 1, shape) if low is not None
                           else rng.normal(size=shape), jnp.float32)
    batch = (draw(64, 3), draw(64, 1, low=-1), draw(64), jnp.full((64,), 0.99, jnp.float32),
             draw(64, 3), draw(64, 1, low=-1), 0.1 * draw(64),
             jnp.asarray(rng.uniform(size=64) > 0.2, jnp.float32))   # x a r disc x' a' pen w
    x, normal = batch[0], draw(64, 1)
    trainable = {"actor": params["actor"], "log_alpha": jnp.float32(-0.5)}
    critic_vars = {"params": params["critic"], "batch_stats": stats["critic"]}

    def run(devices, renorm):
        mesh = sharding.make_mesh(jax.devices()[:devices])

        def critic(p, s, *b):
            return global_mean_grad(lambda p, *b: crossq_lib.crossq_critic_loss(
                nets, p, s, *b, renorm), p, DATA_AXIS, *b)[:2]

        def actor(t, s, cv, x, n):
            return global_mean_grad(lambda t, cv, x, n: crossq_lib.crossq_actor_loss(
                nets, t, s, cv, None, x, n, -1.0, renorm), t, DATA_AXIS, cv, x, n)[:2]
        critic_fn = jax.jit(jax.shard_map(critic, mesh=mesh, in_specs=(
            REPLICATED, REPLICATED) + (SHARDED,) * len(batch), out_specs=REPLICATED))
        actor_fn = jax.jit(jax.shard_map(actor, mesh=mesh, in_specs=(
            REPLICATED, REPLICATED, REPLICATED, SHARDED, SHARDED), out_specs=REPLICATED))
        return (critic_fn(params["critic"], stats["critic"], *batch),
                actor_fn(trainable, stats["actor"], critic_vars, x, normal))

    for renorm in (False, True):
        one, many = sharding.to_host(run(1, renorm)), sharding.to_host(run(num_devices, renorm))
        for (grads, (losses, running)), (grads1, (losses1, running1)) in zip(many, one):
            assert max_rel_diff(grads, grads1) < 1e-4
            np.testing.assert_allclose(losses, losses1, rtol=1e-5, atol=1e-6)
            assert max_rel_diff(running, running1) < 1e-5
        assert max_rel_diff(one[0][1][1], stats["critic"]) > 1e-3   # the statistics moved


@pytest.mark.timeout(300)
@pytest.mark.parametrize("algo", ["sac", "td3"])
def test_n_step_targets_on_1_and_2_devices(algo):
    """``n_step: 3``: the critics learn from the replay's 3-step returns (the windows
    test_qlearning checks against their definition): learning starts once each environment
    holds more than 3 steps, 1 and 2 devices agree, and the parameters are not the one-step
    run's; a buffer too short for the windows is one line."""
    base = SAC if algo == "sac" else TD3
    three = config_lib.from_dict({**base, algo: {**base[algo], "n_step": 3}})
    (one, rows1), (two, _) = [train_in_process(three, n) for n in (1, 2)]
    assert max_rel_diff(sharding.to_host(two.train.params),
                        sharding.to_host(one.train.params)) <= 1e-4
    assert rows1[-1]["learning"][-1] == 1.0
    single, _ = train_in_process(config_lib.from_dict(base), 1)
    assert max_rel_diff(sharding.to_host(single.train.params),
                        sharding.to_host(one.train.params)) > 1e-3
    with pytest.raises(ConfigError, match=f"too small for {algo}.n_step"):
        config_lib.check(config_lib.from_dict({**base, algo: {**base[algo], "n_step": 16}}))


@pytest.mark.timeout(300)
@pytest.mark.parametrize("base", [SAC, pytest.param(TD3, marks=pytest.mark.slow)],
                         ids=["sac", "td3"])
def test_same_parameters_on_1_and_2_devices(base):
    """Same config + seed -> same parameters on 1 and 2 devices: the replay's 2 shards are held
    2 and 1 per device and serve the same batches, with the same noise per sample; the
    observation moments are reduced over both devices."""
    config = config_lib.from_dict(base)
    (one, rows1), (two, rows2) = [train_in_process(config, n) for n in (1, 2)]
    assert max_rel_diff(sharding.to_host(two.train.params),
                        sharding.to_host(one.train.params)) <= 1e-4
    for r1, r2 in zip(rows1, rows2):
        np.testing.assert_allclose(r2["critic_loss"], r1["critic_loss"], rtol=2e-4, atol=1e-6)
    last, first = rows1[-1], rows1[0]
    assert first["learning"][0] == 0.0 and last["learning"][-1] == 1.0        # the warm-up
    assert np.sum([r["actor_steps"] for r in rows1]) == 16 * 2 / 2   # 16 updates x 2 / delay 2
    assert last["replay_transitions"][-1] == 64 and np.all(last["critic_loss"] > 0)
    assert {s.data.shape[0] for s in two.data.action.addressable_shards} == {1}
    assert two.data.action.shape == (2, 16, 2, 1) and two.data.action.dtype == jnp.float32
    moments = sharding.to_host(one.train.obs_moments)
    assert moments.count > 150 and np.all(moments.var != 1.0)   # moments were merged
    if base is SAC:   # alpha tuned down towards -1 nat from a near-uniform policy
        assert 0.0 < last["alpha"][-1] < 1.0


def _max_abs_diff(a, b):
    return max(float(np.max(np.abs(x - y))) for x, y in zip(jax.tree.leaves(a),
                                                               jax.tree.leaves(b)))


@pytest.mark.timeout(400)
def test_crossq_same_parameters_on_1_2_and_4_devices():
    """CrossQ: the same config + seed -> the same parameters and running statistics on 1, 2
    and 4 devices (4 replay shards; batch statistics over the global batch). Batch
    normalisation makes some directions nearly gradient-free (a shift it removes), and Adam
    normalises their float noise to whole steps, so parameters are compared to a tenth of one
    Adam step (1e-3) in absolute terms, not relative to a near-zero bias. The warm-up clocks
    count global env steps: learning from update 5, renormalisation from update 10."""
    config = config_lib.from_dict(CROSSQ)
    runs = {n: train_in_process(config, n) for n in (1, 2, 4)}
    one, rows1 = runs[1]
    for n in (2, 4):
        state, rows = runs[n]
        assert _max_abs_diff(sharding.to_host(state.train.params),
                             sharding.to_host(one.train.params)) <= 1e-4
        assert max_rel_diff(sharding.to_host(state.train.batch_stats),
                            sharding.to_host(one.train.batch_stats)) <= 1e-4
        for r1, r in zip(rows1, rows):
            np.testing.assert_allclose(r["critic_loss"], r1["critic_loss"], rtol=2e-4, atol=1e-6)
    column = {name: np.concatenate([r[name] for r in rows1]) for name in rows1[0]}
    assert column["learning"].tolist() == [0.0] * 4 + [1.0] * 16
    assert column["renorm"].tolist() == [0.0] * 9 + [1.0] * 11    # (9 + 1) x 8 >= 40 + 40
    assert np.sum(column["actor_steps"]) == 16 * 2 / 2 and np.all(column["critic_loss"][4:] > 0)
    stats = sharding.to_host(one.train.batch_stats)
    assert set(stats) == {"actor", "critic"} and stats["critic"]["BatchRenorm_0"]["var"].shape \
        == (2, 4)                                   # per critic: 3 observations + 1 action
    assert np.all(stats["critic"]["BatchRenorm_1"]["var"] != 1.0)   # they moved
    assert not hasattr(one.train, "target")        # no target networks


@pytest.mark.timeout(300)
@pytest.mark.parametrize("base", [SAC, TD3, CROSSQ], ids=["sac", "td3", "crossq"])
def test_each_learns_on_a_host_env(base, tmp_path):
    """Every off-policy learner's learn, in the README's tier: gymnasium's Pendulum stepped on
    the host, 10 updates, the last 5 learning (gradient steps with finite losses and an actor
    step), nothing skipped, the parameters finite."""
    config = config_lib.from_dict({**base, "env": "gymnasium:Pendulum-v1",
                                   "total_timesteps": 4 * 2 * 10, "checkpoint_every": 10})
    summary = train(config, tmp_path / "run", devices=jax.devices()[:1], progress=False)
    assert summary["status"] == "completed" and np.isfinite(summary["param_norm"])
    rows = [json.loads(line) for line in (tmp_path / "run/metrics.jsonl").read_text().splitlines()]
    last = [r for r in rows if "critic_loss" in r][-1]
    assert last["updates"] == 10 and last["learning"] == 1.0 and last["actor_steps"] > 0
    assert np.isfinite(last["critic_loss"]) and last["critic_loss"] > 0
    assert last.get("nonfinite_skipped", 0) == 0


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_host_env_gives_the_same_parameters_on_1_and_2_devices(tmp_path):
    """gymnasium:Pendulum-v1 stepped on the host (the host driver), the same learner."""
    config = config_lib.from_dict({**SAC, "env": "gymnasium:Pendulum-v1"})
    runs = {n: train(config, tmp_path / str(n), devices=jax.devices()[:n], progress=False)
            for n in (1, 2)}
    assert runs[1]["status"] == runs[2]["status"] == "completed"
    assert runs[1]["env_steps"] == 160 and np.isfinite(runs[2]["eval_return"])
    assert max_rel_diff(params_of(tmp_path / "2")[0], params_of(tmp_path / "1")[0]) <= 1e-4
    assert runs[1]["checkpointed"] == ["train", "data"]    # host actors start fresh episodes


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_population_member_is_its_single_run(tmp_path):
    """2 seeds x 2 actor learning rates x 2 exploration noises of TD3 in ONE program == each
    member's own run: the swept values are arrays in the train state, acting included."""
    from jaxrl_dist import population
    from jaxrl_dist.checkpoint import read_checkpoint

    config = config_lib.from_dict({**TD3, "population": dict(
        seeds=[5, 6], sweep={"td3.actor_lr": [1e-3, 3e-3], "td3.exploration_noise": [0.1, 0.3]})})
    summary = train(config, tmp_path / "pop", devices=jax.devices()[:2], progress=False)
    assert summary["population"]["size"] == 8
    k = 7   # seed 6, actor_lr 3e-3, exploration noise 0.3 (seed varies fastest)
    member = summary["members"][k]
    assert (member["seed"], member["td3.actor_lr"], member["td3.exploration_noise"]) == \
        (6, 3e-3, 0.3)
    train(population.member_config(config, k), tmp_path / "single", devices=jax.devices()[:2],
          progress=False)
    pop, _ = read_checkpoint(tmp_path / "pop" / "checkpoints")
    one, _ = read_checkpoint(tmp_path / "single" / "checkpoints")
    assert max_rel_diff(jax.tree.map(lambda x: x[k], pop["train"]["params"]),
                        one["train"]["params"]) <= 1e-5
    assert len({m["param_fingerprint"] for m in summary["members"]}) == 8


# ------------------------------------------------------------------------ resumes, launcher

@pytest.mark.slow
@pytest.mark.timeout(400)
@pytest.mark.parametrize("run_config", [CLI_RUN, CROSSQ_CLI_RUN], ids=["sac", "crossq"])
def test_kill_9_then_resume_ends_where_the_uninterrupted_run_ends(tmp_path, run_config):
    """SIGKILL after update 25 (checkpoints every 10, the buffer in them); --resume ends with
    the uninterrupted run's parameters bit for bit: the buffer, the actors and every counter
    came back (CrossQ: its running statistics too, which also act)."""
    cfg = write_config(tmp_path, run_config)
    proc, reference = train_cli(tmp_path / "ref", devices=2, args=[], config=cfg)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = tmp_path / "run"
    proc, _ = train_cli(run, devices=2, args=[], config=cfg, JAXRL_FAULT="kill@0:25")
    assert proc.returncode == -9, proc.stderr[-3000:]
    from jaxrl_dist.checkpoint import read_checkpoint
    state, meta = read_checkpoint(run / "checkpoints")
    assert meta["updates"] in (10, 20) and np.all(state["data"]["rows"] == 16)
    proc, resumed = train_cli(run, "--resume", devices=2, args=[], config=cfg)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"resuming at {meta['updates']}" in proc.stderr
    assert resumed["param_fingerprint"] == reference["param_fingerprint"]
    saved = json.loads((run / "summary.json").read_text())
    assert saved["rebuilt_on_resume"] == [] and saved["updates"] == 40   # buffer restored


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("base", [SAC, TD3, CROSSQ], ids=["sac", "td3", "crossq"])
def test_sigterm_saves_the_replay_and_the_resumed_run_ends_as_uninterrupted(tmp_path, base):
    """Preemption: SIGTERM mid-run saves the whole state (replay, targets, entropy
    coefficient, CrossQ's running statistics) at an agreed update and exits 75; the resumed
    run ends with the uninterrupted run's parameters, bit for bit."""
    from helpers import sigterm_and_resume

    cfg = write_config(tmp_path, {**base, "total_timesteps": 8 * 1500, "checkpoint_every": 0})
    (state, meta), err, resumed, reference = sigterm_and_resume(tmp_path, cfg)
    assert 10 <= meta["updates"] < 1500 and np.all(state["data"]["rows"] == 16)   # replay saved
    assert f"resuming at {meta['updates']}" in err
    assert resumed["param_fingerprint"] == reference["param_fingerprint"]


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_a_host_env_resumes_deterministically(tmp_path):
    """Host environments restart fresh episodes on resume (their state is not in the
    checkpoint), re-seeded from (seed, update): two resumes of one kill end identically."""
    cfg = write_config(tmp_path, {**CLI_RUN, "env": "gymnasium:Pendulum-v1"})
    run = tmp_path / "run"
    proc, _ = train_cli(run, devices=1, args=[], config=cfg, JAXRL_FAULT="kill@0:25")
    assert proc.returncode == -9, proc.stderr[-3000:]
    shutil.copytree(run, tmp_path / "copy")
    finished = []
    for path in (run, tmp_path / "copy"):
        proc, summary = train_cli(path, "--resume", devices=1, args=[], config=cfg)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "started afresh: actors" in proc.stdout + proc.stderr
        assert summary["env_steps"] == 320
        finished.append(summary["param_fingerprint"])
    assert finished[0] == finished[1]


@pytest.mark.slow
@pytest.mark.timeout(400)
@pytest.mark.parametrize("run_config,whole", [(CLI_RUN, True), (CROSSQ_CLI_RUN, True),
                                               (CROSSQ_CLI_RUN, False)],
                         ids=["sac", "crossq", "crossq-split"])
def test_two_processes_equal_one_process_with_two_devices(tmp_path, run_config, whole):
    """2 processes x 1 device through the launcher == 1 process x 2 devices, bit for bit (the
    same shards per device, the same collectives), with replicate_learn set on both (auto
    turns it on across CPU processes only); split, CrossQ's batch statistics are all-reduced
    between the processes."""
    cfg = write_config(tmp_path, {**run_config, "replicate_learn": whole})
    proc, one = train_cli(tmp_path / "one", devices=2, args=[], config=cfg)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert one["replicate_learn"] is whole
    proc = run_launcher(["--nproc-per-node", "2", "--cpu-devices-per-proc", "1", cfg,
                         "--run-dir", str(tmp_path / "two")])
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = summaries(tmp_path / "two" / "logs")
    assert ranks[0]["param_fingerprint"] == ranks[1]["param_fingerprint"] == \
        one["param_fingerprint"]
    assert ranks[0]["eval_return"] == one["eval_return"]


# -------------------------------------------------------------------------------- bad input

BAD_CONFIG = [
    ("sac", dict(utd=0), ["sac.utd must be >= 1"]),
    ("sac", dict(tau=1.5), ["sac.tau must be in (0, 1]"]),
    ("sac", dict(alpha=0.0), ["sac.alpha must be > 0"]),
    ("sac", dict(batch_size=15), ["sac.batch_size (15)", "sac.buffer_shards (2)"]),
    ("sac", dict(buffer_size=60), ["sac.buffer_size (60)", "multiple of num_envs x sac.num_steps"]),
    ("sac", dict(learning_starts=100), ["sac.learning_starts (100)", "exceeds sac.buffer_size"]),
    ("sac", dict(network=dict(num_critics=0)), ["sac.network.num_critics"]),
    ("sac", dict(network=dict(activation="sigmoid")), ["sac.network.activation"]),
    ("td3", dict(policy_noise=-0.1), ["td3.policy_noise must be >= 0"]),
    ("td3", dict(policy_delay=0), ["td3.policy_delay must be >= 1"]),
    ("td3", dict(grad_clip="norm"), ["td3.grad_clip", "global_norm, element"]),
    ("td3", dict(buffer_shards=3, batch_size=15), ["num_envs (4)", "td3.buffer_shards (3)"]),
    ("td3", dict(alpha=0.5), ["td3.alpha", "unknown", "td3"]),
    ("crossq", dict(tau=0.005), ["crossq.tau", "unknown"]),
    ("crossq", dict(adam_b1=1.0), ["crossq.adam_b1 must be in [0, 1)"]),
    ("crossq", dict(renorm_warmup_steps=-1), ["crossq.renorm_warmup_steps must be >= 0"]),
    ("crossq", dict(network=dict(batch_norm_momentum=1.0)),
     ["crossq.network.batch_norm_momentum must be in [0, 1)"]),
    ("crossq", dict(alpha_lr=0.0), ["crossq.alpha_lr must be > 0"]),
    ("crossq", dict(learning_starts=100), ["crossq.learning_starts (100)", "crossq.buffer_size"]),
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("algo,section,words", BAD_CONFIG,
                         ids=[f"{a}-{s}" for a, s, _ in BAD_CONFIG])
def test_bad_config_is_one_line(algo, section, words):
    with pytest.raises(ConfigError) as info:
        _config({"sac": SAC, "td3": TD3, "crossq": CROSSQ}[algo], **section)
    message = str(info.value)
    assert "\n" not in message
    for word in words:
        assert word.lower() in message.lower(), (word, message)


@pytest.mark.timeout(120)
def test_discrete_or_unbounded_actions_and_shards_that_do_not_fit_are_one_line():
    config = config_lib.from_dict({**SAC, "env": "CartPole-v1"})
    layout = sharding.make_layout(jax.devices()[:1])
    with pytest.raises(EnvError, match="algo sac needs continuous actions"):
        make_learner(config, sizes_lib.derive_sizes(config, 1), make_env("CartPole-v1"), layout)
    unbounded = EnvSpec(adapter=None, name="free", obs_shape=(3,), action_dim=2,
                        continuous=True)
    with pytest.raises(EnvError, match="algo td3 maps its actor's tanh onto the action bounds"):
        make_learner(config_lib.from_dict(TD3), sizes_lib.derive_sizes(
            config_lib.from_dict(TD3), 1), unbounded, layout)
    config = config_lib.from_dict({**SAC, "eval_episodes": 4})
    with pytest.raises(ConfigError, match=r"sac.buffer_shards \(2\) must be a multiple of the "
                                          r"number of devices .* \(4\)"):
        make_learner(config, sizes_lib.derive_sizes(config, 4), make_env("Pendulum-v1"),
                     sharding.make_layout(jax.devices()[:4]))


# Run with the trainer's XLA flags (not the suite's -O0 ones, under which two different
# programs may round an ulp apart): SAC or CrossQ on the host, one env step a rollout, trained
# with each update as one program and as the separate programs, each stopped after update 30
# and resumed; prints {"fused": fingerprint, "apart": ..., "fused_steps": n}.
ONE_DISPATCH = """
import json, os, sys
from jaxrl_dist.protocol import CPU_SCHEDULER_FLAG
os.environ["XLA_FLAGS"] = CPU_SCHEDULER_FLAG
os.environ["JAX_PLATFORMS"] = "cpu"
import jax
from jaxrl_dist import actors, config as config_lib
from jaxrl_dist.trainer import train
base, out = json.loads(sys.argv[1]), sys.argv[2]
algo = base["algo"]
config = config_lib.from_dict({**base, "env": "gymnasium:Pendulum-v1", "num_envs": 4,
                               "total_timesteps": 240, "updates_per_call": 10,
                               "checkpoint_every": 10,
                               algo: {**base[algo], "num_steps": 1, "utd": 1}})
fused_steps = []
step = actors.HostActors._fused_step
def counted(self, state):
    fused_steps.append(1)
    return step(self, state)
actors.HostActors._fused_step = counted
result = {}
for name in ("fused", "apart"):
    if name == "apart":
        actors.HostActors.fusable = lambda self: False
        result["fused_steps"] = len(fused_steps)
    os.environ["JAXRL_FAULT"] = "raise@0:30"   # stopped after update 30
    try:
        train(config, f"{out}/{name}", progress=False)
    except RuntimeError as error:
        assert "injected fault" in str(error)
    del os.environ["JAXRL_FAULT"]
    summary = train(config, f"{out}/{name}", resume=True, progress=False)
    assert summary["status"] == "completed" and summary["env_steps"] == 240
    result[name] = summary["param_fingerprint"]
result["apart_steps"] = len(fused_steps) - result["fused_steps"]
print(json.dumps(result))
"""


@pytest.mark.timeout(300)
@pytest.mark.parametrize("base", [SAC, pytest.param(CROSSQ, marks=pytest.mark.slow)],
                         ids=["sac", "crossq"])
def test_one_dispatch_a_step_is_the_separate_programs_bit_for_bit(base, tmp_path):
    """One env step a rollout on a host environment, one device: each update is ONE compiled
    call (unpack, learn, then act on the next observations with the parameters just learned:
    ``HostActors.fusable``); it ends on the parameters the separate programs give (learn, then
    the next rollout's prepare and act), bit for bit at the trainer's XLA flags, through a
    resume in the middle (each session's first update acts before its program: nothing acted
    for it yet)."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", ONE_DISPATCH, json.dumps(base), str(tmp_path)],
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["fused_steps"] == 60 and result["apart_steps"] == 0, result   # every update
    assert result["fused"] == result["apart"]
