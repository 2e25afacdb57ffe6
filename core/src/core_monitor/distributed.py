"""Cross-rank reduction for ``Monitor.log(..., reduce=...)``: one ``all_reduce`` per call.

Every rank calls ``Monitor.log(metrics, step, reduce="mean")`` with the same tags (a collective,
like Lightning's ``self.log(..., sync_dist=True)``); the values are reduced across ranks with
``torch.distributed.all_reduce`` and rank 0 logs the result (every rank gets it back).

The core never imports torch: the process group is the caller's, found through
``sys.modules["torch.distributed"]``, so a process that never imported torch cannot have one.

Protocol (all tensors ``float64``, so integers below ``2**53`` and every float value are exact):

* The ranks agree once on the sorted tag names and the operation (a *key*): a fixed-size header
  ``[n, -n, h, -h, op, -op]`` reduced with ``MAX`` (``h`` a 48-bit BLAKE2 hash of the sorted
  tags), after which every rank knows whether all ranks hold the same key (``max == -max(-x)``).
  Differing keys raise ``TagMismatchError`` on every rank; nothing is logged.
* While the key stays the same, each call is ONE ``all_reduce`` of ``[changed, v1, ..., vn]``
  with the agreed operation. ``changed`` is 0 on a rank whose tags and operation equal the
  agreed key; a rank whose key changed sends 1 (and zeros). The flag travels in the same
  tensor, so every rank learns of a change from that one collective and all of them then run
  the header check again (then the values at the new size). The tensor's size is the agreed
  one on every rank, so a changed tag set can never make the ranks exchange tensors of
  different sizes (which gloo does not detect: it mixes or hangs).
"""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Mapping
from typing import Any

from .errors import ConfigError, TagMismatchError
from .events import flatten, to_float

#: Accepted ``reduce=`` operations.
OPS = ("mean", "sum", "max", "min")


def process_group() -> Any | None:
    """Return the ``torch.distributed`` module when the caller initialised a process group.

    Never imports torch: ``None`` when ``torch.distributed`` was not imported, is not
    available, or has no initialised default group.
    """
    dist = sys.modules.get("torch.distributed")
    if dist is None:
        return None
    try:
        if dist.is_available() and dist.is_initialized():
            return dist
    except Exception:  # a half-initialised process group
        return None
    return None


def _hash48(tags: tuple[str, ...]) -> float:
    digest = hashlib.blake2b("\0".join(tags).encode("utf-8", "surrogatepass"),
                             digest_size=6).digest()
    return float(int.from_bytes(digest, "big"))


class Reducer:
    """Per-``Monitor`` state of the reduction protocol (the agreed key).

    Every rank's ``Monitor`` sees the same sequence of ``reduce`` calls, so the agreed key is
    the same on every rank.
    """

    def __init__(self) -> None:
        self._agreed: tuple[str, tuple[str, ...]] | None = None

    def reduce_metrics(self, metrics: Any, op: str) -> dict[str, float]:
        """``reduce`` for what ``Monitor.log`` got: flattened with ``/``, each value a float.

        Raises:
            TypeError: ``metrics`` is not a mapping, or a value is not a number (names the tag).
            ConfigError, TagMismatchError: as ``reduce``.
        """
        if not isinstance(metrics, Mapping):
            raise TypeError(f"log() takes a mapping of {{tag: value}}, not "
                            f"{type(metrics).__name__}")
        return self.reduce({tag: to_float(tag, v) for tag, v in flatten(metrics)}, op)

    def reduce(self, values: Mapping[str, float], op: str) -> dict[str, float]:
        """Reduce ``values`` (``{tag: float}``) across ranks with ``op``; return them reduced.

        Args:
            values: this rank's scalars, already flattened and converted to ``float``.
            op: one of ``OPS``; ``"mean"`` is the sum divided by the world size.

        Returns:
            ``{tag: reduced value}`` in the caller's tag order, on every rank.

        Raises:
            ConfigError: ``op`` is not one of ``OPS``; or ``WORLD_SIZE`` > 1 in the environment
                while the caller initialised no ``torch.distributed`` process group.
            TagMismatchError: the ranks gave different tags or operations (on every rank).
        """
        if op not in OPS:
            raise ConfigError(f"reduce={op!r} is not an operation; use one of {list(OPS)} "
                              "(or reduce=None to log this rank's values as they are)")
        dist = process_group()
        if dist is None:
            world = os.environ.get("WORLD_SIZE", "1").strip() or "1"
            if world != "1":
                raise ConfigError(
                    f"reduce={op!r} needs the torch.distributed process group, but none is "
                    f"initialised while WORLD_SIZE={world}: call "
                    "torch.distributed.init_process_group() (or your framework's setup) "
                    "before logging with reduce=, or drop reduce="
                )
            return dict(values)
        if dist.get_world_size() == 1:
            return dict(values)
        torch = sys.modules["torch"]
        tags = tuple(sorted(values))
        key = (op, tags)
        if self._agreed is not None:
            agreed_op, agreed_tags = self._agreed
            changed = key != self._agreed
            data = [0.0 if changed else values[t] for t in agreed_tags]
            flag = 1.0 if changed else 0.0
            tensor = torch.tensor([-flag if agreed_op == "min" else flag, *data],
                                  dtype=torch.float64)
            dist.all_reduce(tensor, op=_torch_op(dist, agreed_op))
            out = tensor.tolist()
            if (-out[0] if agreed_op == "min" else out[0]) == 0.0:
                return _finish(values, agreed_tags, out[1:], op, dist.get_world_size())
            self._agreed = None  # someone's key changed: every rank checks the keys again
        self._check_keys(dist, torch, tags, op)
        self._agreed = key
        tensor = torch.tensor([values[t] for t in tags], dtype=torch.float64)
        dist.all_reduce(tensor, op=_torch_op(dist, op))
        return _finish(values, tags, tensor.tolist(), op, dist.get_world_size())

    @staticmethod
    def _check_keys(dist: Any, torch: Any, tags: tuple[str, ...], op: str) -> None:
        n, h, code = float(len(tags)), _hash48(tags), float(OPS.index(op))
        header = torch.tensor([n, -n, h, -h, code, -code], dtype=torch.float64)
        dist.all_reduce(header, op=dist.ReduceOp.MAX)
        top = header.tolist()
        if top[0] == -top[1] and top[2] == -top[3] and top[4] == -top[5]:
            return
        what = "operations" if top[0] == -top[1] and top[2] == -top[3] else "tags"
        shown = ", ".join(tags[:8]) + (", ..." if len(tags) > 8 else "")
        raise TagMismatchError(
            f"Monitor.log(reduce=...) was called with different {what} on different ranks "
            f"(rank {dist.get_rank()} of {dist.get_world_size()}: reduce={op!r}, {len(tags)} "
            f"tags: {shown}). Every rank must log the same tags with the same reduce= at each "
            "call; nothing of this call was logged.",
            tags,
        )


def _torch_op(dist: Any, op: str) -> Any:
    ops = dist.ReduceOp
    return {"mean": ops.SUM, "sum": ops.SUM, "max": ops.MAX, "min": ops.MIN}[op]


def _finish(values: Mapping[str, float], tags: tuple[str, ...], reduced: list[float], op: str,
            world_size: int) -> dict[str, float]:
    by_tag = dict(zip(tags, reduced, strict=True))
    if op == "mean":
        return {t: by_tag[t] / world_size for t in values}
    return {t: by_tag[t] for t in values}
