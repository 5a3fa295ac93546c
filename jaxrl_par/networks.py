"""Networks and action distributions shared by every algorithm.

* Torsos: :class:`MLP` and :class:`MinAtarCNN`.
* :class:`ActorCritic`: a policy head (categorical or diagonal Gaussian) and a value head,
  on one shared torso or (default, as in PureJaxRL) separate actor and critic torsos.
* :func:`make_policy`: the ``policy(params, obs, key) -> (action, extras)`` closure used by
  rollouts, evaluation and notebooks.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxrl_par import platform

#: The activations a config can name.
ACTIVATIONS: dict[str, Callable] = {
    "tanh": jnp.tanh, "relu": jax.nn.relu, "gelu": jax.nn.gelu, "swish": jax.nn.swish}


def orthogonal(scale: float):
    """:func:`jax.nn.initializers.orthogonal`, with its QR never batched under ``vmap``.

    Under ``vmap`` (several seeds, or a population) the plain initializer becomes one
    batched LAPACK ``geqrf`` per layer. jaxlib 0.10's CPU kernel for a batched QR splits
    the batch over XLA's intra-op thread pool and blocks one pool thread until the parts
    are done; with as many such calls in flight as the pool has threads (a network's
    layers are independent, so XLA runs them concurrently), every thread waits for work
    no thread is free to run and the process deadlocks. ``sequential_vmap`` turns the
    batch into a loop of unbatched QRs, which run inline: the same per-matrix LAPACK
    call, so the same bits. (jaxlib 0.11.1 removed the parallel path.)
    """
    base = nn.initializers.orthogonal(scale)

    def init(key, shape, dtype=None):
        return jax.custom_batching.sequential_vmap(lambda k: base(k, shape, dtype))(key)

    return init


# -- distributions ----------------------------------------------------------------------
def action_noise(key: jax.Array, shape: Sequence[int], discrete: bool,
                 dtype=jnp.float32) -> jax.Array:
    """The noise a distribution turns into actions, ``shape`` (``[..., A]`` logits' shape
    or ``[..., D]`` actions): Gumbel for :class:`Categorical` (``argmax(logits + noise)``
    is a sample), standard normal for :class:`DiagGaussian`.

    A rollout draws it for every step and every env of the global batch from one key, so
    that a batch sharded over devices draws the actions one device would.
    """
    shape = tuple(shape)
    if discrete:
        return jax.random.gumbel(key, shape, dtype)
    return jax.random.normal(key, shape, dtype)


class Categorical(NamedTuple):
    """Categorical distribution over the last axis of ``logits`` ``[..., A]``."""

    logits: jax.Array

    def noise(self, key: jax.Array) -> jax.Array:
        """Gumbel noise ``[..., A]`` for :meth:`sample_with_noise` (as
        ``jax.random.categorical`` draws it)."""
        return jax.random.gumbel(key, self.logits.shape, self.logits.dtype)

    def sample_with_noise(self, noise: jax.Array) -> jax.Array:
        """``argmax(logits + noise)`` over the last axis, ``[...]`` int32: a sample for
        Gumbel noise (:meth:`noise`) or :func:`action_noise`'s."""
        return jnp.argmax(self.logits + noise, axis=-1).astype(jnp.int32)

    def sample(self, key: jax.Array) -> jax.Array:
        """As ``jax.random.categorical(key, logits)``, bit for bit."""
        return self.sample_with_noise(self.noise(key))

    def mode(self) -> jax.Array:
        return jnp.argmax(self.logits, axis=-1)

    def log_prob(self, action: jax.Array) -> jax.Array:
        logp = jax.nn.log_softmax(self.logits)
        return jnp.take_along_axis(logp, action[..., None].astype(jnp.int32), axis=-1)[..., 0]

    def entropy(self) -> jax.Array:
        logp = jax.nn.log_softmax(self.logits)
        return -jnp.sum(jnp.exp(logp) * logp, axis=-1)


class DiagGaussian(NamedTuple):
    """Diagonal Gaussian with ``mean`` and ``log_std`` ``[..., D]``."""

    mean: jax.Array
    log_std: jax.Array

    def noise(self, key: jax.Array) -> jax.Array:
        """Standard normal noise ``[..., D]`` for :meth:`sample_with_noise`."""
        return action_noise(key, self.mean.shape, discrete=False, dtype=self.mean.dtype)

    def sample_with_noise(self, noise: jax.Array) -> jax.Array:
        return self.mean + jnp.exp(self.log_std) * noise

    def sample(self, key: jax.Array) -> jax.Array:
        return self.sample_with_noise(self.noise(key))

    def mode(self) -> jax.Array:
        return self.mean

    def log_prob(self, action: jax.Array) -> jax.Array:
        z = (action - self.mean) * jnp.exp(-self.log_std)
        return jnp.sum(-0.5 * z**2 - self.log_std - 0.5 * math.log(2 * math.pi), axis=-1)

    def entropy(self) -> jax.Array:
        return jnp.sum(self.log_std + 0.5 * (1.0 + math.log(2 * math.pi)), axis=-1)


