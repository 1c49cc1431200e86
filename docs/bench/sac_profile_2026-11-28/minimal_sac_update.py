"""Minimal SAC update (sbx/CleanRL shape) on HalfCheetah sizes: ms per gradient step."""
import os, sys, time
import jax, jax.numpy as jnp, flax.linen as nn, optax
B, O, A, H = 256, 17, 6, 256
class Critic(nn.Module):
    @nn.compact
    def __call__(self, o, a):
        x = jnp.concatenate([o, a], -1)
        x = nn.relu(nn.Dense(H)(x)); x = nn.relu(nn.Dense(H)(x))
        return nn.Dense(1)(x)[:, 0]
class Actor(nn.Module):
    @nn.compact
    def __call__(self, o):
        x = nn.relu(nn.Dense(H)(o)); x = nn.relu(nn.Dense(H)(x))
        return nn.Dense(A)(x), nn.Dense(A)(x)
critic, actor = Critic(), Actor()
o0, a0 = jnp.zeros((1, O)), jnp.zeros((1, A))
def cinit(k): return jax.vmap(lambda k: critic.init(k, o0, a0)["params"])(jax.random.split(k, 2))
def capply(p, o, a): return jax.vmap(lambda p: critic.apply({"params": p}, o, a))(p)
def sample(pa, o, eps):
    m, ls = actor.apply({"params": pa}, o)
    ls = -5 + 3.5 * (jnp.tanh(ls) + 1); std = jnp.exp(ls)
    u = m + std * eps; a = jnp.tanh(u)
    lp = (-0.5 * eps**2 - ls - 0.5 * jnp.log(2 * jnp.pi)).sum(-1) - jnp.log(1 - a**2 + 1e-6).sum(-1)
    return a, lp
opt = optax.adam(3e-4)
def init(k):
    k1, k2 = jax.random.split(k)
    p = {"c": cinit(k1), "a": actor.init(k2, o0)["params"], "la": jnp.float32(0.)}
    return p, jax.tree.map(jnp.copy, p["c"]), {n: opt.init(p[n]) for n in p}
def step(carry, k):
    p, tc, os_, buf = carry
    ks = jax.random.split(k, 4)
    idx = jax.random.randint(ks[0], (B,), 0, buf["o"].shape[0])
    o, a, r, o2, d = buf["o"][idx], buf["a"][idx], buf["r"][idx], buf["o2"][idx], buf["d"][idx]
    a2, lp2 = sample(p["a"], o2, jax.random.normal(ks[1], (B, A)))
    y = r + 0.99 * d * (jnp.min(capply(tc, o2, a2), 0) - jnp.exp(p["la"]) * lp2)
    def closs(c): return 0.5 * ((capply(c, o, a) - y) ** 2).sum(0).mean()
    g = jax.grad(closs)(p["c"]); u, os_c = opt.update(g, os_["c"]); c = optax.apply_updates(p["c"], u)
    eps = jax.random.normal(ks[2], (B, A))
    def aloss(t):
        an, lp = sample(t["a"], o, eps)
        q = jnp.min(capply(c, o, an), 0)
        return (jnp.exp(jax.lax.stop_gradient(t["la"])) * lp - q).mean() - t["la"] * jax.lax.stop_gradient(lp + A).mean()
    g = jax.grad(aloss)({"a": p["a"], "la": p["la"]})
    u, os_a = opt.update(g["a"], os_["a"]); pa = optax.apply_updates(p["a"], u)
    u, os_l = opt.update(g["la"], os_["la"]); la = optax.apply_updates(p["la"], u)
    tc = jax.tree.map(lambda x, y: 0.005 * x + 0.995 * y, c, tc)
    return ({"c": c, "a": pa, "la": la}, tc, {"c": os_c, "a": os_a, "la": os_l}, buf), None
N = int(os.environ.get("N", 200))
@(lambda f: jax.jit(f, donate_argnums=0) if os.environ.get("DON") else jax.jit(f))
def run(carry, k):
    return jax.lax.scan(step, carry, jax.random.split(k, N))[0]
k = jax.random.PRNGKey(0)
p, tc, os_ = init(k)
R = int(os.environ.get("R", 100000))
buf = {"o": jax.random.normal(k, (R, O)), "a": jnp.zeros((R, A)), "r": jnp.zeros(R), "o2": jax.random.normal(jax.random.PRNGKey(5), (R, O)), "d": jnp.ones(R)}
carry = (p, tc, os_, buf)
t = time.perf_counter(); carry = run(carry, k); jax.block_until_ready(carry); print("compile+first", round(time.perf_counter() - t, 2))
import numpy as np
ts = []
for i in range(max(5, 400 // N)):
    t = time.perf_counter(); carry = run(carry, jax.random.PRNGKey(i)); jax.block_until_ready(carry); ts.append((time.perf_counter() - t) / N * 1e3)
print(os.environ.get("XLA_FLAGS", ""), "N", N, "ms/update median", round(float(np.median(ts)), 2), "p10", round(float(np.percentile(ts, 10)), 2))
ca = run.lower(carry, k).compile().cost_analysis()
ca = ca[0] if isinstance(ca, list) else ca
print("GFLOP/update", ca.get("flops", 0) / N / 1e9, "bytes/update MB", ca.get("bytes accessed", 0)/N/1e6)
