"""Population-based training: the round's math on fixed vectors, the mutated rate read back from
the next update, one compile for every round, the same lineage on any topology, resume and the
launcher, and pbt.enabled=false equal to the population without a pbt: section."""

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from helpers import SMALL, TINY, run_launcher, summaries, train_cli
from jaxrl_dist import config as config_lib, pbt, population, sharding
from jaxrl_dist import sizes as sizes_lib
from jaxrl_dist.config import ConfigError
from jaxrl_dist.envs import from_config as make_env
from jaxrl_dist.programs import make_learner
from jaxrl_dist.trainer import train

LR = {"low": 1e-5, "high": 1e-2}
# 4 members of TINY (12 updates of 8 envs x 16 steps, 3 per call): a round after updates 3, 6, 9
PBT = {**TINY, "total_timesteps": 8 * 16 * 12,
       "population": {"sweep": {"ppo.learning_rate": [1e-4, 3e-4, 1e-3, 3e-3]}},
       "pbt": {"enabled": True, "interval_updates": 3, "min_episodes": 1,
               "mutations": {"ppo.learning_rate": LR, "ppo.ent_coef": {"low": 1e-4, "high": 0.1}}}}


def keys(n, seed=0):
    return jax.vmap(lambda m: jax.random.fold_in(jax.random.PRNGKey(seed), m))(jnp.arange(n))


# ---------------------------------------------------------------------------- the math

def test_rank_is_fitness_descending_ties_by_index_ineligible_last():
    fitness = jnp.float32([3, 7, 3, 9, 7, 1])
    eligible = jnp.array([True, True, True, True, True, False])
    np.testing.assert_array_equal(pbt.rank(fitness, eligible), [3, 1, 4, 0, 2, 5])
    eligible = jnp.array([True, False, True, True, True, True])   # 7 of member 1 sits out
    np.testing.assert_array_equal(pbt.rank(fitness, eligible), [3, 4, 0, 2, 5, 1])


def test_truncation_on_a_fixed_fitness_vector():
    # 8 members, quantile 0.25: top 2 = members 2 (9) and 6 (8); bottom 2 = 5 (2) and 1 (1)
    fitness = jnp.float32([5, 1, 9, 3, 7, 2, 8, 4])
    every = jnp.ones(8, bool)
    k = keys(8)
    parents = np.asarray(pbt.truncation(fitness, every, 0.25, k))
    draws = [int(jax.random.randint(k[m], (), 0, 2)) for m in (1, 5)]   # index into [2, 6]
    expected = np.arange(8)
    expected[1], expected[5] = [2, 6][draws[0]], [2, 6][draws[1]]
    np.testing.assert_array_equal(parents, expected)
    # one slot (quantile 1/8): the worst takes the best, whatever the keys
    np.testing.assert_array_equal(pbt.truncation(fitness, every, 0.125, k),
                                  [0, 2, 2, 3, 4, 5, 6, 7])
    # a tie at the top goes to the lower index; the ineligible worst is neither parent nor
    # victim, so the worst ELIGIBLE member takes the best
    fitness = jnp.float32([2, 5, 5, 1])
    np.testing.assert_array_equal(pbt.truncation(fitness, jnp.ones(4, bool), 0.25, keys(4)),
                                  [0, 1, 2, 1])
    eligible = jnp.array([True, True, True, False])
    np.testing.assert_array_equal(pbt.truncation(fitness, eligible, 0.25, keys(4)),
                                  [0, 1, 2, 3])   # 3 eligible x 0.25 < 1: no copy
    np.testing.assert_array_equal(pbt.truncation(fitness, eligible, 0.5, keys(4)),
                                  [1, 1, 2, 3])


def test_calls_end_on_every_round_after_a_resume_with_another_updates_per_call():
    """Calls end on multiples of updates_per_call, so a run resumed from a checkpoint off that
    grid (configs/cartpole_pbt.yaml's checkpoint 30 with updates_per_call=4: calls of 4 from 30
    never ended on 40 or 60 before) still ends a call on every round."""
    for wanted in (4, 5, 10):
        config = config_lib.load("configs/cartpole_pbt.yaml", [f"updates_per_call={wanted}"])
        sizes = sizes_lib.derive_sizes(config, 1)
        rounds = pbt.settings(config).rounds
        for done in (0, 30, 37):
            calls = sizes_lib.calls(sizes, done)
            ends = set((np.cumsum(calls) + done).tolist())
            assert {r for r in rounds if r > done} <= ends, (wanted, done)
            assert sum(calls) + done == sizes.num_updates and max(calls) <= wanted


