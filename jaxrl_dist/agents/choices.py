"""Names a config may choose that every learner shares, declared once: hidden activations
(flax.linen functions of these names) and how gradients are clipped (see
:mod:`jaxrl_dist.agents.optimizer`). jax-free: the CLI checks a config before jax is imported."""

ACTIVATIONS = ("tanh", "relu", "gelu", "silu", "swish", "elu")
GRAD_CLIPS = ("global_norm", "element")
