"""bench kernels: the kernel count of ours is read from a real compile's profiler trace."""

import pytest

from benches.kernels import count_ours


@pytest.mark.timeout(300)
def test_counts_the_kernels_of_each_of_our_programs():
    got = count_ours("configs/cartpole.yaml", ["total_timesteps=4096", "updates_per_call=2"],
                     by_op=4)
    assert set(got) == {"init", "update", "evaluate"}
    for name, program in got.items():
        assert isinstance(program["kernels"], int) and program["compile_s"] > 0
        # --by-op: every kernel in one group, most of them traced to the op they compute
        assert sum(program["by_op"].values()) == program["kernels"]
        named = sum(n for where, n in program["by_op"].items() if where.startswith("jit("))
        assert named > program["kernels"] / 2, (name, program["by_op"])
    # the update (rollout, GAE, SGD, statistics) is the largest program; none is empty
    assert got["update"]["kernels"] > got["evaluate"]["kernels"] > 0
    assert got["update"]["kernels"] > got["init"]["kernels"] > 0


@pytest.mark.timeout(300)
def test_counts_every_program_an_update_of_host_actors_dispatches():
    pytest.importorskip("mujoco")
    got = count_ours("configs/mujoco_halfcheetah_sac.yaml",
                     ["total_timesteps=2000", "sac.learning_starts=1000",
                      "sac.network.actor_hidden=[32]", "sac.network.critic_hidden=[32]"],
                     host=True)
    assert set(got) == {"learn_next", "unpack", "prepare", "act"}
    for program in got.values():
        assert isinstance(program["kernels"], int) and program["compile_s"] > 0
    # the gradient step is the largest; acting one step is the smallest
    assert got["learn_next"]["kernels"] > got["prepare"]["kernels"] > got["act"]["kernels"] > 0