# -- torsos -----------------------------------------------------------------------------
def as_input(x: jax.Array) -> jax.Array:
    """Observations as the networks compute on them: integer and bool inputs (uint8
    images, MinAtar's 0/1 grids) converted to float32, float inputs unchanged."""
    return x if jnp.issubdtype(x.dtype, jnp.floating) else x.astype(jnp.float32)


class MLP(nn.Module):
    """``[B, D] -> [B, hidden_sizes[-1]]`` fully connected torso."""

    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "tanh"

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = as_input(x.reshape(x.shape[0], -1))
        for h in self.hidden_sizes:
            x = ACTIVATIONS[self.activation](nn.Dense(h, kernel_init=orthogonal(math.sqrt(2)))(x))
        return x


class MinAtarCNN(nn.Module):
    """``[B, 10, 10, C] -> [B, hidden]``: one 3x3 conv (16 channels) and a dense layer,
    the network of Young & Tian (2019) used for MinAtar."""

    channels: int = 16
    hidden_sizes: Sequence[int] = (128,)
    activation: str = "relu"

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        act = ACTIVATIONS[self.activation]
        conv = platform.conv_layer()  # flax.linen.Conv, or its CPU-tuned twin
        x = act(conv(self.channels, (3, 3), padding="VALID",
                     kernel_init=orthogonal(math.sqrt(2)))(x))
        return MLP(self.hidden_sizes, self.activation)(x.reshape(x.shape[0], -1))


TORSOS = ("auto", "mlp", "cnn")


def make_torso(obs_shape: Sequence[int], hidden_sizes: Sequence[int], activation: str,
               kind: str = "auto"):
    """A torso by ``kind``: ``"mlp"`` (flattens), ``"cnn"`` (:class:`MinAtarCNN`), or
    ``"auto"``: CNN for image-like ``[H, W, C]`` observations, MLP otherwise."""
    if kind not in TORSOS:
        raise ValueError(f"torso={kind!r}; choose from {TORSOS}")
    if kind == "cnn" or (kind == "auto" and len(obs_shape) == 3):
        return MinAtarCNN(hidden_sizes=tuple(hidden_sizes), activation=activation)
    return MLP(tuple(hidden_sizes), activation)


# -- actor-critic -----------------------------------------------------------------------
#: How :class:`ActorCritic` parameterises a Gaussian policy's standard deviation.
ACTION_STDS = ("parameter", "softplus")
MIN_STD = 1e-3  # the floor of the "softplus" standard deviation (gymnax-blines')


class ActorCritic(nn.Module):
    """``obs [B, *obs_shape] -> (dist, value [B])``.

    Attributes:
      num_actions: discrete actions, or the action dimension when ``discrete=False``.
      discrete: categorical head if True, else a diagonal Gaussian.
      action_std: the Gaussian's standard deviation: ``"parameter"``, a learned,
        state-independent ``log_std`` (PureJaxRL, CleanRL), or ``"softplus"``, a head of
        the actor's torso, ``softplus(head(h)) + 0.001`` (gymnax-blines), which can narrow
        the policy in some states and not others.
      policy_init_scale: the scale of the policy head's orthogonal initialisation: 0.01
        starts near a uniform (or zero-mean) policy; about 1 starts each state with
        actions of its own, which explores sparse-reward tasks such as MountainCar.
      obs_shape: observation shape without the batch axis (picks MLP or CNN torso).
      hidden_sizes, activation: torso layout.
      shared_torso: one torso feeds both heads; otherwise separate actor and critic
        torsos (as in PureJaxRL), and :meth:`value` runs the critic alone.
      torso: ``"auto"``, ``"mlp"`` or ``"cnn"`` (see :func:`make_torso`).
    """

    num_actions: int
    discrete: bool = True
    obs_shape: Sequence[int] = (4,)
    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "tanh"
    shared_torso: bool = False
    torso: str = "auto"
    action_std: str = "parameter"
    policy_init_scale: float = 0.01

    def setup(self):
        def make():
            return make_torso(self.obs_shape, self.hidden_sizes, self.activation, self.torso)

        self.actor_torso = make()
        self.critic_torso = self.actor_torso if self.shared_torso else make()
        self.value_head = nn.Dense(1, kernel_init=orthogonal(1.0))
        self.policy_head = nn.Dense(self.num_actions,
                                    kernel_init=orthogonal(self.policy_init_scale))
        if self.action_std not in ACTION_STDS:
            raise ValueError(f"action_std={self.action_std!r}; choose from {ACTION_STDS}")
        if not self.discrete and self.action_std == "softplus":
            self.std_head = nn.Dense(self.num_actions, kernel_init=orthogonal(0.01))
        elif not self.discrete:
            self.log_std = self.param("log_std", nn.initializers.zeros, (self.num_actions,))

    def _dist(self, h_pi: jax.Array, out: jax.Array):
        if self.discrete:
            return Categorical(out)
        if self.action_std == "softplus":
            return DiagGaussian(out, jnp.log(jax.nn.softplus(self.std_head(h_pi)) + MIN_STD))
        return DiagGaussian(out, jnp.broadcast_to(self.log_std, out.shape))

    def __call__(self, obs: jax.Array):
        h_pi = self.actor_torso(obs)
        h_v = h_pi if self.shared_torso else self.critic_torso(obs)
        value = self.value_head(h_v)[..., 0]
        return self._dist(h_pi, self.policy_head(h_pi)), value

    def actor(self, obs: jax.Array):
        """The action distribution alone (skips the critic when torsos are separate)."""
        h_pi = self.actor_torso(obs)
        return self._dist(h_pi, self.policy_head(h_pi))

    def value(self, obs: jax.Array) -> jax.Array:
        """``[B]`` state values alone (skips the policy head and, if separate, its torso)."""
        return self.value_head(self.critic_torso(obs))[..., 0]


