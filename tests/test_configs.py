"""Every shipped config still loads, compiles and trains: two updates each, in one place (the
CleanRL-style check that a change to a learner, an environment adapter or the config schema
broke none of them). The configs' learning results are in docs/learning.md; this checks only
that each runs end to end (init, update, evaluation, checkpoint, summary) with finite
parameters. Suites whose compiles exceed the CI budget on 2 cores run with
JAXRL_DIST_FULL_TESTS=1, as in test_env_suites.py."""

import glob
import math
import os

import jax
import pytest

from jaxrl_dist import config as config_lib
from jaxrl_dist import sizes as sizes_lib
from jaxrl_dist.envs import registry
from jaxrl_dist.trainer import train

CONFIGS = sorted(glob.glob("configs/*.yaml"))
# Seconds to compile and run two updates on the 2-core CI machine decide which run by default.
WITHIN_BUDGET = {"gymnax"}


def needed_plugins(path: str) -> str:
    """The plugin modules a config's header says to run it with (its ``JAXRL_DIST_PLUGINS=...``
    run line, e.g. configs/gymnasium_cartpole_pomdp_gru.yaml's): a config whose environment a
    plugin registers says so there, and this reads it."""
    for line in open(path):
        if not line.startswith("#"):
            break
        for word in line.split():
            if word.startswith("JAXRL_DIST_PLUGINS="):
                return word.split("=", 1)[1]
    return ""


def test_a_config_of_a_plugins_environment_names_the_plugin_in_its_header():
    assert needed_plugins("configs/gymnasium_cartpole_pomdp_gru.yaml") == \
        "examples.cartpole_no_velocity"
    assert needed_plugins("configs/cartpole.yaml") == ""


@pytest.mark.timeout(600)
@pytest.mark.parametrize("path", CONFIGS)
def test_shipped_config_trains_two_updates(path, tmp_path, monkeypatch):
    plugins = needed_plugins(path)
    if plugins:   # a config never names code to import; its header's run line does
        monkeypatch.setenv("JAXRL_DIST_PLUGINS", plugins)
    config = config_lib.load(path)
    suite = registry.parse(config.env)[0]
    if not registry.available(suite):
        pytest.skip(f"optional extra '{suite}' is not installed")
    if suite not in WITHIN_BUDGET and not os.environ.get("JAXRL_DIST_FULL_TESTS"):
        pytest.skip(f"{suite}: its compiles exceed the CI budget on 2 cores; run with "
                    f"JAXRL_DIST_FULL_TESTS=1")
    batch = sizes_lib.derive_sizes(config, 1).batch_size
    overrides = [f"total_timesteps={2 * batch}", "updates_per_call=1", "eval_episodes=2"]
    if hasattr(config.agent, "learning_starts"):   # a replay's warm-up: learn in the second
        overrides.append(f"{config.algo}.learning_starts={batch}")   # update
    if hasattr(config.agent, "buffer_size"):   # 4 updates' worth (at least one sampled
        # batch): the same program, without Atari's 5.6 GB of frames to allocate and digest
        # (breakout_dqn and pong_dqn: 545 and 239 s in the extended tier's 2 workers; both
        # 125 s alone with this, 2026-11-28)
        updates = max(4, -(-config.agent.batch_size // batch))
        overrides.append(f"{config.algo}.buffer_size={updates * batch}")
    config = config_lib.load(path, overrides)
    summary = train(config, tmp_path / "run", devices=jax.devices()[:1], progress=False)
    assert summary["status"] == "completed" and summary["updates"] == 2, summary["status"]
    assert math.isfinite(summary["param_norm"]) and summary["eval_return"] is not None
    assert (tmp_path / "run" / "summary.json").exists()
