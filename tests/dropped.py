"""A Ctrl-C or SIGTERM whose exception Python dropped, for the interrupt tests."""

from __future__ import annotations

from jaxrl_par.runner import interrupt

#: ``(handler, the exception it raises)`` of the CLI's raising signal handlers, for
#: ``pytest.mark.parametrize("handler, raised", HANDLERS)``.
HANDLERS = [(interrupt.raise_terminated, interrupt.Terminated),
            (interrupt.raise_interrupt, KeyboardInterrupt)]


def drop_signal(handler) -> None:
    """Runs ``handler`` (one of :data:`HANDLERS`) inside ``__del__``, where Python prints
    "Exception ignored in ..." and goes on, as inside jax's garbage-collection callback:
    the exception is lost, and only the handler's note for ``interrupt.raise_pending``
    remains."""
    class Dropped:
        def __del__(self):
            handler(None, None)

    Dropped()