def test_a_quantile_of_less_than_one_member_is_refused():
    three = {"sweep": {"ppo.learning_rate": [1e-4, 3e-4, 1e-3]}}
    with pytest.raises(ConfigError, match=r"pbt.quantile=0.25 of 3 members .* no round would "
                       r"copy anyone; set pbt.quantile >= 0.333"):
        config_lib.from_dict({**PBT, "population": three})
    config_lib.from_dict({**PBT, "population": three, "pbt": {**PBT["pbt"], "quantile": 0.34}})


def test_a_round_that_copies_no_one_says_why_in_its_row():
    from jaxrl_dist import reporting
    kept = pbt.Round(jnp.int32(2), jnp.arange(4), jnp.float32([1, 2, 3, 4]),
                     jnp.array([True, False, False, True]), {}, {})
    row, = reporting.pbt_rows({"env_steps": 10, "updates": 5}, kept)
    assert row["copies"] == 0 and row["why_no_copy"].startswith("2 of 4 members eligible")
    copied = kept._replace(parents=jnp.array([0, 1, 2, 1]))
    rows = reporting.pbt_rows({"env_steps": 10, "updates": 5}, copied)
    assert rows[0]["copies"] == 1 and "why_no_copy" not in rows[0] and len(rows) == 2


def test_the_fitness_window_sums_in_one_order_on_1_2_and_4_devices():
    """Returns that round differently in every order: the window's sums are bitwise the same
    whichever devices hold the environments (the metrics' psum adds per-device partial sums,
    which need not be)."""
    rng = np.random.default_rng(5)
    T, E = 16, 8
    returns = rng.normal(size=(T, E)).astype(np.float32) * np.float32(1e3) + \
        rng.normal(size=(T, E)).astype(np.float32) * np.float32(1e-3)
    lengths = (rng.random((T, E)) < 0.5).astype(np.int32)
    returns = returns * lengths
    out = {}
    for n in (1, 2, 4):
        mesh = sharding.make_mesh(jax.devices()[:n])
        body = jax.shard_map(lambda r, l: pbt.episode_sums(r, l, sharding.DATA_AXIS),
                             mesh=mesh, in_specs=(jax.P(None, sharding.DATA_AXIS),) * 2,
                             out_specs=jax.P(), check_vma=False)   # as populations run
        out[n] = jax.device_get(jax.jit(body)(returns, lengths))
    for n in (2, 4):
        assert out[n]["episode_return_sum"].tobytes() == out[1]["episode_return_sum"].tobytes()
        assert out[n]["episodes"] == out[1]["episodes"] == lengths.sum()


def test_round_keys_come_from_seed_round_and_member_only():
    seed = jax.random.PRNGKey(7)
    a, b = pbt.keys_of_round(seed, jnp.int32(2), 4)
    a2, _ = pbt.keys_of_round(seed, jnp.int32(2), 6)
    np.testing.assert_array_equal(a, a2[:4])   # a member's keys do not depend on M
    other, _ = pbt.keys_of_round(seed, jnp.int32(3), 4)
    assert not np.array_equal(a, other) and not np.array_equal(a, b)


def test_copy_takes_everything_but_key_and_update():
    from jaxrl_dist.agents.ppo.update import TrainState
    train = TrainState(params={"w": jnp.arange(4.0)[:, None] * jnp.ones((4, 3))},
                       opt_state=(jnp.arange(4.0),), obs_moments=jnp.arange(4.0) + 10,
                       value_moments=jnp.arange(4.0) + 20, key=jnp.arange(8).reshape(4, 2),
                       update=jnp.full(4, 5), hparams={"learning_rate": jnp.arange(4.0)})
    out = pbt.copy(train, jnp.int32([0, 3, 2, 3]))
    np.testing.assert_array_equal(out.params["w"][:, 0], [0, 3, 2, 3])
    np.testing.assert_array_equal(out.opt_state[0], [0, 3, 2, 3])
    np.testing.assert_array_equal(out.obs_moments, [10, 13, 12, 13])
    np.testing.assert_array_equal(out.hparams["learning_rate"], [0, 3, 2, 3])
    np.testing.assert_array_equal(out.key, train.key)
    np.testing.assert_array_equal(out.update, train.update)


