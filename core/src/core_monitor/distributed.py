"""Cross-rank reduction for ``Monitor.log(..., reduce=...)``: one collective per call.

``"mean"``, ``"sum"``, ``"max"``, ``"min"``: one ``all_reduce``. ``"stats"`` and ``"ranks"``:
one ``all_gather`` of every rank's values, stored as each tag's cross-rank view (mean, median,
min, max, and the ranks holding the min and the max: the slowest rank, named), with
``"ranks"`` each rank's value too (``cross_rank_view``). Both kinds share the protocol below:
the collective of a call is always the agreed operation's, so a rank whose call differs in
kind never meets the others in a collective of another kind.

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
import math
import os
import statistics
import sys
from collections.abc import Mapping
from typing import Any

from .errors import ConfigError, TagMismatchError
from .events import flatten, to_float

#: Accepted ``reduce=`` operations: an ``all_reduce`` each, or an ``all_gather`` (``GATHERED``).
OPS = ("mean", "sum", "max", "min", "stats", "ranks")
#: The operations that gather every rank's value and store its cross-rank view: for each tag
#: ``t``, ``t/mean``, ``t/median``, ``t/min``, ``t/max``, ``t/min_rank``, ``t/max_rank``;
#: ``"ranks"`` also each rank's own value as ``t/rank<k>``.
GATHERED = ("stats", "ranks")


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
            op: one of ``OPS``; ``"mean"`` is the sum divided by the world size;
                ``"stats"``/``"ranks"`` gather every rank's values and return each tag's
                cross-rank view instead (``cross_rank_view``: ``t/mean``, ``t/median``,
                ``t/min``, ``t/max``, ``t/min_rank``, ``t/max_rank``, and ``t/rank<k>``).

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
        dist = _group_or_none(op)
        if dist is None or dist.get_world_size() == 1:
            if op in GATHERED:
                return cross_rank_view(values, [list(values.values())], list(values), op)
            return dict(values)
        torch = sys.modules["torch"]
        world = dist.get_world_size()
        tags = tuple(sorted(values))
        key = (op, tags)
        if self._agreed is not None:
            # The collective is the agreed operation's (the same on every rank), whatever this
            # call asks: a changed key travels as a flag in it, and every rank checks again.
            agreed_op, agreed_tags = self._agreed
            changed = key != self._agreed
            flag = 1.0 if changed else 0.0
            data = [0.0 if changed else values[t] for t in agreed_tags]
            if agreed_op in GATHERED:
                table = _all_gather(dist, torch, [flag, *data], world)
                if not any(row[0] for row in table):
                    return cross_rank_view(values, [row[1:] for row in table],
                                           list(agreed_tags), op)
            else:
                tensor = torch.tensor([-flag if agreed_op == "min" else flag, *data],
                                      dtype=torch.float64)
                dist.all_reduce(tensor, op=_torch_op(dist, agreed_op))
                out = tensor.tolist()
                if (-out[0] if agreed_op == "min" else out[0]) == 0.0:
                    return _finish(values, agreed_tags, out[1:], op, world)
            self._agreed = None  # someone's key changed: every rank checks the keys again
        self._check_keys(dist, torch, tags, op)
        self._agreed = key
        if op in GATHERED:
            table = _all_gather(dist, torch, [0.0, *[values[t] for t in tags]], world)
            return cross_rank_view(values, [row[1:] for row in table], list(tags), op)
        tensor = torch.tensor([values[t] for t in tags], dtype=torch.float64)
        dist.all_reduce(tensor, op=_torch_op(dist, op))
        return _finish(values, tags, tensor.tolist(), op, world)

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


def _all_gather(dist: Any, torch: Any, row: list[float], world: int) -> list[list[float]]:
    """Every rank's ``row`` (all of one length), by rank: one ``all_gather``."""
    mine = torch.tensor(row, dtype=torch.float64)
    rows = [torch.zeros_like(mine) for _ in range(world)]
    dist.all_gather(rows, mine)
    return [r.tolist() for r in rows]


def _group_or_none(op: str) -> Any | None:
    """The process group, ``None`` without one in a world of 1; ``ConfigError`` without one
    while ``WORLD_SIZE`` > 1."""
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
    return dist


def cross_rank_view(values: Mapping[str, float], table: list[list[float]], tags: list[str],
                    op: str) -> dict[str, float]:
    """Each tag's view across ranks, from ``table[rank][i]`` = that rank's value of
    ``tags[i]``, in the caller's tag order.

    For each tag ``t``: ``t/mean``; ``t/median`` (of an even number of ranks: the mean of the
    two middle values, as ``statistics.median``); ``t/min`` and ``t/max``; ``t/min_rank`` and
    ``t/max_rank``, the rank holding them (the lowest such rank on a tie); with ``op ==
    "ranks"`` also ``t/rank<k>``, each rank's value. A NaN from some rank makes ``t/mean``
    NaN; the other figures are those of the ranks with a number (all NaN: NaN, rank -1).
    """
    out: dict[str, float] = {}
    column = {tag: i for i, tag in enumerate(tags)}
    for tag in values:
        per_rank = [row[column[tag]] for row in table]
        numbers = [(v, rank) for rank, v in enumerate(per_rank) if not math.isnan(v)]
        out[f"{tag}/mean"] = math.fsum(per_rank) / len(per_rank)
        if numbers:
            low, high = min(numbers), max(numbers, key=lambda vr: (vr[0], -vr[1]))
            out[f"{tag}/median"] = statistics.median(v for v, _ in numbers)
            out[f"{tag}/min"], out[f"{tag}/min_rank"] = low[0], float(low[1])
            out[f"{tag}/max"], out[f"{tag}/max_rank"] = high[0], float(high[1])
        else:
            for name in ("median", "min", "max"):
                out[f"{tag}/{name}"] = math.nan
            out[f"{tag}/min_rank"] = out[f"{tag}/max_rank"] = -1.0
        if op == "ranks":
            for rank, value in enumerate(per_rank):
                out[f"{tag}/rank{rank}"] = value
    return out


def _torch_op(dist: Any, op: str) -> Any:
    ops = dist.ReduceOp
    return {"mean": ops.SUM, "sum": ops.SUM, "max": ops.MAX, "min": ops.MIN}[op]


def _finish(values: Mapping[str, float], tags: tuple[str, ...], reduced: list[float], op: str,
            world_size: int) -> dict[str, float]:
    by_tag = dict(zip(tags, reduced, strict=True))
    if op == "mean":
        return {t: by_tag[t] / world_size for t in values}
    return {t: by_tag[t] for t in values}