class PolicyExtras(NamedTuple):
    log_prob: jax.Array  # [B] log pi(a|s) of the sampled action
    value: jax.Array | None  # [B] V(s), None when the policy ran the actor alone


def make_policy(network: nn.Module, deterministic: bool = False, with_value: bool = True):
    """``policy(params, obs [B, ...], key) -> (action [B, ...], PolicyExtras)``.

    ``key`` is one PRNG key, or ``[B]`` keys (one per observation) so that a sharded
    batch draws exactly the actions it would draw on one device. With
    ``with_value=False`` only the actor runs (``ActorCritic.actor``) and
    ``extras.value`` is ``None``: rollouts that evaluate the critic later, in one large
    batch, act this way.
    """

    def policy(params, obs, key):
        if with_value:
            dist, value = network.apply(params, obs)
        else:
            dist, value = network.apply(params, obs, method="actor"), None
        if deterministic:
            action = dist.mode()
        elif key.ndim == 1:
            action = jax.vmap(lambda k, d: d.sample(k))(key, dist)
        else:
            action = dist.sample(key)
        return action, PolicyExtras(log_prob=dist.log_prob(action), value=value)

    return policy


# -- action values (DQN, Ape-X) -----------------------------------------------------------
class QNetwork(nn.Module):
    """``obs [B, *obs_shape] -> q [B, A]`` action values.

    Attributes:
      num_actions: number of discrete actions ``A``.
      obs_shape: observation shape without the batch axis (picks MLP or CNN torso).
      hidden_sizes, activation: torso layout.
      dueling: dueling head (Wang et al. 2016, https://arxiv.org/abs/1511.06581):
        ``q = v + a - mean_a(a)`` from a value stream and an advantage stream.
    """

    num_actions: int
    obs_shape: Sequence[int] = (4,)
    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "relu"
    dueling: bool = False

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        h = make_torso(self.obs_shape, self.hidden_sizes, self.activation)(obs)
        if not self.dueling:
            return nn.Dense(self.num_actions, kernel_init=orthogonal(1.0))(h)
        value = nn.Dense(1, kernel_init=orthogonal(1.0))(h)
        adv = nn.Dense(self.num_actions, kernel_init=orthogonal(1.0))(h)
        return value + adv - jnp.mean(adv, axis=-1, keepdims=True)