def test_mutation_perturbs_or_resamples_within_bounds_and_only_the_copies():
    m = pbt.Mutation("learning_rate", 1e-5, 1e-2, (0.8, 1.25), True)
    values = {"learning_rate": jnp.full(64, 1e-3)}
    copied = jnp.arange(64) % 2 == 0
    out = np.asarray(pbt.mutate(values, copied, keys(64), (m,), 0.0)["learning_rate"])
    np.testing.assert_array_equal(out[1::2], np.float32(1e-3))
    np.testing.assert_allclose(sorted(set(np.round(out[::2], 9))), [8e-4, 1.25e-3], rtol=1e-6)
    clipped = pbt.mutate({"learning_rate": jnp.full(64, 9e-3)}, copied, keys(64), (m,), 0.0)
    assert float(clipped["learning_rate"].max()) == pytest.approx(1e-2)
    fresh = np.asarray(pbt.mutate(values, copied, keys(64), (m,), 1.0)["learning_rate"])[::2]
    assert (fresh >= 1e-5).all() and (fresh <= 1e-2).all() and len(set(fresh)) == 32
    # log-uniform: about half the draws below the geometric middle (3.2e-4)
    assert 8 <= (fresh < np.sqrt(1e-5 * 1e-2)).sum() <= 24


def test_lineage_names_every_copy_with_old_and_new_values():
    parents = np.array([[1, 0, -1], [1, 1, -1], [2, 1, -1]])        # [M=3, R=3]; 2 rounds ran
    history = {"lr": np.array([[0.2, 0.2, np.nan], [0.2, 0.2, np.nan], [0.3, 0.25, np.nan]])}
    rows = pbt.lineage(parents, history, {"lr": np.array([0.1, 0.2, 0.3])}, (3, 6, 9))
    assert rows == [
        {"round": 0, "updates": 3, "source": 1, "target": 0, "old": {"lr": 0.1},
         "new": {"lr": 0.2}},
        {"round": 1, "updates": 6, "source": 1, "target": 2, "old": {"lr": 0.3},
         "new": {"lr": 0.25}}]


# ---------------------------------------------------------------------------- config

@pytest.mark.parametrize("pbt_cfg, words", [
    ({"enabled": True, "mutations": {"ppo.num_minibatches": {"low": 1, "high": 4}}},
     "'ppo.num_minibatches' changes array shapes"),
    ({"quantile": 0.75}, r"pbt.quantile must be in \(0, 0.5\]"),
    ({"fitness": "reward"}, "pbt.fitness must be one of episode_return, eval"),
    ({"mutations": {"ppo.learning_rate": {"low": 1e-5}}}, "needs pbt.mutations.ppo.learning_rate.high"),
    ({"mutations": {"ppo.learning_rate": {"low": 1e-5, "high": 1e-2, "prio": "log"}}},
     "did you mean pbt.mutations.ppo.learning_rate.prior"),
    ({"mutations": {"ppo.gamma": {"low": 0.9, "high": 1.5}}}, "bound 1.5: ppo.gamma must be"),
    ({"enabled": True, "mutations": {"ppo.learning_rate": {"low": 1e-3, "high": 1e-2}}},
     r"starts at 0.0001, outside \[low, high\]"),
])
def test_bad_pbt_config_is_one_line(pbt_cfg, words):
    with pytest.raises(ConfigError, match=words) as e:
        config_lib.from_dict({**PBT, "pbt": pbt_cfg})
    assert "\n" not in str(e.value)


def test_pbt_needs_a_population():
    with pytest.raises(ConfigError, match="at least 2 members"):
        config_lib.from_dict({**TINY, "pbt": {"enabled": True}})


