"""The off-policy actor-critics for continuous actions, SAC, TD3 and CrossQ: one package, the
critics, replay and ``learn`` shared, each algorithm only its actor and its targets
(:mod:`.networks`; CrossQ: none, batch renormalisation in :mod:`.renorm` instead) and its
actor's losses (:mod:`.learner`). Sections and records in :mod:`.config` (jax-free)."""
