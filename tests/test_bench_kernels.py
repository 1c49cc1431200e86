"""bench kernels: the kernel count of ours is read from a real compile's profiler trace."""

import pytest

from benches.kernels import count_ours


@pytest.mark.timeout(300)
def test_counts_the_kernels_of_each_of_our_programs():
    got = count_ours("configs/cartpole.yaml", ["total_timesteps=4096", "updates_per_call=2"])
    assert set(got) == {"init", "update", "evaluate"}
    for program in got.values():
        assert isinstance(program["kernels"], int) and program["compile_s"] > 0
    # the update (rollout, GAE, SGD, statistics) is the largest program; none is empty
    assert got["update"]["kernels"] > got["evaluate"]["kernels"] > 0
    assert got["update"]["kernels"] > got["init"]["kernels"] > 0
