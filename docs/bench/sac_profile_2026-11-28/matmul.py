"""XLA:CPU matmul throughput at SAC's shapes (GFLOP/s), 100 chained products a call."""
import time, jax, jax.numpy as jnp, os
for (m,k,n) in [(256,256,256),(512,256,256),(256,23,256),(256,256,1)]:
    a = jax.random.normal(jax.random.PRNGKey(0), (m,k)); b = jax.random.normal(jax.random.PRNGKey(1), (k,n if n>1 else 256))
    b = b[:, :n]
    f = jax.jit(lambda a, b: jax.lax.fori_loop(0, 100, lambda i, x: jnp.tanh(x @ b[:, :k] if n==k else x) , a) if n==k else None)
    if n != k:
        g = jax.jit(lambda a, b: jax.lax.fori_loop(0, 100, lambda i, s: s + (a*(1+i*1e-6)) @ b, jnp.zeros((m,n))))
    else:
        g = f
    g(a,b).block_until_ready()
    ts=[]
    for _ in range(5):
        t=time.perf_counter(); g(a,b).block_until_ready(); ts.append((time.perf_counter()-t)/100)
    t=min(ts); print((m,k,n), f"{t*1e6:.0f} us", f"{2*m*k*n/t/1e9:.1f} GFLOP/s")
