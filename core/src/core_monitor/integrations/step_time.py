"""Per-rank step times that name the slow rank (``step_time=`` of the integrations).

In synchronous data-parallel training every rank waits for the slowest one in the gradient
all-reduce, inside the backward pass, so a step's wall time measured in callbacks is about the
slowest rank's on *every* rank: it cannot name the slow rank. What differs between ranks is
what happens before that wait, so each rank measures, per step (in seconds, ``time.perf_counter``):

* ``<prefix>/data``: from the end of the previous step (or of the integration's own logging,
  evaluation or checkpoint after it, whichever is later) to the start of this step: the wait
  for the batch. A rank whose data loader is slow has the largest.
* ``<prefix>/forward``: from the start of the step to the start of its (last) backward pass,
  where the framework shows it: the rank's own compute before the all-reduce. A rank whose
  forward pass or loss is slow has the largest.
* ``<prefix>/step``: from the start of the step to its end, the all-reduce wait included
  (about the same on every rank; ``data + step`` is the rank's whole step).

At each logging call of the framework (which every rank makes), each value is the mean per
step over the steps since the previous one, and the ranks exchange them in ONE ``all_gather``
(``core_monitor.distributed``, ``reduce="stats"``): rank 0 stores ``<tag>/mean``, ``/median``,
``/min``, ``/max``, ``/min_rank``, ``/max_rank``. A logging call with no step since the
previous one (an epoch-end or evaluation log) exchanges nothing, and steps between logging
calls cost two ``perf_counter`` calls each, never a collective.

Lightning's ``MonitorLogger`` and the Hugging Face Trainer's ``MonitorCallback`` drive a
``StepClock`` from their hooks (``step_time=True``). accelerate and DeepSpeed leave the loop to
its author, and so the clock too (imports no framework)::

    clock = StepClock("step_time")
    clock.idle()
    for step, batch in enumerate(loader):
        clock.start()                      # the batch is in hand
        loss = model(batch)
        clock.backward()
        accelerator.backward(loss)         # or engine.backward(loss); engine.step()
        optimizer.step()
        clock.end()
        if step % 50 == 0:
            times = clock.collect()        # on every rank: one all_gather
            accelerator.log({"loss": loss.item(), **times}, step=step)
            clock.idle()
"""

from __future__ import annotations

import time
from typing import Any

from ..distributed import Reducer
from ..errors import ConfigError

__all__ = ["DEFAULT_PREFIX", "StepClock", "step_time_prefix"]

#: The tag prefix of ``step_time=True``.
DEFAULT_PREFIX = "step_time"


def step_time_prefix(step_time: Any, source: str) -> str | None:
    """The tag prefix ``step_time`` asks for: ``None`` (off) for ``False``/``None``,
    ``"step_time"`` for ``True``, the string itself for a non-empty ``str``.

    Raises:
        ConfigError: any other value (names ``source``, the value and the accepted ones).
    """
    if step_time is None or step_time is False:
        return None
    if step_time is True:
        return DEFAULT_PREFIX
    if isinstance(step_time, str) and step_time.strip("/"):
        return step_time.strip("/")
    raise ConfigError(f"{source}: step_time={step_time!r} must be True (tags under "
                      f"'{DEFAULT_PREFIX}/'), False, or a tag prefix such as 'timing'")


class StepClock:
    """The step times of one rank between two logging calls (see the module docstring).

    The framework's hooks call ``start`` and ``end`` around each step, ``backward`` where the
    backward pass starts (or the forward pass ends), and ``idle`` after work of its own between
    steps (logging, evaluation, saving) that is not a wait for data. ``collect`` is a
    collective: every rank calls it at the same logging calls.

    Args:
        prefix: the tag prefix, e.g. ``"step_time"``.
        forward: whether the framework shows where the backward pass starts (a ``forward``
            tag); ``False`` stores ``data`` and ``step`` only.
    """

    def __init__(self, prefix: str, *, forward: bool = True) -> None:
        self.prefix = prefix
        self._forward = forward
        self._reducer = Reducer()  # its own agreed key: only step times go through it
        self._mark: float | None = None  # end of the last step or of our own work after it
        self._started: float | None = None
        self._backward: float | None = None
        self._sums = [0.0, 0.0, 0.0]  # data, forward, step (seconds)
        self._steps = 0
        self._data_steps = 0  # steps with a previous step to measure the wait from

    @property
    def steps(self) -> int:
        """Steps measured since the last ``collect``: the same number on every rank."""
        return self._steps

    def start(self) -> None:
        """A step starts (its batch is in hand)."""
        now = time.perf_counter()
        if self._mark is not None:
            self._sums[0] += now - self._mark
            self._data_steps += 1
        self._started, self._backward = now, None

    def backward(self) -> None:
        """The step's backward pass starts (the last call of a step counts)."""
        if self._started is not None:
            self._backward = time.perf_counter()

    def end(self) -> None:
        """The step ended."""
        now = time.perf_counter()
        if self._started is None:
            return
        self._sums[1] += (self._backward if self._backward is not None else now) - self._started
        self._sums[2] += now - self._started
        self._steps += 1
        self._started, self._mark = None, now

    def idle(self) -> None:
        """Work between steps that is not a wait for data ended (logging, evaluation, a
        checkpoint), or an epoch starts: the next step's ``data`` time starts now."""
        if self._started is None:
            self._mark = time.perf_counter()

    def reset(self) -> None:
        """Forget the step in flight and the end of the last one (training stopped: the next
        wait starts with the next training)."""
        self._started = self._mark = None

    def collect(self) -> dict[str, float]:
        """The cross-rank view of the mean step times since the last call, keyed by tag (see
        the module docstring); ``{}`` when no step ended since (on every rank alike). One
        ``all_gather`` when there is something to collect and a process group.

        Raises:
            core_monitor.TagMismatchError: the ranks disagree (a rank measured ``forward``
                and another did not).
        """
        if not self._steps:
            return {}
        data, forward, step = self._sums
        values = {f"{self.prefix}/data": data / self._data_steps if self._data_steps else 0.0}
        if self._forward:
            values[f"{self.prefix}/forward"] = forward / self._steps
        values[f"{self.prefix}/step"] = step / self._steps
        self._sums, self._steps, self._data_steps = [0.0, 0.0, 0.0], 0, 0
        return self._reducer.reduce(values, "stats")
