"""Bad input: one line on stderr, exit code 2, no traceback, nothing written."""

import subprocess
import sys

import pytest

from jaxrl_dist import train as train_cli

CFG = "configs/cartpole.yaml"
DQN = "configs/cartpole_dqn.yaml"
PQN = "configs/cartpole_pqn.yaml"

BAD = [  # (argv, words the one-line message must contain)
    ([CFG, "--set", "ppo.foo=1"], ["'ppo.foo'", "--help-config lists every key"]),
    ([CFG, "--set", "nope=1"], ["'nope'", "--help-config lists every key"]),
    ([CFG, "--set", "ppo.learning_rat=1"],
     ["unknown config key 'ppo.learning_rat'; did you mean ppo.learning_rate?"]),
    ([CFG, "--set", "learning_rate=1e-3"], ["'learning_rate'", "did you mean ppo.learning_rate"]),
    ([CFG, "--set", "ppo.network.actvation=relu"], ["did you mean ppo.network.activation?"]),
    ([CFG, "--set", "populaton.seeds=[1]"], ["'populaton'", "did you mean population"]),
    ([CFG, "--set", "num_envs=abc"], ["num_envs", "int"]),
    ([CFG, "--set", "num_envs=2.5"], ["num_envs", "int"]),
    ([CFG, "--set", "ppo.anneal_lr=maybe"], ["ppo.anneal_lr", "bool"]),
    ([CFG, "--set", "num_steps=130"], ["num_steps", "num_minibatches"]),
    ([CFG, "--set", "num_envs=6"], ["num_envs", "devices", "num_envs=4"]),  # 4 test devices
    ([CFG, "--set", "num_envs=0"], ["num_envs", ">= 1"]),
    ([CFG, "--set", "total_timesteps=100"], ["total_timesteps", "one update"]),
    ([CFG, "--set", "ppo.learning_rate=-1"], ["ppo.learning_rate", "> 0"]),
    ([CFG, "--set", "ppo.gamma=1.5"], ["ppo.gamma"]),
    ([CFG, "--set", "network.activation=sigmoid"], ["network.activation", "tanh"]),
    ([CFG, "--set", "network.bounded_actions=sigmoid"], ["network.bounded_actions", "tanh"]),
    ([CFG, "--set", "network.actor_hidden=[64, x]"], ["network.actor_hidden"]),
    ([CFG, "--set", "env=Nope-v0"], ["Nope-v0", "gymnax provides", "CartPole-v1"]),
    ([CFG, "--set", "env=cartpole-v1"], ["'cartpole-v1'", "did you mean CartPole-v1?"]),
    ([CFG, "--set", "env=MemoryChain-bsuit"], ["did you mean MemoryChain-bsuite"]),
    ([CFG, "--set", "env=brx:ant"], ["suite 'brx'", "did you mean brax:ant?"]),
    ([CFG, "--set", "env=ale:Pongg"], ["ale:Pongg", "did you mean pong"]),
    ([CFG, "--set", "env=ale:Pong", "--set", "episode_length=100"], ["max_frames"]),
    ([CFG, "--set", "ppo=3"], ["ppo", "mapping"]),
    ([CFG, "--set", "algo=a2c"], ["algo 'a2c'", "known algorithm", "dqn, ppo, pqn", "sac, td3"]),
    ([CFG, "--set", "algo=dqn"], ["section 'ppo:'", "algo is 'dqn'"]),
    ([DQN, "--set", "env=Pendulum-v1", "--set", "num_envs=8"],
     ["algo dqn needs a discrete action space"]),
    ([PQN, "--set", "env=Pendulum-v1"], ["algo pqn needs a discrete action space"]),
    ([DQN, "--set", "dqn.batch_size=100000"], ["smaller than one batch"]),
    ([DQN, "--set", "dqn.learning_starts=45000", "--set", "total_timesteps=40000"],
     ["dqn.learning_starts (45000)", "shorter than the run"]),
    ([DQN, "--set", "dqn.buffer_shards=4"], ["num_envs (10)", "dqn.buffer_shards (4)"]),
    ([DQN, "--set", "population.sweep={dqn.n_step: [1, 3]}"], ["dqn.n_step", "shapes"]),
    ([CFG, "--set", "algo=[1]"], ["algo", "string"]),
    ([CFG, "--set", "matmul_precision=fast"], ["matmul_precision", "float32", "'fast'"]),
    ([CFG, "--set", "gpu_command_buffers=graphs"],
     ["gpu_command_buffers", "auto, xla, disabled", "'graphs'"]),
    ([CFG, "--set", "max_nonfinite_skips=0"], ["max_nonfinite_skips", ">= 1"]),
    ([CFG, "--set", "env_nonfinite=ignore"], ["env_nonfinite", "error, reset", "'ignore'"]),
    ([CFG, "--set", "num_envs"], ["KEY=VALUE"]),
    (["missing.yaml"], ["not found", "missing.yaml"]),
    ([], ["CONFIG"]),
    ([CFG, "--cpu-devices", "0"], ["--cpu-devices"]),
    ([CFG, "--bogus"], ["--bogus"]),
]


