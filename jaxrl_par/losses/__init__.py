"""RL maths as pure, unbatched functions (rlax style): return targets and losses.

Each function takes one trajectory ``[T]`` or one transition and is batched with
``jax.vmap`` at the call site; nothing here knows of networks, environments or algorithms.
"""
