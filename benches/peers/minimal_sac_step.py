"""The least a SAC gradient step can cost here: sbx's / CleanRL's update (twin 256x256 critics,
a 256x256 actor, log(alpha), Adam, Polyak targets, one sampled batch of 256 from a replay)
written plainly in flax and optax, ``N`` steps scanned in ONE compiled call (no dispatch, no
host work, no metrics, no checks), on HalfCheetah's sizes. Prints one JSON line: the median
milliseconds per gradient step over ``REPEATS`` calls.

Usage: python minimal_sac_step.py [N] [REPEATS]"""

import json
import statistics
import sys
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

B, O, A, H, R = 256, 17, 6, 256, 100_000   # batch, observation, action, hidden, replay rows


class Critic(nn.Module):
    @nn.compact
    def __call__(self, o, a):
        x = jnp.concatenate([o, a], -1)
        x = nn.relu(nn.Dense(H)(x))
        x = nn.relu(nn.Dense(H)(x))
        return nn.Dense(1)(x)[:, 0]


class Actor(nn.Module):
    @nn.compact
    def __call__(self, o):
        x = nn.relu(nn.Dense(H)(o))
        x = nn.relu(nn.Dense(H)(x))
        return nn.Dense(A)(x), nn.Dense(A)(x)


critic, actor, opt = Critic(), Actor(), optax.adam(3e-4)


def critics(params, o, a):   # the twin critics as one vmapped ensemble
    return jax.vmap(lambda p: critic.apply({"params": p}, o, a))(params)


def sample(params, o, eps):
    mean, log_std = actor.apply({"params": params}, o)
    log_std = -5 + 3.5 * (jnp.tanh(log_std) + 1)
    u = mean + jnp.exp(log_std) * eps
    a = jnp.tanh(u)
    logp = (-0.5 * eps ** 2 - log_std - 0.5 * jnp.log(2 * jnp.pi)).sum(-1)
    return a, logp - jnp.log(1 - a ** 2 + 1e-6).sum(-1)


def init(key):
    k_critic, k_actor = jax.random.split(key)
    o0, a0 = jnp.zeros((1, O)), jnp.zeros((1, A))
    params = {"c": jax.vmap(lambda k: critic.init(k, o0, a0)["params"])(
                  jax.random.split(k_critic, 2)),
              "a": actor.init(k_actor, o0)["params"], "la": jnp.float32(0.0)}
    return params, jax.tree.map(jnp.copy, params["c"]), {n: opt.init(p) for n, p in params.items()}


def step(carry, key):
    params, target, opt_state, replay = carry
    k_idx, k_next, k_now = jax.random.split(key, 3)
    idx = jax.random.randint(k_idx, (B,), 0, R)
    o, a, r, o2, d = (replay[n][idx] for n in ("o", "a", "r", "o2", "d"))
    a2, logp2 = sample(params["a"], o2, jax.random.normal(k_next, (B, A)))
    y = r + 0.99 * d * (critics(target, o2, a2).min(0) - jnp.exp(params["la"]) * logp2)
    grads = jax.grad(lambda c: 0.5 * ((critics(c, o, a) - y) ** 2).sum(0).mean())(params["c"])
    updates, opt_c = opt.update(grads, opt_state["c"])
    c = optax.apply_updates(params["c"], updates)
    eps = jax.random.normal(k_now, (B, A))

    def actor_loss(t):
        an, logp = sample(t["a"], o, eps)
        alpha = jnp.exp(jax.lax.stop_gradient(t["la"]))
        return ((alpha * logp - critics(c, o, an).min(0)).mean()
                - t["la"] * jax.lax.stop_gradient(logp + A).mean())

    grads = jax.grad(actor_loss)({"a": params["a"], "la": params["la"]})
    updates, opt_a = opt.update(grads["a"], opt_state["a"])
    new_a = optax.apply_updates(params["a"], updates)
    updates, opt_la = opt.update(grads["la"], opt_state["la"])
    new_la = optax.apply_updates(params["la"], updates)
    target = jax.tree.map(lambda x, y: 0.005 * x + 0.995 * y, c, target)
    return ({"c": c, "a": new_a, "la": new_la}, target,
            {"c": opt_c, "a": opt_a, "la": opt_la}, replay), None


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    run = jax.jit(lambda carry, key: jax.lax.scan(step, carry, jax.random.split(key, n))[0],
                  donate_argnums=0)
    key = jax.random.PRNGKey(0)
    replay = {"o": jax.random.normal(key, (R, O)), "a": jnp.zeros((R, A)), "r": jnp.zeros(R),
              "o2": jax.random.normal(jax.random.PRNGKey(1), (R, O)), "d": jnp.ones(R)}
    carry = (*init(key), replay)
    carry = jax.block_until_ready(run(carry, key))   # compile and warm up
    ms = []
    for i in range(repeats):
        begin = time.perf_counter()
        carry = jax.block_until_ready(run(carry, jax.random.PRNGKey(i + 2)))
        ms.append((time.perf_counter() - begin) / n * 1e3)
    print(json.dumps({"what": "minimal_sac_step", "jax": jax.__version__, "steps_per_call": n,
                      "ms_per_step": statistics.median(ms), "ms_per_step_all": ms}))


if __name__ == "__main__":
    main()
