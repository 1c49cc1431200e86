"""The persistent compilation cache: a second run compiles nothing and computes the same."""

import os
from pathlib import Path

import jax
import pytest

from conftest import TINY
from jaxrl_dist import compile_cache
from jaxrl_dist import config as config_lib
from jaxrl_dist.errors import ConfigError
from jaxrl_dist.trainer import train


@pytest.mark.timeout(300)
def test_second_run_reads_every_program_from_the_cache(tmp_path):
    config = config_lib.from_dict({**TINY, "seed": 11})   # a seed no other test compiles with
    first = train(config, tmp_path / "a", devices=jax.devices()[:2], progress=False)
    second = train(config, tmp_path / "b", devices=jax.devices()[:2], progress=False)
    cache = Path(os.environ["JAXRL_DIST_CACHE"])
    assert second["compile_cache"]["dir"] == str(cache) and any(cache.iterdir())
    assert second["compile_cache"]["misses"] == 0, second["compile_cache"]
    assert second["compile_cache"]["hits"] >= 3, second["compile_cache"]  # init, update, eval
    assert second["param_fingerprint"] == first["param_fingerprint"]


def test_unwritable_cache_dir_is_one_line_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ConfigError, match="compile_cache: cannot create .*compile_cache=null"):
        compile_cache.enable(str(blocker / "xla"))


def test_auto_follows_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("JAXRL_DIST_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert compile_cache.default_dir() == tmp_path / "jaxrl_dist" / "xla"
    monkeypatch.setenv("JAXRL_DIST_CACHE", str(tmp_path / "mine"))
    assert compile_cache.default_dir() == tmp_path / "mine"
