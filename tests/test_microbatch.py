import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_par.platform import microbatch


@pytest.mark.parametrize("rows,chunk,expected", [
    (1024, 1024, 1),  # fits: whole
    (32768, 1024, 32),
    (131072, 1024, 128),
    (3000, 1024, 3),  # 1000-row chunks
    (4099, 1024, 1),  # prime: only 1-row chunks divide it, so whole
    (6, 4, 2),
])
def test_num_chunks(rows, chunk, expected):
    assert microbatch.num_chunks(rows, chunk) == expected


def _mlp_loss(params, batch, rows):
    h = jnp.tanh(batch["x"] @ params["w1"] + params["b1"])
    y = h @ params["w2"]
    err = jnp.square(y[:, 0] - batch["y"])
    return jnp.sum(err) / rows, {"abs_err": jnp.sum(jnp.abs(y[:, 0] - batch["y"])) / rows}


def _problem(rows):
    k = jax.random.split(jax.random.key(0), 5)
    params = {"w1": jax.random.normal(k[0], (3, 16)), "b1": jax.random.normal(k[1], (16,)),
              "w2": jax.random.normal(k[2], (16, 1))}
    batch = {"x": jax.random.normal(k[3], (rows, 3)), "y": jax.random.normal(k[4], (rows,))}
    return params, batch


def test_grad_of_sum_equals_the_whole_batch_gradient():
    rows = 4096
    params, batch = _problem(rows)
    loss = lambda p, b: _mlp_loss(p, b, rows)
    want = jax.grad(loss, has_aux=True)(params, batch)
    fn = jax.jit(lambda p, b: microbatch.grad_of_sum(loss, p, b, chunk_rows=512))
    # It really is chunked: the program scans over 8 chunks of 512 rows.
    assert "scan" in str(jax.make_jaxpr(fn)(params, batch))
    got = fn(params, batch)
    jax.tree.map(lambda g, w: np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6), got, want)


def test_grad_of_sum_under_vmap_over_seeds():
    rows = 2048
    params, batch = _problem(rows)
    stacked = jax.tree.map(lambda x: jnp.stack([x, 2 * x]), params)
    loss = lambda p, b: _mlp_loss(p, b, rows)
    got = jax.jit(jax.vmap(lambda p: microbatch.grad_of_sum(loss, p, batch, 256)))(stacked)
    for i in range(2):
        seed_params = jax.tree.map(lambda x, i=i: x[i], stacked)
        want = jax.grad(loss, has_aux=True)(seed_params, batch)
        got_i = jax.tree.map(lambda g, i=i: g[i], got)
        jax.tree.map(lambda g, w: np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5),
                     got_i, want)


def test_map_rows_equals_the_whole_batch():
    params, batch = _problem(3000)
    fn = lambda b: {"h": jnp.tanh(b["x"] @ params["w1"]), "y": b["y"] * 2}
    got = jax.jit(lambda b: microbatch.map_rows(fn, b, chunk_rows=1024))(batch)
    want = fn(batch)
    assert got["h"].shape == (3000, 16)
    jax.tree.map(lambda g, w: np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6), got, want)


def test_rows_must_agree():
    with pytest.raises(ValueError, match="same number of rows"):
        microbatch.map_rows(lambda b: b, {"a": jnp.zeros((4,)), "b": jnp.zeros((5,))})
