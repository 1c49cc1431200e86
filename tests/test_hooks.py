"""The run loop's periodic work (jaxrl_dist/hooks.py): periods in seconds follow the run's
speed, not only its first calls'."""

from jaxrl_dist.hooks import Hook, HookTable


def test_the_speed_is_measured_again_after_calls_1_3_7_15():
    timed = HookTable([Hook("checkpoint", lambda _: None, seconds=600)])
    assert [i for i in range(64) if timed.calibrates_after(i)] == [1, 3, 7, 15, 31, 63]
    counted = HookTable([Hook("evaluate", lambda _: None, every=10)])
    assert not any(counted.calibrates_after(i) for i in range(64))


def test_a_checkpoint_every_10_minutes_fires_once_learning_slows_the_updates():
    """SAC's first 10k updates act at random (~1 ms each here), then each learns (~25 ms):
    measured on the first calls alone, 10 minutes would be 600k updates, past a 300k run."""
    fired = []
    table = HookTable([Hook("checkpoint", fired.append, seconds=600)])
    table.calibrate(0.001)   # the random phase
    assert table.hooks[0].period == 600_000
    table.calibrate(0.025)   # measured again once learning
    assert table.hooks[0].period == 24_000
    for before in range(10_000, 300_000, 1_000):
        table.run_due(before, before + 1_000)
    assert fired == list(range(24_000, 300_001, 24_000))
