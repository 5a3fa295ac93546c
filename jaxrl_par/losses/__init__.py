"""RL maths as pure, unbatched functions (rlax style): return targets and losses.

Each function takes one trajectory ``[T]``, one transition or one sample and is batched
with ``jax.vmap`` at the call site; nothing here knows of networks, environments, replay
or algorithms (the modules import only jax, chex and optax).

* :mod:`~jaxrl_par.losses.returns`: GAE and V-trace over a trajectory.
* :mod:`~jaxrl_par.losses.policy_gradient`: PPO's clipped surrogate and value losses, the
  policy-gradient loss of A3C and IMPALA, the combined actor-critic loss.
* :mod:`~jaxrl_par.losses.qlearning`: (double) Q-learning TD errors and their losses.
* :mod:`~jaxrl_par.losses.soft_actor_critic`: SAC's target and losses, DDPG's and TD3's.
"""

from jaxrl_par.losses.policy_gradient import (
    actor_critic_loss,
    approx_kl,
    clipped_surrogate_loss,
    clipped_value_loss,
    policy_gradient_loss,
    value_loss,
)
from jaxrl_par.losses.qlearning import LOSSES, double_q_learning, q_learning, td_loss
from jaxrl_par.losses.returns import GAE_METHODS, VTraceOutput, gae_advantages, vtrace
from jaxrl_par.losses.soft_actor_critic import (
    clipped_double_q_target,
    deterministic_policy_gradient_loss,
    soft_actor_loss,
    soft_critic_loss,
    soft_q_target,
    target_policy_smoothing,
    temperature_loss,
)

__all__ = [
    "GAE_METHODS",
    "LOSSES",
    "VTraceOutput",
    "actor_critic_loss",
    "approx_kl",
    "clipped_double_q_target",
    "clipped_surrogate_loss",
    "clipped_value_loss",
    "deterministic_policy_gradient_loss",
    "double_q_learning",
    "gae_advantages",
    "policy_gradient_loss",
    "q_learning",
    "soft_actor_loss",
    "soft_critic_loss",
    "soft_q_target",
    "target_policy_smoothing",
    "td_loss",
    "temperature_loss",
    "value_loss",
    "vtrace",
]
