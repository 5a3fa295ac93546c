"""Save and restore training-state pytrees as ``.npz`` files (PRNG keys included)."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_par.parallel.packing import is_key  # keys are saved as their key data


def key_data_shape(t) -> tuple[int, ...]:
    """Shape of the raw key data of a key array or its ``ShapeDtypeStruct``."""
    return tuple(jax.eval_shape(jax.random.key_data, t).shape)


def save(path: str, state: Any, meta: dict | None = None) -> None:
    """Writes ``state`` (any pytree of arrays) and a JSON ``meta`` dict atomically."""
    leaves = jax.tree.leaves(state)
    # The PRNG implementation of each key leaf, by name: a template of shapes alone
    # (ShapeDtypeStruct) does not say it through jax's public API.
    key_impls = {str(i): str(jax.random.key_impl(x)) for i, x in enumerate(leaves)
                 if is_key(x)}
    arrays = {
        f"leaf_{i}": np.asarray(jax.random.key_data(x) if is_key(x) else x)
        for i, x in enumerate(leaves)
    }
    arrays["meta"] = np.frombuffer(json.dumps({**(meta or {}), "key_impls": key_impls}
                                              ).encode(), dtype=np.uint8)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, suffix=".npz")
    with os.fdopen(fd, "wb") as f:
        np.savez(f, **arrays)
    os.replace(tmp, path)


def read_meta(path: str) -> dict:
    """The JSON ``meta`` dict of a checkpoint, without reading its arrays."""
    with np.load(path) as data:
        return json.loads(bytes(data["meta"]).decode())


def load(path: str, template: Any,
         reshape: Callable[[int, np.ndarray, tuple[int, ...]], np.ndarray] | None = None
         ) -> tuple[Any, dict]:
    """Reads a checkpoint into the structure of ``template``; returns ``(state, meta)``.

    ``template`` is a state of the same structure, or only its shapes (``jax.eval_shape``
    of the init: nothing is allocated but what is read).

    ``reshape(i, array, shape)``, if given, maps saved leaf ``i`` to the shape the template
    expects (for a PRNG key, its key data's) before the shapes are compared, e.g. to read
    a device mesh's ``[S, D, ...]`` state as one device's (``jaxrl_par.runner.runs``).
    """
    with np.load(path) as data:
        meta = json.loads(bytes(data["meta"]).decode())
        key_impls = meta.pop("key_impls", {})
        leaves, treedef = jax.tree.flatten(template)
        if len(data.files) - 1 != len(leaves):
            raise ValueError(
                f"checkpoint {path} holds {len(data.files) - 1} arrays but the state has "
                f"{len(leaves)}: it was written by a different algorithm or config, or by "
                "a jaxrl_par version whose state held other fields (e.g. PPO on continuous "
                "actions before normalize_rewards, whose state lacks its reward statistics: "
                "resume it with normalize_rewards=false)"
            )
        restored = []
        for i, t in enumerate(leaves):
            x = data[f"leaf_{i}"]
            want = key_data_shape(t) if is_key(t) else tuple(t.shape)
            if reshape is not None:
                x = reshape(i, x, want)
            if x.shape != want:
                raise ValueError(f"checkpoint {path}: leaf {i} has shape {x.shape}, "
                                 f"the state expects {want}")
            if is_key(t):
                impl = key_impls.get(str(i), str(jax.config.jax_default_prng_impl))
                restored.append(jax.random.wrap_key_data(jnp.asarray(x), impl=impl))
            else:
                restored.append(jnp.asarray(x, dtype=t.dtype))
    return jax.tree.unflatten(treedef, restored), meta
