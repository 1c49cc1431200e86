"""An update's metrics travel as one packed array and read back bit for bit, by name."""

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_dist import packed


def _update(carry, _):
    metrics = {"loss": carry * 0.5, "episodes": (carry * 3).astype(jnp.int32) - 7,
               "skipped": carry > 1.0, "count": jnp.uint32(0xFFFFFFFF),
               "per_agent": jnp.stack([carry, -carry])}
    return carry + 1.0, packed.pack(metrics)


def test_metrics_stacked_by_a_scan_read_back_exactly_by_name_on_device_and_host():
    # -7 .. and 0xFFFFFFFF bitcast to float32 are NaN patterns: they must survive as bits
    carry, got = jax.jit(lambda c: jax.lax.scan(_update, c, None, length=4))(jnp.float32(0.0))
    assert isinstance(got, packed.Packed) and jax.tree.leaves(got)[0].shape == (4, 6)
    want = {"loss": np.float32([0, 0.5, 1, 1.5]), "episodes": np.int32([-7, -4, -1, 2]),
            "skipped": np.array([False, False, True, True]),
            "count": np.full(4, 0xFFFFFFFF, np.uint32),
            "per_agent": np.float32([[0, 0], [1, -1], [2, -2], [3, -3]])}
    host = jax.device_get(got)
    assert isinstance(host.values, np.ndarray)
    for metrics in (got, host):
        assert list(metrics) == list(want) and len(metrics) == 5
        for name, value in want.items():
            read = np.asarray(metrics[name])
            assert read.dtype == value.dtype and read.shape == value.shape, name
            np.testing.assert_array_equal(read, value, err_msg=name)


def test_a_leading_member_axis_is_kept_and_a_missing_name_is_a_key_error():
    members = jax.vmap(lambda c: jax.lax.scan(_update, c, None, length=3)[1])(
        jnp.float32([0.0, 10.0]))
    assert np.asarray(members["episodes"]).tolist() == [[-7, -4, -1], [23, 26, 29]]
    assert np.asarray(members["per_agent"]).shape == (2, 3, 2)
    assert dict(jax.device_get(members)).keys() == {"loss", "episodes", "skipped", "count",
                                                     "per_agent"}
    try:
        members["nope"]
    except KeyError:
        pass
    else:
        raise AssertionError("an unknown metric must raise KeyError")
