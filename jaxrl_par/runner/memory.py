"""Does a training state fit in memory? Checked from shapes alone, before anything is
allocated or compiled.

A replay buffer sized for a GPU, or many seeds of one, can need more memory than the
machine has free. Left alone, XLA fails after the compile, or (on CPU, where Linux
overcommits) the kernel kills the process mid-run with no message. :func:`check_fits`
turns that into an error that names the largest parts of the state and the fix. Once
the programs are compiled, :func:`check_program` checks what each one allocates when it
runs (its outputs beyond the donated input, and its temporaries, as the compiler counts
them) against what is free at that moment, so the peak of a run, not only its state, is
what must fit.

Free memory: for CPU devices (they share the host's memory) ``MemAvailable`` of
``/proc/meminfo``, and no more than the memory limit of the process's cgroup (a SLURM
job's ``--mem``, a container's limit; cgroup v1 or v2); for accelerators
``bytes_limit - bytes_in_use`` of ``Device.memory_stats()``. Unknown elsewhere, and then
nothing is checked.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

MEMINFO = "/proc/meminfo"
PROC_CGROUP = "/proc/self/cgroup"
CGROUP_ROOT = "/sys/fs/cgroup"
NO_LIMIT = 1 << 60  # cgroup v1 writes "no limit" as a number near 2^63


def leaf_bytes(x: Any) -> int:
    """Bytes of one array or ``ShapeDtypeStruct`` (a PRNG key counts its key data)."""
    if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):  # its key data, any impl
        x = jax.eval_shape(jax.random.key_data, x)
    return math.prod(x.shape) * np.dtype(x.dtype).itemsize


def tree_bytes(tree: Any) -> int:
    """Bytes of every array leaf of ``tree`` (concrete or abstract)."""
    return sum(leaf_bytes(x) for x in jax.tree.leaves(tree))


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def cgroup_limit(proc_cgroup: str = PROC_CGROUP, root: str = CGROUP_ROOT) -> int | None:
    """The smallest memory limit on this process's cgroup and its ancestors, in bytes
    (cgroup v2 ``memory.max`` or v1 ``memory.limit_in_bytes``); None if there is none.

    The limit, not the limit minus usage: usage counts page cache that the kernel
    reclaims before it kills anything, so it would refuse runs that fit.
    """
    text = _read(proc_cgroup)
    if text is None:
        return None
    limits = []
    for line in text.splitlines():
        _, controllers, path = line.split(":", 2)
        if controllers == "":  # v2: 0::/path
            base, name = root, "memory.max"
        elif "memory" in controllers.split(","):  # v1: N:memory:/path
            base, name = os.path.join(root, "memory"), "memory.limit_in_bytes"
        else:
            continue
        parts = [p for p in path.split("/") if p]
        for depth in range(len(parts), -1, -1):  # the cgroup, then each ancestor
            value = _read(os.path.join(base, *parts[:depth], name))
            if value is not None and value.strip().isdigit() and int(value) < NO_LIMIT:
                limits.append(int(value))
    return min(limits) if limits else None


def free_bytes(device: jax.Device, meminfo: str = MEMINFO, proc_cgroup: str = PROC_CGROUP,
               cgroup_root: str = CGROUP_ROOT) -> int | None:
    """Bytes free for new arrays on ``device``; None when the platform does not say."""
    if device.platform == "cpu":
        available = None
        for line in (_read(meminfo) or "").splitlines():
            if line.startswith("MemAvailable:"):
                available = int(line.split()[1]) * 1024  # kB
        known = [b for b in (available, cgroup_limit(proc_cgroup, cgroup_root)) if b is not None]
        return min(known) if known else None
    try:
        stats = device.memory_stats()
    except Exception:  # noqa: BLE001 - some backends do not implement it
        return None
    if not stats or "bytes_limit" not in stats:
        return None
    return int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0))


def format_bytes(n: float) -> str:
    """``n`` bytes for people: "40 bytes", "3.1 MB", "305.5 GB" (powers of 1024)."""
    for unit in ("bytes", "KB", "MB", "GB", "TB"):
        if n < 1024 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError


def largest_parts(tree: Any, k: int = 3) -> list[str]:
    """The ``k`` largest leaves as ``"path shape dtype size"`` strings, largest first."""
    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    leaves.sort(key=lambda pl: -leaf_bytes(pl[1]))
    return [f"{jax.tree_util.keystr(path) or '<state>'} {list(x.shape)} {x.dtype} "
            f"({format_bytes(leaf_bytes(x))})" for path, x in leaves[:k]]


#: Room :func:`check_program` leaves free beyond what it counts: what a run allocates
#: after the check (evaluation programs, the checkpoint writer's buffers, Python objects).
HEADROOM = 256 << 20


def program_bytes(compiled: Any) -> int | None:
    """Bytes a compiled program allocates per device when it runs: its outputs not
    aliased to a donated input, plus its temporaries (``Compiled.memory_analysis()``);
    None when the backend does not say."""
    try:
        stats = compiled.memory_analysis()
    except Exception:  # noqa: BLE001 - not every backend or runtime implements it
        return None
    if stats is None or not hasattr(stats, "temp_size_in_bytes"):
        return None
    return max(0, int(stats.output_size_in_bytes) - int(stats.alias_size_in_bytes)
               + int(stats.temp_size_in_bytes))


def check_program(compiled: Any, devices: Sequence[jax.Device], what: str,
                  free: Callable[[jax.Device], int | None] | None = None,
                  fixes: str | None = None, host_bytes: int = 0) -> None:
    """Raises ``ValueError`` if running ``compiled`` (an SPMD program over ``devices``,
    or one device's) would allocate more than its devices have free now
    (:func:`program_bytes`: what it allocates beyond its donated inputs, which are
    already counted as used). CPU devices of one process are checked together against
    the host's memory, with ``host_bytes`` more that the host will hold meanwhile (a
    checkpoint's copy of the state); each accelerator against its own; either way
    :data:`HEADROOM` is left free besides. ``what`` names the step in the error;
    ``fixes`` as in :func:`check_fits`."""
    per_device = program_bytes(compiled) or 0
    if not per_device and not host_bytes:
        return
    free = free or free_bytes
    local = [d for d in devices if d.process_index == jax.process_index()]
    cpus = [d for d in local if d.platform == "cpu"]
    demands = [(cpus[0], per_device * len(cpus) + host_bytes,
                f"{len(cpus)} CPU device(s) of this host")] if cpus else []
    demands += [(d, per_device, str(d)) for d in local if d.platform != "cpu"]
    for device, need, where in demands:
        have = free(device)
        if have is None or need + HEADROOM <= have:
            continue
        advice = fixes or ("Make the state smaller: a smaller replay (--set buffer_size=N), "
                           "fewer seeds at once, or fewer envs")
        raise ValueError(f"{what} allocates {format_bytes(need)} more on {where} (and "
                         f"leaves {format_bytes(HEADROOM)} free), but {format_bytes(have)} "
                         f"is free there. {advice}.")


def check_fits(state: Any, devices: Sequence[jax.Device], what: str = "the training state",
               free: Callable[[jax.Device], int | None] | None = None,
               fixes: str | None = None, host_copies: int = 0) -> None:
    """Raises ``ValueError`` if ``state`` (abstract or concrete), spread evenly over
    ``devices``, does not fit in the memory they have free.

    CPU devices of one process share the host's memory, so they are checked together
    against it with their whole share, plus ``host_copies`` copies of it (a checkpoint
    written in the background copies the state to host memory first); each accelerator
    is checked against its own.
    ``free(device)`` gives the free bytes (None: unknown, not checked; default
    :func:`free_bytes`). ``fixes`` is the
    advice the error ends with (default: the ways to make a training state smaller).
    """
    devices = list(devices)
    free = free or free_bytes
    total = tree_bytes(state)
    share = total / len(devices)
    local = [d for d in devices if d.process_index == jax.process_index()]
    cpus = [d for d in local if d.platform == "cpu"]
    copies = f" and {host_copies} host cop{'y' if host_copies == 1 else 'ies'} of it" \
        if host_copies else ""
    demands = [(cpus[0], share * len(cpus) * (1 + host_copies),
                f"{len(cpus)} CPU device(s) of this host")] if cpus else []
    demands += [(d, share, str(d)) for d in local if d.platform != "cpu"]
    for device, need, where in demands:
        have = free(device)
        if have is None or need <= have:
            continue
        what_needs = what + (copies if device.platform == "cpu" else "")
        parts = "; ".join(largest_parts(state))
        advice = fixes
        if advice is None:
            advice = ("Make it smaller: a smaller replay (--set buffer_size=N), fewer seeds "
                      "at once, or fewer envs")
            if device.platform != "cpu":  # CPU devices all share the host's memory
                advice += "; or spread it over more devices (--devices)"
        raise ValueError(f"{what_needs} needs {format_bytes(need)} on {where}, but "
                         f"{format_bytes(have)} is free there. Largest parts: {parts}. "
                         f"{advice}.")
