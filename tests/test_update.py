"""The distributed update: global-mean gradient, topology invariance, learning."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from helpers import TINY, train_in_process
from jaxrl_dist import config as config_lib
from jaxrl_dist import sizes as sizes_lib
from jaxrl_dist import sharding
from jaxrl_dist.agents import minibatch
from jaxrl_dist.agents.ppo import losses, update
from jaxrl_dist.agents.ppo import optimizer as optimizer_lib
from jaxrl_dist.envs import make_env
from jaxrl_dist.agents.ppo.networks import make_networks
from jaxrl_dist.programs import make_learner
from jaxrl_dist.sharding import DATA_AXIS, REPLICATED, SHARDED


def _minibatch(spec, n, seed=0):
    rng = np.random.default_rng(seed)
    return losses.LossInputs(
        obs=jnp.asarray(rng.normal(size=(n, *spec.obs_shape)), jnp.float32),
        action=jnp.asarray(rng.integers(0, spec.action_dim, n), jnp.int32),
        old_log_prob=jnp.asarray(np.log(rng.uniform(0.3, 0.7, n)), jnp.float32),
        old_value=jnp.asarray(rng.normal(size=n), jnp.float32),
        advantage=jnp.asarray(rng.normal(1.0, 2.0, size=n), jnp.float32),
        target=jnp.asarray(rng.normal(size=n), jnp.float32))


@pytest.fixture(scope="module")
def setup():
    config = config_lib.from_dict({**TINY, "ppo": {**TINY["ppo"], "vf_clip_eps": 0.3}})
    spec = make_env("CartPole-v1")
    nets = make_networks(config.ppo.network, spec)
    optimizer, _ = optimizer_lib.make_optimizer(config.ppo, sizes_lib.derive_sizes(config, 1))
    params = nets.init(jax.random.PRNGKey(0))
    return config, spec, nets, optimizer, params


def _reference_step(config, nets, optimizer, params, batch):
    """Full-batch gradient step with no sharding at all: the ground truth."""
    p = config.ppo
    adv = batch.advantage
    batch = batch._replace(advantage=(adv - adv.mean()) / (adv.std() + 1e-8))
    grad_fn = jax.grad(lambda q: losses.ppo_loss(q, batch, nets.policy, nets.value, p.clip_eps,
                                                 p.vf_clip_eps, p.ent_coef, p.vf_coef)[0])
    grads = grad_fn(params)
    updates, _ = optimizer.update(grads, optimizer.init(params), params)
    return optax.apply_updates(params, updates), grads


def _sharded_step(config, nets, optimizer, params, batch, num_devices):
    mesh = sharding.make_mesh(jax.devices()[:num_devices])
    step = update.make_sgd_step(config.ppo, nets, optimizer, DATA_AXIS)

    def local(q, s, b):
        sums = jax.lax.psum(update.advantage_sums(b.advantage), DATA_AXIS)
        adv = update.normalize_advantages(b.advantage, sums)
        return step(q, s, b._replace(advantage=adv), config.ppo.clip_eps)[0]

    fn = jax.jit(jax.shard_map(local, mesh=mesh, in_specs=(REPLICATED, REPLICATED, SHARDED),
                               out_specs=REPLICATED))
    return fn(params, optimizer.init(params), batch)


def _max_rel_diff(a, b):
    diffs = jax.tree.leaves(jax.tree.map(
        lambda x, y: np.max(np.abs(np.asarray(x) - np.asarray(y)))
        / (np.max(np.abs(np.asarray(y))) + 1e-12), a, b))
    return max(diffs)


@pytest.mark.parametrize("num_devices", [1, 4])
@pytest.mark.parametrize("opt", ["sgd", "adam"])
def test_sharded_update_equals_full_batch_update(setup, num_devices, opt):
    # Plain SGD(lr=1) makes the update equal to -gradient, so a wrongly scaled gradient (which
    # Adam's first step would normalise away) cannot pass; Adam checks the real optimizer.
    config, spec, nets, optimizer, params = setup
    if opt == "sgd":
        optimizer = optax.sgd(1.0)
    batch = _minibatch(spec, 64)
    expected, _ = _reference_step(config, nets, optimizer, params, batch)
    got = _sharded_step(config, nets, optimizer, params, batch, num_devices)
    assert _max_rel_diff(got, expected) < 1e-5


def test_grad_of_local_loss_is_the_device_sum_the_trap(setup):
    """Documents the shard_map trap our update avoids: grad(local loss) is N x the mean."""
    config, spec, nets, optimizer, params = setup
    p = config.ppo
    batch = _minibatch(spec, 64)._replace(advantage=jnp.ones(64))
    mesh = sharding.make_mesh(jax.devices()[:4])

    def naive(q, b):
        g = jax.grad(lambda q: losses.ppo_loss(q, b, nets.policy, nets.value, p.clip_eps,
                                               p.vf_clip_eps, p.ent_coef, p.vf_coef)[0])(q)
        return jax.lax.pmean(g, DATA_AXIS)  # the pmap-era idiom

    naive_grads = jax.jit(jax.shard_map(naive, mesh=mesh, in_specs=(REPLICATED, SHARDED),
                                        out_specs=REPLICATED))(params, batch)
    true_grads = jax.grad(lambda q: losses.ppo_loss(q, batch, nets.policy, nets.value,
                                                    p.clip_eps, p.vf_clip_eps, p.ent_coef,
                                                    p.vf_coef)[0])(params)
    ratio = (optax.tree.norm(naive_grads) / optax.tree.norm(true_grads))
    np.testing.assert_allclose(ratio, 4.0, rtol=1e-4)


def _train_params(config, num_devices):
    state, rows = train_in_process(config, num_devices)
    return sharding.to_host(state.train.params), rows[-1], state


@pytest.mark.slow
def test_same_parameters_on_1_2_4_devices(tiny_config):
    """Topology invariance: same config + seed -> same params after 6 updates."""
    assert sizes_lib.derive_sizes(tiny_config, 1).num_updates >= 5
    results = {n: _train_params(tiny_config, n) for n in (1, 2, 4)}
    ref_params, ref_metrics, _ = results[1]
    for n in (2, 4):
        params, metrics, state = results[n]
        assert _max_rel_diff(params, ref_params) <= 1e-4, n
        np.testing.assert_allclose(metrics["episodes"], ref_metrics["episodes"])
        np.testing.assert_allclose(metrics["episode_return_sum"],
                                   ref_metrics["episode_return_sum"], rtol=1e-5)
        # The environments really are spread: each device holds num_envs / n of them.
        obs = state.actors.env.obs
        assert {s.data.shape[0] for s in obs.addressable_shards} == {tiny_config.num_envs // n}
    # and training moved the parameters at all (the comparison above is not vacuous)
    init = make_networks(tiny_config.ppo.network, make_env("CartPole-v1")).init(
        jax.random.split(jax.random.PRNGKey(tiny_config.seed), 3)[0])
    assert _max_rel_diff(ref_params, init) > 1e-3


def test_observation_normalisation_is_global(tiny_config):
    config = config_lib.from_dict({**TINY, "ppo": {**TINY["ppo"], "normalize_observations": True}})
    _, _, s1 = _train_params(config, 1)
    _, _, s4 = _train_params(config, 4)
    m1, m4 = sharding.to_host(s1.train.obs_moments), sharding.to_host(s4.train.obs_moments)
    np.testing.assert_allclose(m4.mean, m1.mean, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(m4.var, m1.var, rtol=1e-4)
    expected_count = 1e-4 + 6 * config.num_envs * config.ppo.num_steps
    np.testing.assert_allclose(m1.count, expected_count, rtol=1e-6)


def test_sampled_evaluation_is_the_same_on_1_and_2_devices():
    """eval_deterministic=false samples each eval env's actions from its own keys: the same
    returns on any topology, and not the greedy policy's."""
    spec = make_env("CartPole-v1")
    results = {}
    for deterministic in (True, False):
        config = config_lib.from_dict({**TINY, "eval_episodes": 8,
                                       "eval_deterministic": deterministic})
        for n in ((1, 2) if not deterministic else (1,)):
            learner = make_learner(config, sizes_lib.derive_sizes(config, n), spec,
                                   sharding.make_layout(jax.devices()[:n]))
            key = jax.random.PRNGKey(1)
            out = learner.evaluate(learner.init(key).train, key)
            results[deterministic, n] = [float(out[k]) for k in sorted(out)]
    np.testing.assert_allclose(results[False, 1], results[False, 2], rtol=1e-6)
    assert results[False, 1] != results[True, 1]


