import os

import pytest

# Tests run on the CPU.
os.environ.setdefault("JAX_PLATFORMS", "cpu")

# Hangs in test_train (process idle in block_until_ready after a vmapped PPO init, in
# session 1; the CI run of 2026-11-29 stopped in the same file and used up its 90 minutes)
# match jaxlib 0.10's batched-LAPACK deadlock, reproduced here and read off with gdb: see
# jaxrl_par.networks.orthogonal, which now keeps every QR unbatched, and
# tests/test_networks.py. This flag was an earlier guess at that hang and does not prevent
# it (the gdb capture had it set). It stays only because every passing run of the suite so
# far had it; set before jax is imported, and inherited by the tests' subprocesses
# (8-device suite, two-host test, CLI).
EIGEN_FLAG = "--xla_cpu_multi_thread_eigen=false"
if EIGEN_FLAG not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + EIGEN_FLAG).strip()


# The tests keep compiled programs where the CLI does (`jaxrl_par.cli.compile_cache_dir`:
# $JAX_COMPILATION_CACHE_DIR, else ~/.cache/jaxrl_par/xla), from the first test on, in
# both xdist workers and in the tests' subprocesses (they inherit the variable): a program
# that several tests compile is compiled once, and a rerun on the same machine loads what
# took over a second to compile. Before, the first in-process CLI test turned the cache
# on for the rest of its worker only, so the suite's time depended on the order the tests
# ran in. On a Zen 2 host with an empty cache, the suite took 18:26 the old way.
import jax  # after XLA_FLAGS (XLA reads them when jax first uses a device)

from jaxrl_par.cli import compile_cache_dir

os.environ["JAX_COMPILATION_CACHE_DIR"] = compile_cache_dir()  # for the subprocesses
jax.config.update("jax_compilation_cache_dir", os.environ["JAX_COMPILATION_CACHE_DIR"])
# Every program, not only those that took over a second (jax's default): most programs
# of the suite compile in less, and several tests compile the same ones. Rerun with the
# cache full, the suite took 444 s instead of 542 s; with an empty cache,
# tests/test_sweep.py and tests/test_train.py took 175-180 s instead of 190-201 s.
os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)

from jaxrl_par.platform import cpu_threads

# The runner's one-time tip about the thread pool would open the stderr of whichever test
# first shows progress in a worker; tests/test_cpu_threads.py tests it on its own.
cpu_threads._hinted = True


# Most tests run tiny programs a few times: their time is XLA's compile, not execution
# (the suite's per-test jax.monitoring durations on a Zen 2 host, 2026-12-06: 514 s of
# backend compile in 1,433 s of test time). `jax_disable_most_optimizations` (LLVM level 0,
# no expensive LLVM passes) compiles a PPO update 30-45% faster and runs it ~4x slower, so
# it is on for every test but those marked `xla_optimized`: the ones that execute many
# updates (learning runs). `JAXRL_PAR_TEST_XLA_DEFAULTS=1` turns it off for all tests.
QUICK_COMPILE = os.environ.get("JAXRL_PAR_TEST_XLA_DEFAULTS", "") in ("", "0")


@pytest.fixture(autouse=True)
def _quick_compile(request):
    """Tests compile with ``jax_disable_most_optimizations``, except those marked
    ``xla_optimized`` (see QUICK_COMPILE above)."""
    if not QUICK_COMPILE or request.node.get_closest_marker("xla_optimized"):
        yield
        return
    before = jax.config.values["jax_disable_most_optimizations"]
    jax.config.update("jax_disable_most_optimizations", True)
    try:
        yield
    finally:
        jax.config.update("jax_disable_most_optimizations", before)