def test_bad_pbt_key_from_the_command_line_exits_2_in_one_line(tmp_path, capsys):
    from jaxrl_dist import train as train_cli_module
    code = train_cli_module.main(["configs/cartpole.yaml", "--set", "population.seeds=[1,2]",
                                  "--set", "pbt.enabled=true", "--set",
                                  "pbt.mutations.ppo.update_epochs.low=1", "--set",
                                  "pbt.mutations.ppo.update_epochs.high=8",
                                  "--run-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "ppo.update_epochs" in err, err


def test_mutated_keys_live_in_the_state_and_calls_end_on_rounds():
    config = config_lib.from_dict({**PBT, "updates_per_call": 5, "pbt": {
        **PBT["pbt"], "interval_updates": 6}})
    hp = population.hparams(config)
    np.testing.assert_array_equal(hp["learning_rate"], np.float32([1e-4, 3e-4, 1e-3, 3e-3]))
    np.testing.assert_array_equal(hp["ent_coef"], np.float32([0.01] * 4))   # not swept
    assert sizes_lib.derive_sizes(config, 1).updates_per_call == 3   # divides 6
    assert pbt.settings(config).rounds == (6,)
    off = config_lib.from_dict({**PBT, "pbt": {**PBT["pbt"], "enabled": False}})
    assert list(population.hparams(off)) == ["learning_rate"]   # the population's own state


# ---------------------------------------------------------------------------- in the programs

def test_the_mutated_learning_rate_is_the_one_the_next_update_uses():
    """Members with one seed start identical (same parameters, environments and keys), so
    after a round copies member 3 over member 0 both take the same gradients: with one SGD
    step per update, member 0's parameter step is member 3's scaled by exactly the ratio of
    their rates, the one the round wrote into the state."""
    config = config_lib.from_dict({**PBT, "ppo": {"update_epochs": 1, "num_minibatches": 1,
                                                  "anneal_lr": False}})
    layout = sharding.make_layout(jax.devices()[:1], members=4)
    sizes = sizes_lib.derive_sizes(config, 1)
    learner = make_learner(config, sizes, make_env(config), layout)
    seed_keys = jnp.stack([jax.random.PRNGKey(3)] * 4)
    state = learner.init(seed_keys, {k: jnp.asarray(v)
                                     for k, v in population.hparams(config).items()})
    # member 3 best, member 0 worst, all eligible
    state = state._replace(pbt=state.pbt._replace(return_sum=jnp.float32([1, 2, 3, 4]),
                                                  episodes=jnp.ones(4)))
    train, window, record = learner.exploit(state.train, state.pbt, jax.random.PRNGKey(0),
                                            None)
    parents = np.asarray(record.parents)
    assert parents[0] == 3 and (parents[1:] == [1, 2, 3]).all()
    lr = np.asarray(train.hparams["learning_rate"])
    assert lr[0] in (np.float32(3e-3 * 0.8), np.float32(3e-3 * 1.25)) or 1e-5 <= lr[0] <= 1e-2
    assert lr[0] != np.float32(3e-3)
    before = jax.device_get(train.params)   # the update donates the state
    state, metrics = learner.update(state._replace(train=train, pbt=window), 1)
    np.testing.assert_array_equal(metrics["learning_rate"][:, 0], lr)   # what optax was given
    step = jax.tree.map(lambda a, b: np.asarray(a) - np.asarray(b), state.train.params, before)
    ratio = jax.tree.map(lambda d: d[0] / np.where(d[3] == 0, np.nan, d[3]), step)
    values = np.concatenate([np.ravel(r) for r in jax.tree.leaves(ratio)])
    values = values[np.isfinite(values)]
    np.testing.assert_allclose(np.median(values), lr[0] / lr[3], rtol=1e-3)
    np.testing.assert_allclose(values, lr[0] / lr[3], rtol=5e-2)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The 4-member PBT run on n devices, each trained once when first asked for."""
    config = config_lib.from_dict(PBT)
    done = {}

    def on(n):
        if n not in done:
            done[n] = train(config, tmp_path_factory.mktemp(f"pbt{n}") / "run",
                            devices=jax.devices()[:n], progress=False)
        return done[n]
    return on


def test_one_compile_for_every_round(tmp_path, monkeypatch):
    from jaxrl_dist import trainer
    compiles = []
    in_loop = [False]
    jax.monitoring.register_event_duration_secs_listener(
        lambda event, secs, **kw: compiles.append(event) if in_loop[0] and
        event == "/jax/core/compile/backend_compile_duration" else None)
    loop = trainer.loop

    def counted(run):
        in_loop[0] = True
        try:
            loop(run)
        finally:
            in_loop[0] = False
    monkeypatch.setattr(trainer, "loop", counted)
    config = config_lib.from_dict({**PBT, "seed": 5})   # programs of its own
    summary = train(config, tmp_path / "run", devices=jax.devices()[:2], progress=False)
    assert summary["pbt"]["rounds"] == 3 and "pbt" in summary["compile_programs_s"]
    assert compiles == []   # every round ran the program compiled before the loop


def test_rounds_are_recorded_in_metrics_summary_and_state(runs):
    summary = runs(2)
    run_dir = summary["run_dir"]
    rows = [json.loads(line) for line in open(f"{run_dir}/metrics.jsonl")]
    rounds = [r for r in rows if r.get("event") == "pbt_round"]
    copies = [r for r in rows if r.get("event") == "pbt_copy"]
    assert [r["updates"] for r in rounds] == [3, 6, 9] and [r["round"] for r in rounds] == [0, 1, 2]
    assert all(len(r["parents"]) == 4 for r in rounds)
    assert len(copies) == sum(sum(p != m for m, p in enumerate(r["parents"])) for r in rounds) >= 3
    assert [{k: c[k] for k in ("round", "updates", "source", "target", "old", "new")}
            for c in copies] == summary["pbt"]["copies"]
    final = summary["pbt"]["final_hparams"]["learning_rate"]
    assert [m["final_hparams"]["learning_rate"] for m in summary["members"]] == final
    from jaxrl_dist.checkpoint import read_checkpoint
    state, _ = read_checkpoint(f"{run_dir}/checkpoints")
    assert (state["pbt"]["round"] == 3).all()
    np.testing.assert_array_equal(state["train"]["hparams"]["learning_rate"], np.float32(final))
    from jaxrl_dist import plot   # each member's return and rate, the copies marked
    assert plot.main([run_dir, "-o", f"{run_dir}/pbt.png"]) == 0
    assert Path(f"{run_dir}/pbt.png").stat().st_size > 10_000


@pytest.mark.slow
def test_same_lineage_and_parameters_on_1_2_and_4_devices(runs):
    """Members per device 4, 2, 1: the same parents; parameters to float tolerance (vmap
    over a different number of members rounds differently, tests/test_population.py)."""
    ref = runs(1)
    for n in (2, 4):
        assert runs(n)["pbt"]["copies"] == ref["pbt"]["copies"], n
        np.testing.assert_allclose(runs(n)["pbt"]["fitness"], ref["pbt"]["fitness"], rtol=1e-5)
        for a, b in zip(runs(n)["members"], ref["members"]):
            assert a["param_norm"] == pytest.approx(b["param_norm"], rel=1e-5)


def test_disabled_pbt_is_bitwise_the_population_without_a_pbt_section(tmp_path):
    with_section = config_lib.from_dict({**PBT, "pbt": {**PBT["pbt"], "enabled": False}})
    without = config_lib.from_dict({k: v for k, v in PBT.items() if k != "pbt"})
    a = train(with_section, tmp_path / "a", devices=jax.devices()[:2], progress=False)
    b = train(without, tmp_path / "b", devices=jax.devices()[:2], progress=False)
    assert [m["param_fingerprint"] for m in a["members"]] == \
        [m["param_fingerprint"] for m in b["members"]]
    assert "pbt" not in a and a["checkpointed"] == b["checkpointed"]


# ---------------------------------------------------------------------------- resume, launcher

# SMALL (20 updates of 4 envs x 32 steps, a checkpoint every 5) with 4 members and a round
# every 5 updates after the first 5
PBT_ARGS = [*SMALL, "--set", "population.sweep.ppo.learning_rate=[1e-4,3e-4,1e-3,3e-3]",
            "--set", "pbt.enabled=true", "--set", "pbt.interval_updates=5",
            "--set", "pbt.min_episodes=1",
            "--set", "pbt.mutations.ppo.learning_rate.low=1e-5",
            "--set", "pbt.mutations.ppo.learning_rate.high=1e-2"]


def member_prints(summary):
    return [m["param_fingerprint"] for m in summary["members"]]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uninterrupted PBT population, 1 process x 2 devices."""
    run = tmp_path_factory.mktemp("pbtref") / "run"
    proc, _ = train_cli(run, args=PBT_ARGS)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads((run / "summary.json").read_text())


@pytest.mark.timeout(600)
@pytest.mark.slow
def test_pbt_resumes_exactly_after_kill_9(reference, tmp_path):
    run = tmp_path / "run"
    proc, _ = train_cli(run, args=PBT_ARGS, JAXRL_FAULT="kill@0:12")   # after rounds 5, 10
    assert proc.returncode == -9
    proc, _ = train_cli(run, "--resume", args=PBT_ARGS)
    assert proc.returncode == 0, proc.stderr[-3000:]
    resumed = json.loads((run / "summary.json").read_text())
    assert resumed["pbt"]["rounds"] == 3
    assert resumed["pbt"] == reference["pbt"]
    assert member_prints(resumed) == member_prints(reference)


@pytest.mark.timeout(600)
@pytest.mark.slow
def test_pbt_through_the_launcher_on_2_processes_x_2_devices(tmp_path):
    """2 processes x 2 devices = 1 process x 4 devices, bitwise: the same members per device
    (one), the same programs; only the transport of the collectives differs. Against 2 devices
    (two members per device) the lineage is the same but parameters only to rounding: a device
    holding ONE member compiles its vmap without the unit member axis (plain dots where two
    members have batched ones), so it rounds otherwise; measured at the trainer's flags
    (AVX-512 EPYC, 2026-11-28) 1 and 2 devices (4 and 2 members per device) bitwise, 4 devices
    ~4e-8 relative in param_norm after 20 updates; at the suite's -O0 flags 9e-4."""
    run = tmp_path / "run"
    proc = run_launcher(["--nproc-per-node", "2", "--cpu-devices-per-proc", "2",
                         "configs/cartpole.yaml", *PBT_ARGS, "--run-dir", str(run)],
                        timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = summaries(run / "logs")
    assert ranks[0]["param_fingerprint"] == ranks[1]["param_fingerprint"]
    summary = json.loads((run / "summary.json").read_text())
    proc, _ = train_cli(tmp_path / "one", devices=4, args=PBT_ARGS)
    assert proc.returncode == 0, proc.stderr[-3000:]
    one_process = json.loads((tmp_path / "one" / "summary.json").read_text())
    assert summary["pbt"] == one_process["pbt"]
    assert member_prints(summary) == member_prints(one_process)


def test_a_run_too_short_for_a_round_trains(tmp_path):
    """The shipped config's two-update check (tests/test_configs.py) runs no round."""
    config = config_lib.load("configs/cartpole_pbt.yaml", [
        "total_timesteps=1024", "updates_per_call=1", "eval_episodes=2"])
    summary = train(config, tmp_path / "run", devices=jax.devices()[:1], progress=False)
    assert summary["updates"] == 2 and summary["pbt"]["rounds"] == 0
    assert summary["pbt"]["copies"] == []


def test_eval_fitness_ranks_by_the_evaluation_at_each_round(tmp_path):
    config = config_lib.from_dict({**PBT, "eval_episodes": 4,
                                   "pbt": {**PBT["pbt"], "fitness": "eval"}})
    summary = train(config, tmp_path / "run", devices=jax.devices()[:2], progress=False)
    rows = [json.loads(line) for line in (tmp_path / "run/metrics.jsonl").read_text().splitlines()]
    rounds = [r for r in rows if r.get("event") == "pbt_round"]
    assert [r["updates"] for r in rounds] == [3, 6, 9]
    # an evaluation's mean over 4 episodes: a multiple of 1/4 (CartPole's returns are integers),
    # not the training window's mean over however many episodes
    for r in rounds:
        assert all(f * 4 == int(f * 4) for f in r["fitness"]), r["fitness"]
    assert summary["pbt"]["fitness"] == rounds[-1]["fitness"]