def test_element_clipping_clips_each_gradient_element_and_is_topology_invariant(setup):
    """ppo.grad_clip=element (rejax's optax.clip): the sharded step's optimizer sees the global
    mean gradient with every element clipped to +-max_grad_norm, each network's norm untouched."""
    _, spec, nets, _, params = setup
    # Adam's eps at 1 makes its first step lr * g / (|g| + 1): it shows clipping, where the
    # usual tiny eps would normalise every element to lr whatever the clip did.
    hp = {"grad_clip": "element", "max_grad_norm": 0.01, "anneal_lr": False, "adam_eps": 1.0}
    config = config_lib.from_dict({**TINY, "ppo": {**TINY["ppo"], **hp}})
    optimizer, _ = optimizer_lib.make_optimizer(config.ppo, sizes_lib.derive_sizes(config, 1))
    batch = _minibatch(spec, 32)
    ref_params, grads = _reference_step(config, nets, optimizer, params, batch)
    flat = np.concatenate([np.ravel(x) for x in jax.tree.leaves(grads)])
    assert np.sum(np.abs(flat) > 0.02) > 10 and np.sum(np.abs(flat) < 0.005) > 10  # both kinds
    by_hand = optax.chain(optax.clip(0.01), optax.adam(config.ppo.learning_rate, eps=1.0))
    expected = optax.apply_updates(params, by_hand.update(grads, by_hand.init(params), params)[0])
    assert _max_rel_diff(ref_params, expected) <= 1e-6
    unclipped = optax.adam(config.ppo.learning_rate, eps=1.0)
    assert _max_rel_diff(optax.apply_updates(params, unclipped.update(
        grads, unclipped.init(params), params)[0]), expected) > 1e-4   # the clip did something
    for n in (1, 4):
        assert _max_rel_diff(_sharded_step(config, nets, optimizer, params, batch, n),
                             ref_params) <= 1e-4, n