@pytest.mark.parametrize("argv,words", BAD, ids=[" ".join(a[1:]) or "empty" for a, _ in BAD])
def test_bad_input_is_one_line(argv, words, capsys, tmp_path):
    argv = argv + ["--run-dir", str(tmp_path / "run")] if argv else argv
    with pytest.raises(SystemExit) as exit_info:
        sys.exit(train_cli.main(argv))
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "Traceback" not in err
    for word in words:
        assert word in err, (word, err)
    assert not (tmp_path / "run").exists()


def test_empty_config_file_is_an_error_not_cartpole(tmp_path, capsys):
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    assert train_cli.main([str(empty), "--run-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "names no environment" in err and "env:" in err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("text,words", [
    ("env: CartPole-v1\nnum_steps: 64\nppo: {num_steps: 32}\n", ["num_steps", "both"]),
    ("algo: reinforce\nenv: CartPole-v1\nppo: {gamma: 0.9}\n", ["'ppo:'", "algo is 'reinforce'"]),
    ("algo: reinforce\nenv: CartPole-v1\nnum_steps: 8\n", ["num_steps", "ppo: section"]),
])
def test_misplaced_algorithm_keys_are_one_line(text, words, tmp_path, capsys):
    import toy_learner  # noqa: F401 (registers algo "reinforce")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(text)
    assert train_cli.main([str(cfg), "--run-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and all(w in err for w in words), err


def test_old_top_level_ppo_keys_still_load():
    """Configs written before ``algo:`` (num_steps and network at the top level) read as the
    new layout, from a file and from --set."""
    from jaxrl_dist import config as config_lib
    old = config_lib.from_dict({"env": "CartPole-v1", "num_steps": 64,
                                "network": {"actor_hidden": [32]}})
    assert old.algo == "ppo" and old.ppo.num_steps == 64
    assert old.ppo.network.actor_hidden == (32,)
    assert config_lib.load(CFG, ["num_steps=32"]).ppo.num_steps == 32
    assert config_lib.to_dict(old)["ppo"]["network"]["actor_hidden"] == [32]


def test_help_config_into_a_closed_pipe_is_quiet():
    proc = subprocess.run(f"{sys.executable} -m jaxrl_dist.train --help-config | head -n 1",
                          shell=True, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.startswith("algo") and proc.stderr == ""


def test_help_config_lists_each_algorithms_section(capsys):
    assert train_cli.main(["--help-config"]) == 0
    keys = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert {"algo", "ppo.num_steps", "ppo.network.actor_hidden", "ppo.gamma"} <= set(keys)


def test_one_set_takes_several_overrides():
    args = train_cli.build_parser().parse_args([CFG, "--set", "num_envs=8", "seed=3",
                                                "--set", "ppo.gamma=0.9"])
    assert args.config == CFG and args.overrides == ["num_envs=8", "seed=3", "ppo.gamma=0.9"]
    from jaxrl_dist import config as config_lib
    cfg = config_lib.load(args.config, args.overrides)
    assert (cfg.num_envs, cfg.seed, cfg.ppo.gamma) == (8, 3, 0.9)


def test_set_before_the_config_file(tmp_path, capsys):
    # --set is greedy; a config file after it is still the config (a one-line error here
    # proves it was read as the config: the override is bad, not the argument layout)
    assert train_cli.main(["--set", "num_envs=0", CFG, "--run-dir", str(tmp_path / "r")]) == 2
    assert "num_envs must be >= 1" in capsys.readouterr().err


def test_invalid_yaml_file(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("env: [unclosed\n")
    assert train_cli.main([str(bad)]) == 2
    err = capsys.readouterr().err
    assert "not valid YAML" in err and len(err.strip().splitlines()) == 1


def test_yaml_tags_are_not_executed(tmp_path, capsys):
    bad = tmp_path / "evil.yaml"
    marker = tmp_path / "pwned"
    bad.write_text(f"env: !!python/object/apply:os.system ['touch {marker}']\n")
    assert train_cli.main([str(bad)]) == 2
    assert not marker.exists()
    assert "not valid YAML" in capsys.readouterr().err


@pytest.mark.timeout(120)
def test_real_cli_bad_input_exit_code():
    proc = subprocess.run([sys.executable, "-m", "jaxrl_dist.train", CFG, "--set",
                           "ppo.clip=0.1"], capture_output=True, text=True, timeout=100)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]
    assert "unknown config key 'ppo.clip'" in proc.stderr


def test_help_config_lists_every_key(capsys):
    assert train_cli.main(["--help-config"]) == 0
    out = capsys.readouterr().out
    for key in ("env", "num_envs", "ppo.clip_eps", "network.activation"):
        assert key in out


@pytest.mark.parametrize("path", sorted(__import__("glob").glob("configs/*.yaml")))
def test_shipped_configs_are_valid_and_documented(path, monkeypatch):
    from jaxrl_dist import config as config_lib
    from jaxrl_dist import sizes as sizes_lib
    from jaxrl_dist.envs import make_env, registry

    if "jaxrl_examples/" in open(path).read():   # an example plugin's environment
        monkeypatch.setenv("JAXRL_DIST_PLUGINS", "examples.cartpole_no_velocity")
    cfg = config_lib.load(path)
    sizes_lib.derive_sizes(cfg, 1)
    suite = registry.parse(cfg.env)[0]
    if not registry.available(suite):
        pytest.skip(f"{path}: optional extra '{suite}' is not installed")
    make_env(cfg.env, episode_length=cfg.episode_length, env_kwargs=cfg.env_kwargs)
    text = open(path).read()
    assert "Expected:" in " ".join(text.splitlines()[:2])
    keyed = [line for line in text.splitlines() if ":" in line and not line.startswith("#")]
    assert all("#" in line for line in keyed), "every field is commented"


def test_a_misspelt_key_in_a_config_file_suggests_the_closest(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("env: CartPole-v1\nnum_env: 4\nppo: {gamma: 0.9}\n")
    assert train_cli.main([str(cfg), "--run-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "error: unknown config key 'num_env'; did you mean num_envs?", err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("env_id,close", [
    ("brax:antt", "did you mean brax:ant?"),
    ("jumanji:Snake-v2", "jumanji:Snake-v1"),
    ("xminigrid:MiniGrid-Empty-5x6", "xminigrid:MiniGrid-Empty-5x5"),
    ("craftax:Craftax-Classic-Symbolic", "craftax:Craftax-Classic-Symbolic-v1"),
])
def test_a_misspelt_suite_environment_suggests_the_closest(env_id, close):
    from jaxrl_dist.envs import EnvError, make_env, registry

    if not registry.available(registry.parse(env_id)[0]):
        pytest.skip(f"optional extra for {env_id} is not installed")
    with pytest.raises(EnvError) as error:
        make_env(env_id)
    message = str(error.value)
    assert "unknown" in message and repr(env_id) in message and close in message, message
    assert len(message.splitlines()) == 1


@pytest.mark.parametrize("overrides,solved", [
    ([], 475.0),                                    # CartPole-v1's known threshold
    (["env=Acrobot-v1"], -100.0),
    (["env=MemoryChain-bsuite"], None),             # none known: no verdict, not CartPole's
    (["episode_length=200"], None),                 # another time limit: not CartPole-v1's
    (["solved_return=400"], 400.0),                 # the config's own wins
    (["env=MemoryChain-bsuite", "solved_return=0.5"], 0.5),
    (["solved_return=null"], None),                 # null: no verdict
])
def test_solved_return_is_the_configs_else_the_envs_known_one(overrides, solved):
    from jaxrl_dist import config as config_lib

    assert config_lib.load(CFG, overrides).solved_return == solved
    assert config_lib.load(DQN, ["env=MemoryChain-bsuite"]).solved_return is None
    assert config_lib.load("configs/cartpole_dqn_ddp.yaml").solved_return == 195  # its own


def test_the_final_line_gives_a_verdict_only_with_a_threshold():
    summary = {"env": "MemoryChain-bsuite", "status": "completed", "eval_return": -0.25,
               "eval_return_std": 0.97, "eval_episodes": 16, "env_steps": 20480,
               "solved_return": None}
    line = train_cli.final_line(summary)
    assert line.endswith("after 20,480 env steps") and "solved" not in line.lower(), line
    line = train_cli.final_line({**summary, "env": "CartPole-v1", "eval_return": 500.0,
                                 "solved_return": 475.0})
    assert line.endswith("-> SOLVED (threshold 475)"), line


def test_a_run_stopped_between_evaluations_reports_its_last_one_as_such():
    summary = {"env": "brax:hopper", "status": "preempted", "eval_return": 2771.7,
               "eval_return_std": 5.6, "eval_episodes": 128, "env_steps": 880640,
               "eval_env_steps": 786432, "solved_return": None}
    line = train_cli.final_line(summary)
    assert line == ("brax:hopper: last evaluation return 2771.7 ± 5.6 over 128 episodes after "
                    "786,432 env steps (preempted at 880,640)"), line
    line = train_cli.final_line({**summary, "status": "completed", "eval_env_steps": 880640})
    assert line.startswith("brax:hopper: final evaluation return 2771.7") and line.endswith(
        "after 880,640 env steps"), line
