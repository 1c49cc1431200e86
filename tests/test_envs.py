"""envs.step (batched, lazy auto-reset) against gymnax's own Environment.step."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnax.wrappers.purerl import GymnaxWrapper

from jaxrl_dist import envs
from jaxrl_dist.envs import gymnax as gymnax_adapters


def _random_actions(spec, key, shape):
    if spec.continuous:
        return jax.random.uniform(key, (*shape, spec.action_dim), minval=-3.0, maxval=3.0)
    return jax.random.randint(key, shape, 0, spec.action_dim)


def _rollouts(spec, num_envs=3, num_steps=260):
    """The same keys and actions through envs.step and through vmap(env.step)."""
    key_reset, key_steps, key_actions = jax.random.split(jax.random.PRNGKey(0), 3)
    slots = jax.vmap(lambda k: envs.reset(spec, k))(jax.random.split(key_reset, num_envs))
    keys = jax.random.split(key_steps, num_steps * num_envs).reshape(num_steps, num_envs, -1)
    actions = _random_actions(spec, key_actions, (num_steps, num_envs))

    def ours(slots, xs):
        k, a = xs
        slots, out = envs.step(spec, envs.step_keys(k), slots, a)
        return slots, (slots.obs, out.reward, out.terminated, out.truncated, out.final_obs)

    def reference(state, xs):
        k, a = xs
        a = envs.to_env_action(spec, a)
        obs, state, reward, term, trunc, info = jax.vmap(
            spec.adapter.env.step, (0, 0, 0, None))(k, state, a, spec.adapter.params)
        trunc = jnp.logical_and(trunc, jnp.logical_not(term))
        return state, (obs, reward, term, trunc, info["final_observation"])

    _, got = jax.jit(lambda s: jax.lax.scan(ours, s, (keys, actions)))(slots)
    _, want = jax.jit(lambda s: jax.lax.scan(reference, s, (keys, actions)))(slots.env_state)
    return got, want


@pytest.mark.parametrize("name", ["CartPole-v1", "Pendulum-v1", "Asterix-MinAtar"])
def test_lazy_reset_step_equals_gymnax_step(name):
    spec = envs.make_env(name)
    assert isinstance(spec.adapter, gymnax_adapters.GymnaxAdapter)
    got, want = _rollouts(spec)
    names = ("obs", "reward", "terminated", "truncated", "final_obs")
    for field, g, w in zip(names, got, want):
        g, w = np.asarray(g), np.asarray(w)
        if g.dtype == bool:
            np.testing.assert_array_equal(g, w, err_msg=field)
        else:   # the two programs fuse differently: allow float rounding
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5, err_msg=field)
    terminated, truncated = np.asarray(got[2]), np.asarray(got[3])
    assert terminated.any() or truncated.any(), "no episode ended: the reset path was not run"
    if name == "Pendulum-v1":   # 200-step time limit inside the 260 steps
        assert truncated.any()


def test_episode_length_replaces_a_gymnax_time_limit():
    """episode_length on a gymnax id sets its max_steps_in_episode (CartPole-v1 at 200 is
    CartPole-v0): Pendulum, which never terminates, is truncated every 50 steps, and the step
    still equals gymnax's own with those params."""
    spec = envs.make_env("Pendulum-v1", episode_length=50)
    assert spec.max_episode_steps == 50
    got, want = _rollouts(spec, num_envs=2, num_steps=120)
    truncated = np.asarray(got[3])
    np.testing.assert_array_equal(truncated, np.asarray(want[3]))
    assert sorted(set(np.nonzero(truncated)[0])) == [49, 99]
    with pytest.raises(envs.EnvError, match="episode_length must be >= 1"):
        envs.make_env("CartPole-v1", episode_length=0)


def test_step_without_autoreset_matches_until_each_episode_ends():
    """Evaluation steps with autoreset=False: the same outputs as the auto-resetting step up to
    and including each environment's first end, and afterwards no reset (the state keeps
    stepping from where the episode ended)."""
    spec = envs.make_env("CartPole-v1")
    num_envs, num_steps = 4, 120
    key_reset, key_steps, key_actions = jax.random.split(jax.random.PRNGKey(1), 3)
    slots = jax.vmap(lambda k: envs.reset(spec, k))(jax.random.split(key_reset, num_envs))
    keys = jax.random.split(key_steps, num_steps * num_envs).reshape(num_steps, num_envs, -1)
    actions = jax.random.randint(key_actions, (num_steps, num_envs), 0, spec.action_dim)

    def run(autoreset):
        def body(slots, xs):
            k, a = xs
            slots, out = envs.step(spec, envs.step_keys(k), slots, a, autoreset=autoreset)
            return slots, (slots.obs, out.reward, out.terminated | out.truncated)
        return jax.jit(lambda s: jax.lax.scan(body, s, (keys, actions))[1])(slots)

    (obs_a, rew_a, done_a), (obs_b, rew_b, done_b) = map(
        lambda out: tuple(np.asarray(x) for x in out), (run(True), run(False)))
    first_end = np.argmax(done_a, axis=0)
    assert done_a.any(0).all(), "every environment must end within the rollout"
    for e in range(num_envs):
        end = first_end[e]
        np.testing.assert_array_equal(rew_a[:end + 1, e], rew_b[:end + 1, e])
        np.testing.assert_array_equal(done_a[:end + 1, e], done_b[:end + 1, e])
        # two programs: equal to rounding (the suite's unoptimised XLA code, helpers'
        # TEST_XLA_FLAGS, contracts their multiply-adds differently: an ulp that grows over
        # the steps, never near the 0.05 of a reset)
        np.testing.assert_allclose(obs_a[:end, e], obs_b[:end, e], rtol=1e-4, atol=1e-5)
        # at the end the auto-reset shows a fresh episode's first observation; without it the
        # terminal observation stays (CartPole's reset draws from [-0.05, 0.05])
        assert np.abs(obs_a[end, e]).max() <= 0.05 < np.abs(obs_b[end, e]).max()


