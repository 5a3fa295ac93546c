"""jaxrl_par: every way of parallelising RL, on the accelerator, in JAX."""

__version__ = "0.1.0"
