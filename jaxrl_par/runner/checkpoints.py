"""A run's training state on disk, with orbax-checkpoint.

``train(..., log_dir=D)`` keeps its state in ``D/checkpoints/<updates done>/``: every
leaf of the state pytree (parameters, optimiser, envs, replay, PRNG keys, counters, a
sweep's values) as a named array (its path in the pytree, e.g.
``params.params.Dense_0.kernel``), beside a JSON meta record (updates done, seeds,
config, layout, the leaf names and the PRNG implementation of each key leaf: a typed key
is saved as its ``jax.random.key_data`` and wrapped again with that implementation).

orbax writes each checkpoint into a temporary directory and renames it when complete
(atomic), keeps the last ``keep``, writes in a background thread once the arrays are
copied off the devices (training goes on meanwhile), and on several processes
(``jax.distributed``) has every host write its own shards. A checkpoint that cannot be
read (a damaged disk, a file cut short) is reported in one line and the one before it is
read instead.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import sys
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_par.parallel.packing import is_key
from jaxrl_par.runner.records import CHECKPOINTS as DIRECTORY  # inside a log dir

__all__ = ["DEFAULT_KEEP", "DEFAULT_SECONDS", "DIRECTORY", "Checkpoints", "Restored",
           "Unreadable", "is_key", "leaf_names"]
DEFAULT_KEEP = 2
DEFAULT_SECONDS = 30.0  # train's least time between two checkpoints


class Unreadable(ValueError):
    """No checkpoint of a directory could be read; the message says what to do."""


def _orbax():
    import orbax.checkpoint as ocp  # slow to import: only runs with a log dir need it

    return ocp


def leaf_names(state: Any) -> list[str]:
    """A unique file-safe name per leaf of ``state``, in ``jax.tree.leaves`` order: its
    path in the tree (``params.params.Dense_0.kernel``; ``leaf_<i>`` where it has none)."""
    names, seen = [], set()
    for i, (path, _) in enumerate(jax.tree_util.tree_flatten_with_path(state)[0]):
        name = ".".join(re.sub(r"[^A-Za-z0-9_-]+", "_", str(getattr(k, "name", getattr(
            k, "key", getattr(k, "idx", k))))) for k in path).strip("._") or f"leaf_{i}"
        if name in seen:
            name = f"{name}.{i}"
        seen.add(name)
        names.append(name)
    return names


def key_data_shape(t: Any) -> tuple[int, ...]:
    """Shape of the raw key data of a key array or its ``ShapeDtypeStruct``."""
    return tuple(jax.eval_shape(jax.random.key_data, t).shape)


class Restored(NamedTuple):
    """What :meth:`Checkpoints.restore` returns: the state, its meta record and the
    step (updates done) it was read from."""

    state: Any
    meta: dict
    step: int


class Checkpoints:
    """The checkpoints of one run directory.

    Args:
      directory: where they live (``<log_dir>/checkpoints``); created on the first save.
      keep: how many of the newest are kept (older ones are deleted once a newer one is
        complete).
      asynchronous: write in a background thread (``save`` returns once the arrays are
        copied off the devices); ``wait()`` or ``close()`` waits for the writes.

    On several processes every process calls ``save`` with the same (globally sharded)
    state, and each writes its own shards.
    """

    def __init__(self, directory: str, keep: int = DEFAULT_KEEP, asynchronous: bool = True):
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
            raise ValueError(f"keep_checkpoints={keep!r}; give an int >= 1")
        self.directory = os.path.abspath(directory)
        self.keep, self.asynchronous = keep, asynchronous
        self._manager = None

    def _open(self, create: bool):
        if self._manager is None:
            ocp = _orbax()
            options = ocp.CheckpointManagerOptions(
                max_to_keep=self.keep, create=create,
                enable_async_checkpointing=self.asynchronous,
                cleanup_tmp_directories=create)
            self._manager = ocp.CheckpointManager(self.directory, options=options,
                                                  item_names=("state", "meta"))
        return self._manager

    def steps(self) -> list[int]:
        """The updates done of every complete checkpoint, oldest first."""
        if not os.path.isdir(self.directory):
            return []
        return sorted(int(d) for d in os.listdir(self.directory) if d.isdigit()
                      and os.path.isdir(os.path.join(self.directory, d, "meta")))

    def save(self, step: int, state: Any, meta: dict) -> None:
        """Saves ``state`` (a pytree of arrays) and the JSON record ``meta`` as the
        checkpoint of ``step`` updates done."""
        ocp = _orbax()
        leaves = jax.tree.leaves(state)
        names = leaf_names(state)
        arrays = {n: jax.random.key_data(x) if is_key(x) else x
                  for n, x in zip(names, leaves, strict=True)}
        empty = [n for n, x in arrays.items() if x.size == 0]  # orbax writes none
        arrays = {n: x for n, x in arrays.items() if x.size}
        record = {**meta, "updates_done": int(step), "leaves": names, "empty": empty,
                  "key_impls": {n: str(jax.random.key_impl(x))
                                for n, x in zip(names, leaves, strict=True) if is_key(x)}}
        with self._os_errors():
            self._open(create=True).save(int(step), args=ocp.args.Composite(
                state=ocp.args.PyTreeSave(arrays), meta=ocp.args.JsonSave(record)),
                force=True)

    def busy(self) -> bool:
        """Whether a background write is still in flight."""
        return self._manager is not None and self._manager.is_saving_in_progress()

    def wait(self) -> None:
        """Returns once every write in flight is complete."""
        if self._manager is not None:
            with self._os_errors():
                self._manager.wait_until_finished()

    def close(self) -> None:
        """Waits for the writes in flight, then releases orbax's threads."""
        if self._manager is not None:
            manager, self._manager = self._manager, None
            with self._os_errors():
                manager.wait_until_finished()
            manager.close()

    @contextlib.contextmanager
    def _os_errors(self):
        """A write that the OS refused (tensorstore reports it as a ``ValueError`` with
        ``os_error_code='N'``: a full disk, no permission) as the ``OSError`` it is."""
        try:
            yield
        except ValueError as e:
            code = re.search(r"os_error_code='?(\d+)", str(e))
            if code is None:
                raise
            n = int(code.group(1))
            raise OSError(n, os.strerror(n), self.directory) from None

    def read_meta(self, step: int) -> dict:
        """The meta record of the checkpoint of ``step``."""
        ocp = _orbax()
        return dict(self._open(create=False).restore(step, args=ocp.args.Composite(
            meta=ocp.args.JsonRestore())).meta)

    def _read_arrays(self, step: int, names: list[str]) -> dict[str, np.ndarray]:
        ocp = _orbax()
        restore_args = {n: ocp.RestoreArgs(restore_type=np.ndarray) for n in names}
        out = self._open(create=False).restore(step, args=ocp.args.Composite(
            state=ocp.args.PyTreeRestore(restore_args=restore_args)))
        return dict(out.state)

    def latest_meta(self, say: Callable[[str], None] | None = None) -> tuple[int, dict] | None:
        """``(step, meta)`` of the newest checkpoint whose meta record reads (an
        unreadable one is reported through ``say``), or None when there is none."""
        for step in reversed(self.steps()):
            try:
                return step, self.read_meta(step)
            except Exception as e:  # a damaged record: the one before it
                _damaged(say, self.directory, step, e)
        return None

    def restore(self, template: Any, *, newest: int | None = None,
                reshape: Callable[[int, np.ndarray, tuple[int, ...]], np.ndarray] | None = None,
                say: Callable[[str], None] | None = None, set_aside: bool = False
                ) -> Restored:
        """The newest readable checkpoint (at ``newest`` updates or before) read into the
        structure of ``template``; a damaged one is reported through ``say`` and the one
        before it read instead.

        ``template``: a state of the same structure, or only its shapes
        (``jax.eval_shape`` of the init). ``reshape(i, array, shape)``, if given, maps
        saved leaf ``i`` to the shape the template expects (a key: its key data's)
        before the shapes are compared (another device layout, :mod:`jaxrl_par.runner.layouts`).
        With ``set_aside`` (a run that goes on), a damaged checkpoint is moved to
        ``<directory>-damaged/`` (kept, out of the way of the run's next saves).

        Raises:
          Unreadable: no checkpoint could be read.
          ValueError: the checkpoint holds a state of another structure or shapes.
        """
        steps = [s for s in reversed(self.steps()) if newest is None or s <= newest]
        if not steps:
            raise Unreadable(f"{self.directory} holds no checkpoint: give the log dir of a "
                             "run trained with --log-dir, or start it anew without --resume")
        for step in steps:
            try:
                meta = self.read_meta(step)
                empty = set(meta.get("empty", ()))
                arrays = self._read_arrays(step, [n for n in meta["leaves"]
                                                  if n not in empty])
            except Exception as e:  # damaged: the one before it
                _damaged(say, self.directory, step, e,
                         self._set_aside(step) if set_aside else None)
                continue
            return Restored(_into(template, arrays, meta, step, self.directory, reshape),
                            meta, step)
        raise Unreadable(f"no checkpoint in {self.directory} could be read (all damaged): "
                         "start the run anew in another log dir")


    def _set_aside(self, step: int) -> str:
        aside = f"{self.directory}-damaged"
        os.makedirs(aside, exist_ok=True)
        target = os.path.join(aside, str(step))
        n = 1
        while os.path.exists(target):
            target, n = os.path.join(aside, f"{step}.{n}"), n + 1
        os.replace(os.path.join(self.directory, str(step)), target)
        self._manager = None  # its list of steps is stale
        return target


