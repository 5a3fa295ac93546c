import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_par.parallel.packing import packer


def _tree():
    return {"obs": jnp.arange(24, dtype=jnp.uint8).reshape(2, 3, 4),
            "params": [jnp.linspace(0, 1, 6, dtype=jnp.float32).reshape(2, 3),
                       jnp.float32(7.5)],
            "action": jnp.array([3, 1], jnp.int32),
            "key": jax.random.key(4),
            "reward": jnp.array([0.5, -1.0], jnp.float32)}


def test_one_flat_array_per_dtype_and_back_exactly():
    tree = _tree()
    pack, unpack = packer(jax.eval_shape(lambda: tree))
    flats, keys = jax.jit(pack)(tree)
    # uint8, float32, int32 in the order they first appear (dict keys sort: action first)
    assert [f.dtype for f in flats] == [jnp.int32, jnp.uint8, jnp.float32]
    assert [f.shape for f in flats] == [(2,), (24,), (6 + 1 + 2,)]
    np.testing.assert_array_equal(flats[2], np.r_[np.linspace(0, 1, 6), 7.5, 0.5, -1.0]
                                  .astype(np.float32))
    assert len(keys) == 1
    back = jax.jit(unpack)((flats, keys))
    assert jax.tree.structure(back) == jax.tree.structure(tree)
    for a, b in zip(jax.tree.leaves(back), jax.tree.leaves(tree), strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        if jnp.issubdtype(a.dtype, jax.dtypes.prng_key):
            a, b = jax.random.key_data(a), jax.random.key_data(b)
        np.testing.assert_array_equal(a, b)


def test_vmapped_over_a_batch_axis():
    tree = _tree()
    batch = jax.tree.map(lambda x: jnp.stack([x, x]), tree)
    pack, unpack = packer(jax.eval_shape(lambda: tree))
    flats, _ = jax.vmap(pack)(batch)
    assert [f.shape for f in flats] == [(2, 2), (2, 24), (2, 9)]
    back = jax.vmap(unpack)(jax.vmap(pack)(batch))
    np.testing.assert_array_equal(back["obs"], batch["obs"])
    np.testing.assert_array_equal(back["params"][0], batch["params"][0])


def test_another_structure_is_refused():
    pack, _ = packer(jax.eval_shape(_tree))
    with pytest.raises(ValueError, match="not the template's"):
        pack({"obs": jnp.zeros(3)})
