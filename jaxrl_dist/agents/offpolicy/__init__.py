"""The off-policy actor-critics for continuous actions, SAC and TD3: one package, the critics,
targets, replay and ``learn`` shared, each algorithm only its actor (:mod:`.networks`) and its
actor's losses (:mod:`.learner`). Sections and records in :mod:`.config` (jax-free)."""
