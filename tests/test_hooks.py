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
    table.begin(0)
    table.calibrate(0.001)   # the random phase
    assert table.hooks[0].period == 600_000
    for before in range(0, 10_000, 1_000):
        table.run_due(before, before + 1_000)
    table.calibrate(0.025)   # measured again once learning
    assert table.hooks[0].period == 24_000
    for before in range(10_000, 300_000, 1_000):
        table.run_due(before, before + 1_000)
    assert fired == list(range(24_000, 300_001, 24_000))


def test_a_new_measurement_counts_from_the_last_checkpoint_not_a_new_grid():
    """A period measured anew (the machine got busier, or freer) never fires two checkpoints
    closer than the periods in force: it counts from the last one (seen: 31k then 35k when a
    new period's multiples were the grid)."""
    fired = []
    table = HookTable([Hook("checkpoint", fired.append, seconds=600)])
    table.begin(16_000)   # resumed there
    for before, per_update in zip(range(16_000, 200_000, 1_000),
                                  [0.04, 0.02, 0.0171, 0.03, 0.025] * 1000):
        table.calibrate(per_update)   # every call, to make the point
        table.run_due(before, before + 1_000)
    gaps = [b - a for a, b in zip([16_000, *fired], fired)]
    assert fired and min(gaps) >= 600 // 0.04, (fired, gaps)


def test_a_period_in_updates_keeps_its_grid_across_a_resume():
    fired = []
    table = HookTable([Hook("evaluate", fired.append, every=5)])
    table.begin(7)   # resumed after update 7
    for before in range(7, 20, 3):
        table.run_due(before, before + 3)
    assert fired == [10, 16, 22]   # the calls crossing 10, 15 and 20
