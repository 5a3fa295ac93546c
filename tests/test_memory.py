"""The memory check before training: state sizes from shapes, free memory per platform
(and under a cgroup limit), and the error that names the largest parts before anything
is compiled."""

import jax
import jax.numpy as jnp
import pytest

from jaxrl_par.algos import dqn
from jaxrl_par.runner import memory, programs
from jaxrl_par.runner import training as train_lib


class _Device:
    """Stands in for a ``jax.Device`` with ``free_bytes`` free."""

    def __init__(self, platform, free_bytes, index=0):
        self.platform, self.free_bytes, self.id, self.process_index = (
            platform, free_bytes, index, 0)

    def memory_stats(self):
        return {"bytes_limit": self.free_bytes + 100, "bytes_in_use": 100}

    def __str__(self):
        return f"{self.platform}:{self.id}"


STATE = {"buffer": jax.ShapeDtypeStruct((4, 1000, 205), jnp.uint32),  # 3,280,000 bytes
         "params": jnp.zeros((10,), jnp.float32),                       # 40
         "key": jax.random.split(jax.random.key(0), 4)}                 # 4 keys, 32


def test_tree_bytes_counts_abstract_and_concrete_leaves_and_keys():
    assert memory.tree_bytes(STATE) == 3_280_000 + 40 + 32


def test_free_bytes_on_cpu_reads_memavailable(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       32000000 kB\nMemAvailable:   1000 kB\n")
    cpu = jax.devices("cpu")[0]
    no_cgroup = str(tmp_path / "no-cgroup")
    assert memory.free_bytes(cpu, str(meminfo), no_cgroup) == 1000 * 1024
    assert memory.free_bytes(cpu, str(tmp_path / "missing"), no_cgroup) is None
    accel = _Device("gpu", 5_000)
    assert memory.free_bytes(accel) == 5_000


def _write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_cgroup_limit_v1_and_v2_smallest_over_ancestors(tmp_path):
    # A SLURM job's --mem (or a container's limit) caps what CPU devices may use, whatever
    # the host has free. v2: memory.max of the cgroup and its ancestors ("max": none).
    proc = tmp_path / "cgroup"
    _write(proc, "0::/slurm/job_7/step_0\n")
    root = tmp_path / "fs"
    _write(root / "slurm" / "job_7" / "step_0" / "memory.max", "max\n")
    _write(root / "slurm" / "job_7" / "memory.max", "8589934592\n")  # 8 GiB on the job
    _write(root / "slurm" / "memory.max", "17179869184\n")
    assert memory.cgroup_limit(str(proc), str(root)) == 8 << 30
    # v1: the memory controller's hierarchy; "no limit" is a number near 2^63
    _write(proc, "4:memory:/docker/abc\n3:cpuset:/\n")
    _write(root / "memory" / "docker" / "abc" / "memory.limit_in_bytes", "9223372036854771712\n")
    _write(root / "memory" / "docker" / "memory.limit_in_bytes", "4294967296\n")
    assert memory.cgroup_limit(str(proc), str(root)) == 4 << 30
    _write(root / "memory" / "docker" / "memory.limit_in_bytes", "9223372036854771712\n")
    assert memory.cgroup_limit(str(proc), str(root)) is None
    # CPU devices get the smaller of MemAvailable and the limit
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemAvailable:   16777216 kB\n")  # 16 GiB
    _write(root / "memory" / "docker" / "memory.limit_in_bytes", "4294967296\n")
    cpu = jax.devices("cpu")[0]
    assert memory.free_bytes(cpu, str(meminfo), str(proc), str(root)) == 4 << 30
    assert memory.free_bytes(cpu, str(meminfo), str(tmp_path / "none"), str(root)) == 16 << 30


def test_check_fits_per_accelerator_and_per_host():
    free = memory.free_bytes
    # two accelerators hold half each: 1.64 MB fits in 2 MB, not in 1 MB
    memory.check_fits(STATE, [_Device("gpu", 2_000_000, i) for i in range(2)], free=free)
    with pytest.raises(ValueError, match=r"needs 1\.6 MB on gpu:0.*Largest parts: "
                       r"\['buffer'\] \[4, 1000, 205\] uint32 \(3\.1 MB\).*--devices"):
        memory.check_fits(STATE, [_Device("gpu", 1_000_000, i) for i in range(2)], free=free)
    # CPU devices share the host's memory: two of them need the whole state there
    cpus = [_Device("cpu", 2_000_000, i) for i in range(2)]
    def free(d):  # memory.free_bytes would read this host's
        return d.free_bytes

    with pytest.raises(ValueError, match=r"needs 3\.1 MB on 2 CPU device\(s\)") as e:
        memory.check_fits(STATE, cpus, free=free)
    assert "--devices" not in str(e.value)  # more CPU devices would not help
    memory.check_fits(STATE, cpus, free=lambda d: None)  # unknown: not checked


def test_train_refuses_a_state_too_large_before_compiling(monkeypatch):
    # 4 seeds of a 10^8-slot MinAtar replay: 328 GB, more than any machine this runs on
    def no_build(*args, **kwargs):
        raise AssertionError("compiled or allocated before the memory check")

    monkeypatch.setattr(programs, "_build", no_build)
    algo = dqn.make(dqn.Config(env="Breakout-MinAtar", buffer_size=10**8))
    with pytest.raises(ValueError, match=r"the state of 4 seed\(s\) needs 305\.5 GB .*"
                       r"\.buffer\.words \[4, 100000000, 205\] uint32 .*buffer_size"):
        train_lib.train(algo, [0, 1, 2, 3], progress=False)
    with pytest.raises(AssertionError, match="before the memory check"):
        train_lib.train(algo, [0, 1, 2, 3], progress=False, check_memory=False)
