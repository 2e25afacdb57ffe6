"""``StepSet``: the steps a tag already holds, as SwanLab sees them (it keeps the first value
of a tag at a step and drops later ones)."""

from __future__ import annotations

from bisect import bisect_right


class StepSet:
    """A set of ``int`` steps kept as sorted, disjoint, non-adjacent ``[first, last]`` ranges:
    a run's steps (0, 1, 2, ... or every 10th) take a few ranges, not one entry per step.

    ``add`` costs ``O(log r + r)`` for ``r`` ranges in the worst case (a new range in the
    middle), ``O(log r)`` when a step extends the last range (the usual case).
    """

    def __init__(self) -> None:
        self._firsts: list[int] = []
        self._lasts: list[int] = []

    def add(self, step: int) -> bool:
        """Add ``step``; ``False`` when it was already in the set (nothing changes)."""
        at = bisect_right(self._firsts, step) - 1  # the range starting at or before step
        if at >= 0 and step <= self._lasts[at]:
            return False
        joins_left = at >= 0 and self._lasts[at] == step - 1
        joins_right = at + 1 < len(self._firsts) and self._firsts[at + 1] == step + 1
        if joins_left and joins_right:
            self._lasts[at] = self._lasts[at + 1]
            del self._firsts[at + 1], self._lasts[at + 1]
        elif joins_left:
            self._lasts[at] = step
        elif joins_right:
            self._firsts[at + 1] = step
        else:
            self._firsts.insert(at + 1, step)
            self._lasts.insert(at + 1, step)
        return True

    def __len__(self) -> int:
        """The number of ranges (not of steps)."""
        return len(self._firsts)
