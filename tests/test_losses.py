"""Math against plain-Python references and hand-computed values."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_dist import running_stats
from jaxrl_dist.agents.ppo import losses
from jaxrl_dist.distributions import Categorical, DiagGaussian


def gae_reference(r, v, done, v_last, gamma, lam):
    """The textbook loop, one environment at a time."""
    T, B = r.shape
    adv = np.zeros((T, B))
    for b in range(B):
        a_next, v_next = 0.0, v_last[b]
        for t in reversed(range(T)):
            nd = 1.0 - done[t, b]
            delta = r[t, b] + gamma * nd * v_next - v[t, b]
            a_next = delta + gamma * lam * nd * a_next
            adv[t, b] = a_next
            v_next = v[t, b]
    return adv


class GAETest(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    def test_matches_loop_with_episode_ends(self):
        rng = np.random.default_rng(0)
        T, B = 13, 5
        r = rng.normal(size=(T, B)).astype(np.float32)
        v = rng.normal(size=(T, B)).astype(np.float32)
        done = rng.random((T, B)) < 0.2
        done[-1, 0] = True  # an episode ending on the last step must not bootstrap v_last
        v_last = rng.normal(size=B).astype(np.float32)
        gae = self.variant(lambda *a: losses.compute_gae(*a, 0.97, 0.9))
        adv, target = gae(r, v, done, v_last)
        expected = gae_reference(r, v, done.astype(np.float32), v_last, 0.97, 0.9)
        np.testing.assert_allclose(adv, expected, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(target, expected + v, rtol=1e-5, atol=1e-5)

    def test_single_step_by_hand(self):
        # T=1: A = r + gamma * V_next - V = 1 + 0.5 * 4 - 2 = 1; done zeroes the bootstrap: 1-2=-1
        adv, _ = losses.compute_gae(jnp.array([[1.0, 1.0]]), jnp.array([[2.0, 2.0]]),
                                    jnp.array([[False, True]]), jnp.array([4.0, 4.0]), 0.5, 0.9)
        np.testing.assert_allclose(adv, [[1.0, -1.0]])


def test_gae_stops_before_a_dropped_step_and_bootstraps_from_where_it_arrived():
    """A step ``env_nonfinite: reset`` dropped (``valid`` False, marked terminated AND
    truncated): no advantage and no weight; the step before it ends there by a time limit,
    its advantage r + gamma V(s_next) - V(s) (not the lambda-trace through the dropped step),
    the rest of the rollout as GAE of the two pieces."""
    from jaxrl_dist.agents.ppo.config import PPOConfig
    from jaxrl_dist.agents.ppo.update import Values, gae_targets
    from jaxrl_dist.types import Transition

    T, gamma, lam = 6, 0.9, 0.8
    r = np.array([1.0, 2.0, 3.0, 0.0, 5.0, 6.0], np.float32)[:, None]
    v = np.array([0.5, 1.0, 1.5, 2.0, 2.5, 3.0], np.float32)[:, None]
    drop = np.zeros((T, 1), bool)
    drop[3] = True
    steps = Transition(obs=None, action=None, reward=jnp.asarray(r), terminated=drop,
                       truncated=drop, finished_return=None, finished_length=None, extras={},
                       valid=~drop)
    final_v = np.concatenate([v[1:], [[4.0]]])   # where each step arrived (no episode ends)
    final_v[3] = 7.0                               # the dropped step's: never used
    values = Values(jnp.asarray(v), jnp.array([4.0]), jnp.asarray(final_v))
    adv, targets, weight = gae_targets(PPOConfig(), {"gamma": gamma, "gae_lambda": lam},
                                       steps, values)
    first = gae_reference(r[:3], v[:3], np.zeros((3, 1)), v[3], gamma, lam)   # to s_3
    last = gae_reference(r[4:], v[4:], np.zeros((2, 1)), np.array([4.0]), gamma, lam)
    np.testing.assert_allclose(np.asarray(adv)[:3], first, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(adv)[4:], last, rtol=1e-5)
    assert float(adv[3, 0]) == 0.0 and np.asarray(weight)[:, 0].tolist() == [1, 1, 1, 0, 1, 1]
    np.testing.assert_allclose(np.asarray(targets)[:3], first + v[:3], rtol=1e-5)


def test_ppo_loss_hand_computed():
    # Two samples, two actions. Current policy logits give p(a=0) = 0.5 for sample 0 (logits
    # equal) and p(a=1) = e/(1+e) for sample 1.  Old log-probs are chosen so the ratios are
    # r0 = 0.5 / 0.4 = 1.25 and r1 = p1 / 0.9.
    logits = jnp.array([[0.0, 0.0], [0.0, 1.0]])
    p1 = float(np.e / (1 + np.e))
    batch = losses.LossInputs(
        obs=jnp.zeros((2, 1)), action=jnp.array([0, 1]),
        old_log_prob=jnp.log(jnp.array([0.4, 0.9])), old_value=jnp.array([0.0, 1.0]),
        advantage=jnp.array([2.0, -1.0]), target=jnp.array([1.0, 0.0]))
    value = jnp.array([0.5, 2.0])
    total, info = losses.ppo_loss(
        None, batch, lambda _, o, m: Categorical(logits), lambda _, o: value,
        clip_eps=0.2, vf_clip_eps=0.5, ent_coef=0.1, vf_coef=0.5)
    r0, r1 = 1.25, p1 / 0.9
    # sample 0: min(1.25 * 2, clip(1.25, 0.8, 1.2) * 2) = 2.4
    # sample 1: min(r1 * -1, clip(r1) * -1); r1 = 0.812 -> clip 0.812 -> -0.812
    pg = -(2.4 + -r1) / 2
    # value: unclipped errors (0.5-1)^2 = 0.25, (2-0)^2 = 4; clipped values 0.5 and 1.5 ->
    # (0.5-1)^2 = 0.25, (1.5-0)^2 = 2.25; max -> 0.25, 4 -> 0.5 * mean = 1.0625
    vl = 0.5 * (0.25 + 4.0) / 2
    ent = (np.log(2) + -(p1 * np.log(p1) + (1 - p1) * np.log(1 - p1))) / 2
    np.testing.assert_allclose(info.policy_loss, pg, rtol=1e-6)
    np.testing.assert_allclose(info.value_loss, vl, rtol=1e-6)
    np.testing.assert_allclose(info.entropy, ent, rtol=1e-6)
    np.testing.assert_allclose(total, pg + 0.5 * vl - 0.1 * ent, rtol=1e-6)
    kl = np.mean([(r - 1) - np.log(r) for r in (r0, r1)])
    np.testing.assert_allclose(info.approx_kl, kl, rtol=1e-5)
    np.testing.assert_allclose(info.clip_fraction, 0.5)  # only sample 0 is outside [0.8, 1.2]


def test_value_clipping_off_uses_plain_mse():
    batch = losses.LossInputs(jnp.zeros((1, 1)), jnp.array([0]), jnp.log(jnp.array([0.5])),
                              jnp.array([0.0]), jnp.array([0.0]), jnp.array([0.0]))
    _, info = losses.ppo_loss(None, batch, lambda _, o, m: Categorical(jnp.zeros((1, 2))),
                              lambda _, o: jnp.array([3.0]), 0.2, None, 0.0, 1.0)
    np.testing.assert_allclose(info.value_loss, 0.5 * 9.0)


def test_gaussian_matches_closed_form():
    mean, log_std = jnp.array([[0.5, -1.0]]), jnp.array([[0.1, -0.3]])
    a = jnp.array([[0.2, 0.4]])
    d = DiagGaussian(mean, log_std)
    std = np.exp(np.asarray(log_std))
    expected = np.sum(-0.5 * ((a - mean) / std) ** 2 - np.log(std) - 0.5 * np.log(2 * np.pi))
    np.testing.assert_allclose(d.log_prob(a), [expected], rtol=1e-6)
    np.testing.assert_allclose(d.entropy(), [np.sum(0.5 * np.log(2 * np.pi * np.e * std**2))],
                               rtol=1e-6)
    samples = jax.vmap(lambda k: DiagGaussian(mean[0], log_std[0]).sample(k))(
        jax.random.split(jax.random.PRNGKey(0), 20000))
    np.testing.assert_allclose(samples.mean(0), mean[0], atol=0.03)
    np.testing.assert_allclose(samples.std(0), std[0], rtol=0.03)


def test_tanh_gaussian_maps_into_the_bounds_with_the_right_distribution():
    """Squashed draws stay inside [low, high] and follow P(a <= x) = Phi((atanh(y(x)) - mean) /
    std), y the bounds rescaled to [-1, 1]; the mode is the squashed mean; log-probs (what PPO's
    ratio uses) are those of the pre-squash Gaussian, where the tanh Jacobian cancels."""
    from scipy.stats import norm
    low, high = jnp.array([-2.0, 0.0]), jnp.array([2.0, 1.0])
    mean, log_std = jnp.array([0.3, -0.5]), jnp.array([0.2, -0.4])
    d = DiagGaussian(mean, log_std, low, high)
    u = jax.vmap(d.sample)(jax.random.split(jax.random.PRNGKey(1), 40000))
    a = np.asarray(d.env_action(u))
    assert np.all(a >= np.asarray(low)) and np.all(a <= np.asarray(high))
    assert np.abs(np.asarray(d.env_action(jnp.array([1e4, -1e4]))) - [2.0, 0.0]).max() < 1e-6
    for i, x in enumerate([0.9, 0.3]):
        y = 2.0 * (x - float(low[i])) / float(high[i] - low[i]) - 1.0
        expected = norm.cdf((np.arctanh(y) - float(mean[i])) / np.exp(float(log_std[i])))
        assert abs(np.mean(a[:, i] <= x) - expected) < 0.01
    np.testing.assert_allclose(d.env_action(d.mode()), low + (np.tanh(mean) + 1) * (high - low) / 2,
                               rtol=1e-6)
    np.testing.assert_allclose(d.log_prob(u[:5]), DiagGaussian(mean, log_std).log_prob(u[:5]))
    first = u[0]
    assert DiagGaussian(mean, log_std).env_action(first) is first   # clip: the env clips


def test_categorical_log_prob_and_mode():
    d = Categorical(jnp.log(jnp.array([[0.2, 0.5, 0.3]])))
    np.testing.assert_allclose(d.log_prob(jnp.array([2])), np.log([0.3]), rtol=1e-6)
    assert int(d.mode()[0]) == 1


def test_categorical_samples_follow_the_probabilities():
    probs = np.array([0.2, 0.5, 0.3])
    d = Categorical(jnp.log(jnp.asarray(probs)))
    samples = jax.vmap(d.sample)(jax.random.split(jax.random.PRNGKey(0), 30000))
    np.testing.assert_allclose(np.bincount(np.asarray(samples), minlength=3) / 30000, probs,
                               atol=0.01)


@pytest.mark.parametrize("splits", [[7], [3, 4], [1, 2, 4]])
def test_merged_moments_equal_moments_of_concatenation(splits):
    rng = np.random.default_rng(1)
    data = rng.normal(2.0, 3.0, size=(sum(splits), 3)).astype(np.float32)
    m = running_stats.Moments(jnp.zeros(3), jnp.ones(3), jnp.float32(0.0))
    start = 0
    for n in splits:
        chunk = data[start:start + n]
        start += n
        m = running_stats.merge_moments(m, chunk.mean(0), chunk.var(0), jnp.float32(n))
    np.testing.assert_allclose(m.mean, data.mean(0), rtol=1e-5)
    np.testing.assert_allclose(m.var, data.var(0), rtol=1e-4)
