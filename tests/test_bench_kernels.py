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
    """One env step a rollout: ONE program a step (learn, then act); two: the four programs
    an update dispatches apart, which the one program holds."""
    pytest.importorskip("mujoco")
    sets = ["total_timesteps=2000", "sac.learning_starts=1000",
            "sac.network.actor_hidden=[32]", "sac.network.critic_hidden=[32]"]
    one = count_ours("configs/mujoco_halfcheetah_sac.yaml", sets, host=True)
    apart = count_ours("configs/mujoco_halfcheetah_sac.yaml", [*sets, "sac.num_steps=2"],
                       host=True)
    assert set(one) == {"learn_act"} and set(apart) == {"learn_next", "unpack", "prepare", "act"}
    for program in [*one.values(), *apart.values()]:
        assert isinstance(program["kernels"], int) and program["compile_s"] > 0
    # the gradient step is the largest; acting one step is the smallest
    assert apart["learn_next"]["kernels"] > apart["prepare"]["kernels"] > \
        apart["act"]["kernels"] > 0
    assert one["learn_act"]["kernels"] > apart["learn_next"]["kernels"]