def test_lecun_init_is_flax_default_everywhere():
    """network.init=lecun: every kernel ~ N(0, 1/fan_in) (rejax's networks), heads included;
    the orthogonal default keeps the small policy head."""
    spec = make_env("CartPole-v1")
    config = config_lib.from_dict({**TINY, "network": {**TINY.get("network", {}),
                                                       "actor_hidden": [256], "init": "lecun"}})
    params = make_networks(config.ppo.network, spec).init(jax.random.PRNGKey(0))
    kernel = np.asarray(params["actor"]["MLP_0"]["Dense_0"]["kernel"])       # [4, 256]
    head = np.asarray(params["actor"]["MLP_0"]["Dense_1"]["kernel"])         # [256, 2]
    # lecun_normal is a truncated normal scaled to variance 1/fan_in
    assert abs(np.var(kernel) * kernel.shape[0] - 1.0) < 0.2
    assert abs(np.var(head) * head.shape[0] - 1.0) < 0.3
    ortho = make_networks(config_lib.from_dict(
        {**TINY, "network": {**TINY.get("network", {}), "actor_hidden": [256]}}).ppo.network,
        spec).init(jax.random.PRNGKey(0))
    assert np.std(ortho["actor"]["MLP_0"]["Dense_1"]["kernel"]) < 0.01 < np.std(head)


def test_unknown_grad_clip_and_init_are_config_errors():
    from jaxrl_dist.errors import ConfigError
    with pytest.raises(ConfigError, match="ppo.grad_clip must be one of global_norm, element"):
        config_lib.from_dict({**TINY, "ppo": {**TINY["ppo"], "grad_clip": "norm"}})
    with pytest.raises(ConfigError, match="network.init must be one of orthogonal, lecun"):
        config_lib.from_dict({**TINY, "network": {"init": "xavier"}})


@pytest.mark.parametrize("n", [2, 5, 128, 4097])
def test_minibatch_permutation_is_a_uniform_permutation(n):
    """minibatch.permutation (one single-operand sort; jax.random.permutation above 4096): every
    draw is a permutation, draws differ, and over many keys an element's position is uniform
    (its mean position is the middle)."""
    keys = jax.random.split(jax.random.PRNGKey(3), 400)
    perms = np.asarray(jax.jit(jax.vmap(lambda k: minibatch.permutation(k, n)))(keys))
    assert perms.dtype == np.int32
    np.testing.assert_array_equal(np.sort(perms, axis=1), np.broadcast_to(np.arange(n), perms.shape))
    assert n <= 5 or len({p.tobytes() for p in perms}) == 400   # not a few fixed orders
    # where element 0 lands: uniform over positions, so its mean position is (n-1)/2 within
    # 4 standard errors (sd of a uniform position ~ n/sqrt(12), 400 draws)
    pos = np.argmax(perms == 0, axis=1)
    assert abs(pos.mean() - (n - 1) / 2) < 4 * (n / np.sqrt(12)) / np.sqrt(400)