class ConstantIndexReset:
    """A reset that indexes a constant array with a random index, as MinAtar Breakout's does;
    an episode lasts 2-7 steps."""

    def reset(self, key):
        x = jnp.array([0.0, 5.0])[jax.random.randint(key, (), 0, 2)]
        return x, x[None]

    def step(self, key, x, action):
        x = x + 1.0 + action
        return envs.Step(x, x[None], jnp.float32(1.0), x > 6.0, jnp.bool_(False))


@pytest.mark.parametrize("reset_each", [False, True])
def test_population_step_under_shard_map_equals_the_lazy_step(reset_each):
    """Population programs step each member's environments under vmap inside shard_map. The
    lazy reset's predicate is reduced over the member vmap axis (``CompileOptions.batch_axis``,
    passed to ``envs.step``) so the reset stays a cond: per member, vmap turned it into a
    select that reset every step, which jax 0.10.2 also rejected for a reset indexing a
    constant array (Breakout-MinAtar). Members step as each would alone, with finished
    environments reset all at once or one by one (``reset_each``, for costly resets such as
    Craftax's)."""
    import dataclasses

    from jax.sharding import Mesh, PartitionSpec as P

    spec = envs.EnvSpec(ConstantIndexReset(), "toy", (1,), 2, False, reset_each=reset_each)
    members, num_envs, num_steps = 4, 3, 12
    key_reset, key_steps, key_actions = jax.random.split(jax.random.PRNGKey(0), 3)
    slots = jax.vmap(jax.vmap(lambda k: envs.reset(spec, k)))(
        jax.random.split(key_reset, members * num_envs).reshape(members, num_envs, -1))
    keys = envs.step_keys(jax.random.split(key_steps, num_steps * members * num_envs)
                          ).reshape(num_steps, members, num_envs, 2, -1)
    actions = jax.random.randint(key_actions, (num_steps, members, num_envs), 0, 2)

    def member(spec, batch_axis=None):
        def run(slots, keys, actions):
            def body(slots, xs):
                slots, out = envs.step(spec, xs[0], slots, xs[1], batch_axis=batch_axis)
                return slots, (slots.obs, out.reward, out.terminated)
            return jax.lax.scan(body, slots, (keys, actions))[1]
        return run

    population = jax.vmap(member(spec, batch_axis="m"), (0, 1, 1),
                          axis_name="m")
    mesh = Mesh(np.array(jax.devices()[:2]).reshape(2, 1), ("member", "data"))
    sharded = jax.jit(jax.shard_map(population, mesh=mesh, check_vma=False,
                                    in_specs=(P("member"), P(None, "member"), P(None, "member")),
                                    out_specs=P("member")))
    got = sharded(slots, keys, actions)
    one = jax.jit(member(dataclasses.replace(spec, reset_each=False)))   # one compile
    alone = [one(jax.tree.map(lambda x: x[m], slots), keys[:, m], actions[:, m])
             for m in range(members)]
    want = [np.stack([a[i] for a in alone]) for i in range(3)]
    assert want[2].sum() >= 4, "too few episode ends: the reset path was not run"
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), w, rtol=1e-6)
    text = sharded.lower(slots, keys, actions).as_text()
    assert "stablehlo.case" in text, "the reset is no longer a conditional"


class DoubleReward(GymnaxWrapper):
    """A wrapper with its own step: must be stepped through it, not through step_env."""

    def step(self, key, state, action, params=None):
        obs, state, reward, term, trunc, info = self._env.step(key, state, action, params)
        return obs, state, 2.0 * reward, term, trunc, info


def test_wrapped_env_is_stepped_through_its_own_step():
    base = envs.make_env("CartPole-v1")
    spec = envs.make_env(DoubleReward(base.adapter.env), base.adapter.params)
    assert spec.autoreset == "same_step"   # declared by the gymnax suite
    slots = jax.vmap(lambda k: envs.reset(spec, k))(jax.random.split(jax.random.PRNGKey(0), 2))
    keys = envs.step_keys(jax.random.split(jax.random.PRNGKey(1), 2))
    _, out = envs.step(spec, keys, slots, jnp.zeros(2, jnp.int32))
    np.testing.assert_array_equal(out.reward, [2.0, 2.0])


