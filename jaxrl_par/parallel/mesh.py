"""The one place where the device mesh ``('pop', 'data')`` is built.

``pop`` holds independent population members (seeds or hyperparameter settings): each
pop shard trains ``num_seeds / pop`` members, vmapped. ``data`` is synchronous data
parallelism: every device of a pop shard runs its own slice of the environments (and
its own replay shard) and gradients are averaged over ``data``.

``jax.make_mesh`` defaults to *Explicit* axis types, under which ``shard_map`` refuses
inputs whose sharding does not already match ``in_specs``; we build ``Auto`` axes and
also place inputs with ``NamedSharding`` (:mod:`jaxrl_par.parallel.data_parallel`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import jax
from jax.sharding import AxisType, Mesh

from jaxrl_par import axes


class MeshShape(NamedTuple):
    """Sizes of the two mesh axes; ``pop * data`` devices in all."""

    pop: int
    data: int


def mesh_shape(num_devices: int, pop: int = 1) -> MeshShape:
    """``(pop, num_devices // pop)``, or a ValueError naming the numbers.

    >>> mesh_shape(8, pop=2)
    MeshShape(pop=2, data=4)
    """
    if num_devices < 1:
        raise ValueError(f"devices={num_devices}: need at least one device")
    if pop < 1:
        raise ValueError(f"pop={pop}: need at least one population shard")
    if num_devices % pop:
        raise ValueError(
            f"pop={pop} does not divide devices={num_devices}: the mesh is pop x data, "
            f"so pop must be a divisor of {num_devices}"
        )
    return MeshShape(pop, num_devices // pop)


def make_mesh(
    devices: int | Sequence[jax.Device] | None = None, pop: int = 1
) -> Mesh:
    """The ``('pop', 'data')`` mesh over ``devices`` (all global devices by default).

    Args:
      devices: a device count (the first ``n`` of ``jax.devices()``, which spans every
        process after ``jax.distributed.initialize``), a list of devices, or None for all.
      pop: size of the ``pop`` axis; must divide the number of devices.

    Returns:
      A ``jax.sharding.Mesh`` with axis names ``(axes.POP, axes.DATA)`` and Auto types.
    """
    available = jax.devices()
    if devices is None:
        chosen = list(available)
    elif isinstance(devices, int):
        if devices > len(available):
            raise ValueError(
                f"devices={devices} but only {len(available)} {available[0].platform} "
                f"device(s) exist; on CPU set XLA_FLAGS=--xla_force_host_platform_device_"
                f"count={devices} before jax is imported"
            )
        chosen = list(available[:devices])
    else:
        chosen = list(devices)
    shape = mesh_shape(len(chosen), pop)
    # make_mesh orders the devices for the physical topology (ICI rings on TPU).
    return jax.make_mesh(tuple(shape), (axes.POP, axes.DATA),
                         axis_types=(AxisType.Auto, AxisType.Auto), devices=chosen)


def shape_of(mesh: Mesh) -> MeshShape:
    """The :class:`MeshShape` of a mesh built by :func:`make_mesh`."""
    return MeshShape(mesh.shape[axes.POP], mesh.shape[axes.DATA])
