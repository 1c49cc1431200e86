"""Populations: seeds x sweep values as a member axis of one program.

Member k must be the single run with its seed and hyperparameters. Not bitwise: under ``vmap``
XLA batches the matmuls and reductions of all members into different CPU kernels than one
member's, so sums round differently (measured ~1e-10 relative after 6 updates); 1e-5 is the bar.
"""

import json

import jax
import numpy as np
import pytest

from helpers import SMALL, TINY, max_rel_diff, run_launcher, summaries, train_cli
from jaxrl_dist import config as config_lib, population
from jaxrl_dist.checkpoint import read_checkpoint
from jaxrl_dist.config import ConfigError
from jaxrl_dist.trainer import train

LRS = [2.5e-4, 1e-3]
POP = {**TINY, "population": {"seeds": [3, 11], "sweep": {"ppo.learning_rate": LRS}}}
# members, seed fastest: 0 = (3, 2.5e-4), 1 = (11, 2.5e-4), 2 = (3, 1e-3), 3 = (11, 1e-3)
CHECKED = (1, 2)   # a member of each seed and of each rate


def final_params(run_dir):
    state, meta = read_checkpoint(run_dir / "checkpoints")
    assert meta["updates"] == 6
    return state


@pytest.fixture(scope="module")
def singles(tmp_path_factory):
    config = config_lib.from_dict(POP)
    out = {}
    for k in CHECKED:
        run = tmp_path_factory.mktemp(f"single{k}") / "run"
        train(population.member_config(config, k), run, devices=jax.devices()[:1],
              progress=False)
        out[k] = final_params(run)["train"]["params"]
    return out


@pytest.mark.timeout(600)
@pytest.mark.parametrize("devices", [1, 2])
@pytest.mark.slow
def test_member_k_is_the_single_run_and_has_its_own_rate(singles, devices, tmp_path):
    config = config_lib.from_dict(POP)
    summary = train(config, tmp_path / "run", devices=jax.devices()[:devices], progress=False)
    state = final_params(tmp_path / "run")
    for k in CHECKED:
        member = jax.tree.map(lambda x, k=k: x[k], state["train"]["params"])
        assert max_rel_diff(member, singles[k]) <= 1e-5, k
    # the swept rate lives in the state, one per member, and drives the optimizer
    np.testing.assert_array_equal(state["train"]["hparams"]["learning_rate"],
                                  np.float32([LRS[0], LRS[0], LRS[1], LRS[1]]))
    rows = [json.loads(line) for line in (tmp_path / "run/metrics.jsonl").read_text().splitlines()]
    last = {r["member"]: r for r in rows if r["updates"] == 6}
    assert sorted(last) == [0, 1, 2, 3]
    assert last[2]["learning_rate"] == pytest.approx(4 * last[0]["learning_rate"], rel=1e-6)
    # the summary: one entry per member with its seed and value, and aggregates
    members = summary["members"]
    assert [(m["seed"], m["ppo.learning_rate"]) for m in members] == [
        (3, LRS[0]), (11, LRS[0]), (3, LRS[1]), (11, LRS[1])]
    assert len({m["param_fingerprint"] for m in members}) == 4
    agg = summary["population"]["eval_return"]
    assert agg["n"] == 4 and agg["min"] <= agg["mean"] <= agg["max"]
    assert agg["mean"] == pytest.approx(np.mean([m["eval_return"] for m in members]))
    assert sorted(p.name for p in (tmp_path / "run/tb").glob("member_*")) == [
        f"member_{k:03d}" for k in range(4)]
    if devices == 2:   # the population plot: curves per swept rate + final return vs rate
        from jaxrl_dist import plot
        assert plot.main([str(tmp_path / "run"), "-o", str(tmp_path / "pop.png")]) == 0
        assert (tmp_path / "pop.png").stat().st_size > 10_000


@pytest.mark.parametrize("key", ["network.hidden_sizes", "num_envs", "ppo.num_minibatches"])
def test_sweeping_a_shape_is_a_one_line_error(key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        config_lib.from_dict({**TINY, "population": {"sweep": {key: [1, 2]}}})


@pytest.mark.parametrize("population_cfg, words", [
    ({"seeds": [1, 1]}, "distinct"),
    ({"sweep": {"ppo.learning_rate": []}}, "ppo.learning_rate"),
    ({"sweep": {"ppo.gamma": [0.9, 1.5]}}, "ppo.gamma"),
    ({"size": 3}, "size"),
])
def test_bad_population_config(population_cfg, words):
    with pytest.raises(ConfigError, match=words):
        config_lib.from_dict({**TINY, "population": population_cfg})


def test_bad_sweep_from_the_command_line(tmp_path, capsys):
    from jaxrl_dist import train as train_cli
    code = train_cli.main(["configs/cartpole.yaml", "--set",
                           "population.sweep.network.activation=[relu,tanh]",
                           "--run-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "network.activation" in err, err
    assert not (tmp_path / "run").exists()


# 4 members (2 seeds x 2 rates) of SMALL: 20 updates, a checkpoint every 5.
POP_ARGS = [*SMALL, "--set", "population.seeds=[3,11]",
            "--set", f"population.sweep.ppo.learning_rate=[{LRS[0]},{LRS[1]}]"]


def member_prints(summary):
    return [m["param_fingerprint"] for m in summary["members"]]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uninterrupted population, 1 process x 2 devices."""
    run = tmp_path_factory.mktemp("popref") / "run"
    proc, _ = train_cli(run, args=POP_ARGS)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1].startswith("CartPole-v1: 4 members, final")
    return json.loads((run / "summary.json").read_text())


@pytest.mark.timeout(600)
@pytest.mark.slow
def test_population_resumes_exactly_after_kill_9(reference, tmp_path):
    run = tmp_path / "run"
    proc, _ = train_cli(run, args=POP_ARGS, JAXRL_FAULT="kill@0:12")
    assert proc.returncode == -9
    proc, _ = train_cli(run, "--resume", args=POP_ARGS)
    assert proc.returncode == 0, proc.stderr[-3000:]
    resumed = json.loads((run / "summary.json").read_text())
    assert member_prints(resumed) == member_prints(reference)


@pytest.mark.timeout(600)
@pytest.mark.slow
def test_population_through_the_launcher_equals_one_process(reference, tmp_path):
    run = tmp_path / "run"
    proc = run_launcher(["--nproc-per-node", "2", "--cpu-devices-per-proc", "1",
                         "configs/cartpole.yaml", *POP_ARGS, "--run-dir", str(run)], timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = summaries(run / "logs")
    assert ranks[0]["param_fingerprint"] == ranks[1]["param_fingerprint"]
    # the same layout (2 members per device, no collectives between devices): bitwise
    assert member_prints(json.loads((run / "summary.json").read_text())) == \
        member_prints(reference)
