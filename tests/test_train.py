"""End to end through the trainer: learning, run files, custom environments, run dirs."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct
from gymnax.environments import spaces

from helpers import TINY
from jaxrl_dist import config as config_lib
from jaxrl_dist.trainer import RunError, train


@pytest.mark.timeout(600)
def test_cartpole_learns_and_writes_run_files(tmp_path):
    config = config_lib.load("configs/cartpole.yaml", ["total_timesteps=40960"])
    summary = train(config, tmp_path / "run", devices=jax.devices()[:1], progress=False)
    rows = [json.loads(line) for line in (tmp_path / "run/metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 8   # 80 updates, one row per call of 10
    first, last = rows[0]["episode_return"], rows[-1]["episode_return"]
    assert first < 50 and last > 100 and last > 3 * first, (first, last)
    for key in ("env_steps", "episode_return", "sps", "policy_loss", "value_loss", "approx_kl",
                "clip_fraction", "entropy", "explained_variance", "learning_rate"):
        assert key in rows[-1], key
    assert rows[-1]["env_steps"] == 40960 and rows[0]["learning_rate"] > rows[-1]["learning_rate"]
    saved = json.loads((tmp_path / "run/summary.json").read_text())
    for key in ("env_steps", "updates", "wall_time_s", "compile_time_s", "sps", "final_return",
                "param_norm", "param_fingerprint", "num_devices", "num_processes", "jax_version"):
        assert key in saved, key
    assert saved["param_fingerprint"] == summary["param_fingerprint"]
    assert len(saved["param_fingerprint"]) == 64 and saved["param_norm"] > 0
    assert config_lib.load(tmp_path / "run/config.yaml") == config  # resolved config round-trips


@struct.dataclass
class ChainState:
    time: jnp.ndarray
    pos: jnp.ndarray


@struct.dataclass
class ChainParams:
    max_steps_in_episode: int = 10


class Chain:
    """A user's gymnax-style env with the OLD 5-tuple step (one done flag): reward 1 for
    action 1, episodes of 10 steps."""

    default_params = ChainParams()

    def reset(self, key, params):
        return jnp.zeros(2), ChainState(jnp.int32(0), jnp.float32(0))

    def step(self, key, state, action, params):
        t = state.time + 1
        done = t >= params.max_steps_in_episode
        new = ChainState(jnp.where(done, 0, t), jnp.where(done, 0.0, state.pos + action))
        obs = jnp.stack([new.time / 10.0, new.pos / 10.0])
        return obs, new, action.astype(jnp.float32), done, {}

    def action_space(self, params):
        return spaces.Discrete(2)

    def observation_space(self, params):
        return spaces.Box(0.0, 1.0, (2,))


def test_custom_env_object_trains(tmp_path):
    config = config_lib.from_dict({**TINY, "total_timesteps": 8 * 16 * 12,
                                   "ppo": {**TINY["ppo"], "learning_rate": 1e-2}})
    summary = train(config, tmp_path / "run", env=Chain(), devices=jax.devices()[:2],
                    progress=False)
    rows = [json.loads(line) for line in (tmp_path / "run/metrics.jsonl").read_text().splitlines()]
    assert summary["env"] == "Chain" and summary["num_devices"] == 2
    # every episode is exactly 10 steps and pays between 0 and 10
    assert all(r["episode_length"] == 10 for r in rows)
    assert 0 <= rows[0]["episode_return"] <= 10 and rows[-1]["episode_return"] > rows[0][
        "episode_return"]


def test_existing_run_is_never_overwritten(tmp_path, tiny_config):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("precious\n")
    with pytest.raises(RunError, match="already holds a run"):
        train(tiny_config, run, devices=jax.devices()[:1], progress=False)
    assert (run / "metrics.jsonl").read_text() == "precious\n"
    assert not (run / "config.yaml").exists()


def test_replica_check_catches_diverged_devices():
    from jax.sharding import NamedSharding

    from jaxrl_dist import sharding
    from jaxrl_dist.integrity import check_replicas

    layout = sharding.make_layout(jax.devices()[:2])
    replicated = NamedSharding(layout.mesh, sharding.REPLICATED)
    same = jax.device_put(jnp.arange(3.0), replicated)
    check_replicas({"w": same}, layout)  # identical replicas pass
    # a "replicated" array whose two device copies differ, as after a silent divergence
    copies = [jax.device_put(jnp.arange(3.0) + i, d) for i, d in enumerate(jax.devices()[:2])]
    diverged = jax.make_array_from_single_device_arrays((3,), replicated, copies)
    with pytest.raises(RunError, match="replicas differ"):
        check_replicas({"w": same, "b": diverged}, layout)


def test_replica_check_is_per_member():
    """Members differ by design; only copies of the SAME member must agree."""
    from jaxrl_dist import sharding
    from jaxrl_dist.integrity import check_replicas

    by_member = sharding.make_layout(jax.devices()[:2], members=2, member_devices=2)
    members = by_member.put(np.arange(6.0).reshape(2, 3), by_member.train)
    check_replicas({"w": members}, by_member)   # two different members, one copy each: fine
    by_data = sharding.make_layout(jax.devices()[:2], members=2, member_devices=1)
    sharding_ = by_data.sharding(by_data.train)
    copies = [jax.device_put(np.arange(6.0).reshape(2, 3) + i, d)
              for i, d in enumerate(jax.devices()[:2])]
    diverged = jax.make_array_from_single_device_arrays((2, 3), sharding_, copies)
    with pytest.raises(RunError, match="replicas differ"):
        check_replicas({"w": diverged}, by_data)


def test_a_synchronous_calls_row_speed_ends_when_the_call_returned():
    """Host actors' calls return once their environments have stepped; their rows are logged
    after the NEXT call, so a row's interval must end at the stamp taken when its own call
    returned (else the last row counts 10 calls' steps over 9 calls' time), less the seconds
    spent in hooks up to then."""
    import time

    from jaxrl_dist.trainer import _Speed

    speed = _Speed(None)
    t0 = speed.marks[0][0]
    assert speed.rate(1000, (t0 + 2.0, 0.0)) == pytest.approx(500.0)
    time.sleep(0.05)   # logged later than the call returned: that time does not count
    assert speed.rate(1000, (t0 + 4.0, 1.0)) == pytest.approx(2000 / 3.0)
    assert speed.stamp()[0] > t0


def test_row_sps_is_training_speed_with_slow_evaluations_and_checkpoints(tmp_path, monkeypatch):
    """metrics.jsonl's sps (and the progress line's) is env steps over the time training them
    took: a row whose interval held an evaluation and a checkpoint neither dips nor is followed
    by a spike. Each hook takes 100 s on the trainer's clock (a clock that jumps, not a sleep),
    so the test does not depend on how loaded the machine is: a background save or another
    test's checkpoint slowing a real call by a second (stop 73's CI, 2026-11-29) is 1 % of it."""
    import time as time_lib

    from jaxrl_dist import checkpoint as checkpoint_lib
    from jaxrl_dist import trainer as trainer_lib

    class Clock:
        """The trainer's ``time``: real time plus every hook's 100 s."""
        skipped = 0.0

        def __getattr__(self, name):
            return getattr(time_lib, name)

        def perf_counter(self):
            return time_lib.perf_counter() + self.skipped

    clock = Clock()
    slow_save = checkpoint_lib.Checkpointer.save
    slow_eval = trainer_lib._evaluate

    def save(self, *args, **kwargs):
        clock.skipped += 100.0
        return slow_save(self, *args, **kwargs)

    def evaluate(*args, **kwargs):
        clock.skipped += 100.0
        return slow_eval(*args, **kwargs)

    monkeypatch.setattr(trainer_lib, "time", clock)
    monkeypatch.setattr(checkpoint_lib.Checkpointer, "save", save)
    monkeypatch.setattr(trainer_lib, "_evaluate", evaluate)
    config = config_lib.from_dict({**TINY, "total_timesteps": 8 * 16 * 24, "updates_per_call": 2,
                                   "eval_every": 6, "checkpoint_every": 4})
    summary = train(config, tmp_path / "run", devices=jax.devices()[:1], progress=False)
    rows = [json.loads(line) for line in (tmp_path / "run/metrics.jsonl").read_text().splitlines()]
    sps = np.array([r["sps"] for r in rows])
    assert any("eval/return_mean" in r for r in rows)
    # 11 hooks (7 saves, 4 evaluations) hold 1,100 s of the loop; a row of 2 updates is 256 env
    # steps and its window at most 10 rows, so a row that counted even one hook reads under
    # 2,560 / 100 = 26 env steps/s. Training itself runs thousands a second here (hundreds
    # on a loaded machine): every row must read above 4x that bound
    assert summary["sps"] < 26, summary["sps"]   # the loop's average does count the hooks
    assert sps.min() > 100, sps
    assert sps.max() < 20 * np.median(sps), sps   # and no spike


def test_updates_per_call_is_a_divisor_near_the_one_asked_so_one_program_runs():
    """A call count that does not divide the run's updates leaves a remainder call: a second
    update program to compile (MPE spread's 2M steps, 976 updates at 50 a call: 19 calls of 50
    and one of 26, 5 s more compile). The largest divisor in [wanted/2, wanted] is taken, else
    the smallest up to 2 x wanted, else wanted itself (a prime count keeps its remainder).
    Grouping changes no bits (param_fingerprint equal for 5, 8 and 16 a call on MPE, 2026-11-29)."""
    from jaxrl_dist.sizes import choose_updates_per_call as choose

    assert choose(976, 50) == 61 and choose(244, 50) == 61   # none in [25, 50]
    assert choose(96, 10) == 8 and choose(100, 10) == 10      # at or below it first
    assert choose(7, 10) == 7 and choose(241, 50) == 50       # the whole run; a prime count
    assert choose(122, 4) == 2 and choose(61, 4) == 4         # a prime beyond 2 x 4: remainder


def _slow_evaluation_compile(monkeypatch, before_compile):
    """The evaluation program as built, but its compile first calls ``before_compile``."""
    from jaxrl_dist import programs

    real = programs.make_eval_program

    class Lowered:
        def __init__(self, lowered):
            self.lowered = lowered

        def compile(self, *args):
            before_compile()
            return self.lowered.compile(*args)

    class Program:
        def __init__(self, jitted):
            self.jitted = jitted

        def lower(self, *args):
            return Lowered(self.jitted.lower(*args))

        def __call__(self, *args):
            return self.jitted(*args)

    monkeypatch.setattr(programs, "make_eval_program",
                        lambda *args, **kwargs: Program(real(*args, **kwargs)))


def test_training_starts_before_the_evaluation_is_compiled(tmp_path, monkeypatch):
    """The evaluation compiles in the background: its compile here waits until training has
    logged a row (which it could not if the run waited for the compile first), and the final
    evaluation waits for it."""
    import time

    rows = tmp_path / "run/metrics.jsonl"

    def after_training_started():
        deadline = time.monotonic() + 120
        while not (rows.exists() and rows.read_text().strip()):
            if time.monotonic() > deadline:
                raise RuntimeError("training did not start before the evaluation compiled")
            time.sleep(0.05)

    _slow_evaluation_compile(monkeypatch, after_training_started)
    config = config_lib.from_dict({**TINY, "eval_episodes": 2})
    summary = train(config, tmp_path / "run", devices=jax.devices()[:1], progress=False)
    assert summary["eval_return"] is not None and "evaluate" in summary["compile_programs_s"]


def test_an_evaluation_that_fails_to_compile_ends_the_run_before_its_first_evaluation(
        tmp_path, monkeypatch):
    """A background compile's failure is raised at the next check of background work, not
    after training to the first evaluation (here: the end of the run)."""
    from jaxrl_dist import trainer as trainer_lib

    def fail():
        raise RuntimeError("the evaluation did not compile")

    _slow_evaluation_compile(monkeypatch, fail)
    monkeypatch.setattr(trainer_lib, "CHECK_WRITES_S", 0.0)   # check after every call
    config = config_lib.from_dict({**TINY, "total_timesteps": 8 * 16 * 60,
                                   "updates_per_call": 1, "eval_every": 0})
    with pytest.raises(RuntimeError, match="did not compile"):
        train(config, tmp_path / "run", devices=jax.devices()[:1], progress=False)
    rows = (tmp_path / "run/metrics.jsonl").read_text().splitlines()
    assert len(rows) < 60, len(rows)   # it stopped before the last of 60 updates
