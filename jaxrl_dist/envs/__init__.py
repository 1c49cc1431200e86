"""Environments: one protocol (``base``), one adapter module per suite, a ``suite:name``
registry. Unprefixed names are gymnax ids; the other suites are optional extras."""

from jaxrl_dist.envs.base import (AUTORESETS, CompileOptions, EnvError, EnvSlot, EnvSpec,
                                  ObservationSubset, Step, StepOutput, TimeLimit,
                                  flatten_observation, program_inputs, reset, reset_batch,
                                  step, step_keys, to_env_action)
from jaxrl_dist.envs.registry import SUITES, from_config, make_env, parse

__all__ = ["AUTORESETS", "CompileOptions", "EnvError", "EnvSlot", "EnvSpec", "ObservationSubset",
           "Step", "StepOutput",
           "TimeLimit", "SUITES", "flatten_observation", "from_config", "make_env", "parse",
           "program_inputs", "reset", "reset_batch", "step", "step_keys", "to_env_action"]
