"""The orbax checkpoint store: named leaves, typed keys with their implementation, the
last K kept, leaves of no elements, and a damaged newest checkpoint falling back."""

from __future__ import annotations

import os
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_par.runner import checkpoints


class State(NamedTuple):
    params: dict
    key: jax.Array
    empty: jax.Array
    count: jax.Array


def _state(step: int) -> State:
    return State(params={"w": jnp.full((2, 3), float(step)), "b": jnp.arange(3.0)},
                 key=jax.random.key(step, impl="rbg"),
                 empty=jnp.zeros((0, 4), jnp.int32), count=jnp.int32(step))


def _equal(a: State, b: State) -> None:
    assert jax.random.key_impl(a.key) == jax.random.key_impl(b.key)
    np.testing.assert_array_equal(jax.random.key_data(a.key), jax.random.key_data(b.key))
    for x, y in zip(jax.tree.leaves(a._replace(key=None)),
                    jax.tree.leaves(b._replace(key=None)), strict=True):
        assert x.dtype == y.dtype and x.shape == y.shape
        np.testing.assert_array_equal(x, y)


def test_named_leaves_keys_and_the_last_two_kept(tmp_path):
    store = checkpoints.Checkpoints(str(tmp_path / "ckpt"))
    for step in (1, 2, 3):
        store.save(step, _state(step), {"seeds": [0]})
    store.close()
    assert store.steps() == [2, 3]  # keep=2: the oldest went once 3 was complete
    meta = store.read_meta(3)
    assert meta["leaves"] == ["params.b", "params.w", "key", "empty", "count"]
    assert meta["key_impls"] == {"key": "rbg"} and meta["empty"] == ["empty"]
    assert meta["updates_done"] == 3 and meta["seeds"] == [0]
    template = jax.eval_shape(lambda: _state(0))
    restored = checkpoints.Checkpoints(str(tmp_path / "ckpt")).restore(template)
    assert restored.step == 3
    _equal(restored.state, _state(3))


def test_a_damaged_newest_checkpoint_falls_back_to_the_one_before(tmp_path):
    directory = str(tmp_path / "ckpt")
    store = checkpoints.Checkpoints(directory)
    for step in (1, 2):
        store.save(step, _state(step), {})
    store.close()
    for root, _, names in os.walk(os.path.join(directory, "2", "state")):
        for n in names:
            open(os.path.join(root, n), "w").close()  # every array file lost
    said = []
    template = jax.eval_shape(lambda: _state(0))
    restored = checkpoints.Checkpoints(directory).restore(template, say=said.append,
                                                          set_aside=True)
    assert restored.step == 1
    _equal(restored.state, _state(1))
    assert len(said) == 1 and f"{directory}/2 is damaged" in said[0]
    assert os.listdir(f"{directory}-damaged") == ["2"]  # kept, out of the way
    assert checkpoints.Checkpoints(directory).steps() == [1]
    with pytest.raises(checkpoints.Unreadable, match="holds no checkpoint"):
        checkpoints.Checkpoints(str(tmp_path / "none")).restore(template)


def test_another_structure_is_an_error_naming_the_leaf(tmp_path):
    store = checkpoints.Checkpoints(str(tmp_path / "ckpt"))
    store.save(1, _state(1), {})
    store.close()
    wider = jax.eval_shape(lambda: _state(0)._replace(params={"w": jnp.zeros((2, 4)),
                                                              "b": jnp.zeros(3)}))
    with pytest.raises(ValueError, match=r"leaf params.w has shape \(2, 3\), the state "
                                         r"expects \(2, 4\)"):
        checkpoints.Checkpoints(str(tmp_path / "ckpt")).restore(wider)


@pytest.fixture
def tiny_disk(tmp_path):
    """A 200 KB tmpfs (where this process may mount one, e.g. as root in a container)."""
    import subprocess

    path = tmp_path / "tiny"
    path.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=200k", "tmpfs", str(path)],
                             capture_output=True, check=False)
    if mounted.returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    yield path
    subprocess.run(["umount", str(path)], check=False)


def test_a_full_disk_is_an_os_error_and_keeps_the_checkpoints_before(tiny_disk):
    import errno

    store = checkpoints.Checkpoints(str(tiny_disk / "ckpt"))
    store.save(1, _state(1), {})
    store.wait()
    noise = {"big": jax.random.normal(jax.random.key(0), (200_000,))}  # 800 KB
    with pytest.raises(OSError) as raised:
        store.save(2, noise, {})
        store.close()
    assert raised.value.errno == errno.ENOSPC
    template = jax.eval_shape(lambda: _state(0))
    restored = checkpoints.Checkpoints(str(tiny_disk / "ckpt")).restore(template)
    assert restored.step == 1
    _equal(restored.state, _state(1))