def test_autoreset_is_declared_and_checked_against_what_the_spec_provides():
    """Each spec declares its auto-reset kind; left out, it follows what the spec provides; a
    kind that does not match is a one-line error; host environments are not stepped here."""
    common = dict(name="toy", obs_shape=(1,), action_dim=2, continuous=False)
    assert envs.EnvSpec(ConstantIndexReset(), **common).autoreset == "lazy"
    assert envs.EnvSpec(None, pool=object(), **common).autoreset == "next_step"
    host = envs.EnvSpec(None, host=lambda n: None, **common)
    assert host.autoreset == "host" and not host.resets_late
    assert envs.EnvSpec(None, pool=object(), **common).resets_late
    assert set(envs.AUTORESETS) == {"lazy", "same_step", "next_step", "host"}
    with pytest.raises(envs.EnvError, match="not one of"):
        envs.EnvSpec(ConstantIndexReset(), autoreset="eager", **common)
    with pytest.raises(envs.EnvError, match="provides adapter"):
        envs.EnvSpec(ConstantIndexReset(), autoreset="next_step", **common)
    with pytest.raises(envs.EnvError, match="provides adapter, host"):
        envs.EnvSpec(ConstantIndexReset(), host=lambda n: None, autoreset="host", **common)
    with pytest.raises(envs.EnvError, match="step_autoreset"):
        envs.EnvSpec(ConstantIndexReset(), autoreset="same_step", **common)
    with pytest.raises(envs.EnvError, match="host actors"):
        envs.step(host, None, None, None)


DEFERRED_IMPORTS = """
import sys
from jaxrl_dist.envs import make_env
spec = make_env("SpaceInvaders-MinAtar")
assert type(sys.modules["seaborn"]).__name__ == "_ImportedOnUse", sys.modules["seaborn"]
assert "pandas" not in sys.modules and "scipy.stats" not in sys.modules
import seaborn, matplotlib.pyplot as plt
assert len(seaborn.color_palette("cubehelix", 3)) == 3   # the real seaborn, imported on use
assert type(sys.modules["seaborn"]).__name__ == "module" and "pandas" in sys.modules
plt.figure()
print("ok")
"""


@pytest.mark.timeout(120)
def test_gymnax_render_libraries_are_imported_on_first_use():
    """gymnax imports seaborn/matplotlib for rendering only; we defer them (seconds per
    process), and they still work when used."""
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-c", DEFERRED_IMPORTS], capture_output=True,
                         text=True, timeout=100, env={**__import__("os").environ,
                                                      "MPLBACKEND": "Agg"})
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_rollout_outputs_pack_by_dtype_and_unpack_exactly():
    """The step loop's outputs travel as one array per dtype; unpacking (with the scan's extra
    leading axis) gives back every leaf exactly, None leaves included."""
    from jaxrl_dist.rollout import pack_by_dtype

    rng = np.random.default_rng(0)
    tree = {"obs": jnp.asarray(rng.normal(size=(3, 2, 2)), jnp.float32),
            "action": jnp.asarray([2**30, -7, 5], jnp.int32),   # not exact in float32
            "done": jnp.asarray([True, False, True]), "mask": None,
            "reward": jnp.asarray(rng.normal(size=3), jnp.float32)}
    packed, unpack = pack_by_dtype(tree)
    assert {k: v.shape for k, v in packed.items()} == {
        "float32": (3, 5), "int32": (3, 1), "bool": (3, 1)}
    stacked = jax.tree.map(lambda x: jnp.stack([x, x]), packed)   # as a scan stacks [T, E, K]
    out = unpack(stacked)
    assert out["mask"] is None
    for name in ("obs", "action", "done", "reward"):
        assert out[name].dtype == tree[name].dtype
        np.testing.assert_array_equal(out[name][0], tree[name])
    # one leaf alone, as the host actors read each step's environment action (a numpy view)
    names = sorted(k for k in tree if tree[k] is not None)   # the flattened tree's order
    host = jax.device_get(stacked)
    for i, name in enumerate(names):
        np.testing.assert_array_equal(unpack.leaf(host, i)[1], tree[name])
    np.testing.assert_array_equal(unpack.leaf(host, -1)[0], tree[names[-1]])


def test_acting_parameters_ravel_by_dtype_and_back_exactly():
    """The host actors hand ``act`` its parameters as one flat array per dtype; unravelling
    inside the program gives back every leaf exactly (an int32 count is not cast to float)."""
    from jaxrl_dist.actors import ravel_by_dtype

    rng = np.random.default_rng(1)
    tree = {"params": {"w": jnp.asarray(rng.normal(size=(3, 4)), jnp.float32),
                       "b": jnp.asarray(rng.normal(size=4), jnp.float32)},
            "count": jnp.asarray(2**30 + 1, jnp.int32), "empty": ()}
    flat, unravel = ravel_by_dtype(tree)
    assert {k: v.shape for k, v in flat.items()} == {"float32": (16,), "int32": (1,)}
    out = jax.jit(unravel)(flat)
    assert jax.tree.structure(out) == jax.tree.structure(tree)
    for got, want in zip(jax.tree.leaves(out), jax.tree.leaves(tree)):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
