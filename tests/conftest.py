import os
import tempfile

# Tests run on the CPU.
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402

# Many tests compile the same program more than once (a vmapped batch of seeds vs the
# same seeds one by one, a run and its resumption). XLA's persistent cache turns the
# repeats into loads. Correctness never depends on it.
jax.config.update("jax_compilation_cache_dir",
                  os.path.join(tempfile.gettempdir(), "jaxrl_par_test_xla_cache"))
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