def _damaged(say: Callable[[str], None] | None, directory: str, step: int, e: Exception,
             moved_to: str | None = None) -> None:
    first = (str(e).strip().splitlines() or [""])[0][:200]
    moved = f", moved to {moved_to}" if moved_to else ""
    (say or _stderr)(f"jaxrl_par: the checkpoint {os.path.join(directory, str(step))} is "
                     f"damaged ({type(e).__name__}: {first}{moved}); trying the one before it")


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _into(template: Any, arrays: dict[str, np.ndarray], meta: dict, step: int,
          directory: str, reshape: Callable | None) -> Any:
    """``arrays`` (by name, in ``meta["leaves"]`` order) as a tree of ``template``'s
    structure, keys wrapped with their recorded implementation."""
    names = list(meta["leaves"])
    leaves, treedef = jax.tree.flatten(template)
    where = os.path.join(directory, str(step))
    if len(names) != len(leaves):
        raise ValueError(f"checkpoint {where} holds {len(names)} arrays but the state has "
                         f"{len(leaves)}: it was written by a different algorithm or config, or by "
                         "a jaxrl_par version whose state held other fields (e.g. PPO on "
                         "continuous actions before normalize_rewards, whose state lacks its "
                         "reward statistics: resume it with normalize_rewards=false)")
    impls = meta.get("key_impls", {})
    out = []
    for i, (name, t) in enumerate(zip(names, leaves, strict=True)):
        want = key_data_shape(t) if is_key(t) else tuple(t.shape)
        x = arrays.get(name)
        if x is None and math.prod(want) == 0:  # a leaf of no elements: none saved
            x = np.zeros(want, np.uint32 if is_key(t) else t.dtype)
        elif x is None:
            raise ValueError(f"checkpoint {where} holds no array {name}, of shape {want} "
                             "in this state: it was written by a different config")
        elif reshape is not None:
            x = reshape(i, x, want)
        if tuple(x.shape) != want:
            raise ValueError(f"checkpoint {where}: leaf {name} has shape {tuple(x.shape)}, "
                             f"the state expects {want}")
        if is_key(t):
            impl = impls.get(name, str(jax.config.jax_default_prng_impl))
            out.append(jax.random.wrap_key_data(jnp.asarray(x), impl=impl))
        else:
            out.append(jnp.asarray(x, dtype=t.dtype))
    return jax.tree.unflatten(treedef, out)