# -- soft actor-critic (SAC) -----------------------------------------------------------------
class TanhGaussian(NamedTuple):
    """A diagonal Gaussian squashed by ``tanh`` and scaled into the box ``[low, high]``
    (SAC's policy). ``u = mean + std * noise``, ``action = low + (tanh(u) + 1) / 2 *
    (high - low)``; its log-density counts the squashing's and the scaling's Jacobians."""

    mean: jax.Array  # [..., D]
    log_std: jax.Array  # [..., D]
    low: jax.Array  # [D]
    high: jax.Array  # [D]

    def _squash(self, u: jax.Array) -> jax.Array:
        return self.low + (jnp.tanh(u) + 1.0) * 0.5 * (self.high - self.low)

    def _log_prob_of_u(self, u: jax.Array) -> jax.Array:
        z = (u - self.mean) * jnp.exp(-self.log_std)
        gauss = -0.5 * jnp.square(z) - self.log_std - 0.5 * math.log(2 * math.pi)
        # log(1 - tanh(u)^2), stably: 2 (log 2 - u - softplus(-2u))
        log_det = 2.0 * (math.log(2.0) - u - jax.nn.softplus(-2.0 * u))
        return jnp.sum(gauss - log_det - jnp.log(0.5 * (self.high - self.low)), axis=-1)

    def sample_with_noise(self, noise: jax.Array) -> jax.Array:
        return self._squash(self.mean + jnp.exp(self.log_std) * noise)

    def sample_and_log_prob(self, noise: jax.Array) -> tuple[jax.Array, jax.Array]:
        """``(action, log_prob)`` from standard normal ``noise``, reparameterised (the
        gradient flows through both into ``mean`` and ``log_std``)."""
        u = self.mean + jnp.exp(self.log_std) * noise
        return self._squash(u), self._log_prob_of_u(u)

    def log_prob(self, action: jax.Array) -> jax.Array:
        y = jnp.clip(2.0 * (action - self.low) / (self.high - self.low) - 1.0,
                     -1.0 + 1e-6, 1.0 - 1e-6)
        return self._log_prob_of_u(jnp.arctanh(y))

    def mode(self) -> jax.Array:
        return self._squash(self.mean)


class SquashedGaussianActor(nn.Module):
    """``obs [B, *obs_shape] -> TanhGaussian`` over a ``[low, high]`` box of ``D``
    dimensions; ``log_std`` is mapped smoothly into ``log_std_range``."""

    action_dim: int
    low: Sequence[float]
    high: Sequence[float]
    obs_shape: Sequence[int] = (3,)
    hidden_sizes: Sequence[int] = (256, 256)
    activation: str = "relu"
    log_std_range: tuple[float, float] = (-5.0, 2.0)

    @nn.compact
    def __call__(self, obs: jax.Array) -> TanhGaussian:
        h = make_torso(self.obs_shape, self.hidden_sizes, self.activation)(obs)
        mean = nn.Dense(self.action_dim, kernel_init=orthogonal(0.01))(h)
        raw = nn.Dense(self.action_dim, kernel_init=orthogonal(0.01))(h)
        lo, hi = self.log_std_range
        log_std = lo + 0.5 * (hi - lo) * (jnp.tanh(raw) + 1.0)
        return TanhGaussian(mean, log_std, jnp.asarray(self.low, jnp.float32),
                            jnp.asarray(self.high, jnp.float32))


class _QHead(nn.Module):
    """``x [B, D] -> q [B]``: one critic of :class:`EnsembleQ`."""

    hidden_sizes: Sequence[int]
    activation: str

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        h = MLP(tuple(self.hidden_sizes), self.activation)(x)
        return nn.Dense(1, kernel_init=orthogonal(1.0))(h)[..., 0]


class EnsembleQ(nn.Module):
    """``(obs [B, ...], action [B, D]) -> q [K, B]``: ``K`` independent critics (SAC's
    twin Q by default), each an MLP on the observation and action concatenated."""

    num_critics: int = 2
    hidden_sizes: Sequence[int] = (256, 256)
    activation: str = "relu"

    @nn.compact
    def __call__(self, obs: jax.Array, action: jax.Array) -> jax.Array:
        x = jnp.concatenate([as_input(obs.reshape(obs.shape[0], -1)), action], axis=-1)
        critics = nn.vmap(_QHead, variable_axes={"params": 0}, split_rngs={"params": True},
                          in_axes=None, out_axes=0, axis_size=self.num_critics)
        return critics(tuple(self.hidden_sizes), self.activation, name="critics")(x)


class DeterministicActor(nn.Module):
    """``obs [B, *obs_shape] -> action [B, D]``: a deterministic policy ``mu(s)`` squashed
    by ``tanh`` into the box ``[low, high]`` (DDPG's and TD3's actor)."""

    action_dim: int
    low: Sequence[float]
    high: Sequence[float]
    obs_shape: Sequence[int] = (3,)
    hidden_sizes: Sequence[int] = (256, 256)
    activation: str = "relu"

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        h = make_torso(self.obs_shape, self.hidden_sizes, self.activation)(obs)
        u = nn.Dense(self.action_dim, kernel_init=orthogonal(0.01))(h)
        low = jnp.asarray(self.low, jnp.float32)
        high = jnp.asarray(self.high, jnp.float32)
        return low + (jnp.tanh(u) + 1.0) * 0.5 * (high - low)
