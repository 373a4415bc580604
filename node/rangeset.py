"""A small set of integers stored as sorted, disjoint, inclusive ranges.

Gaps in a receive window and the seqnos of an XMIT-REQ are ranges, not lists of ints: a window
missing 10 000 messages is one range, not 10 000 objects (after aioquic's rangeset).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Iterator


class RangeSet:
    __slots__ = ("_ranges",)

    def __init__(self, ranges: Iterable[tuple[int, int]] = ()):
        self._ranges: list[tuple[int, int]] = []
        for lo, hi in ranges:
            self.add(lo, hi)

    def add(self, lo: int, hi: int | None = None) -> None:
        """Add the inclusive range lo..hi (a single value when hi is None)."""
        if hi is None:
            hi = lo
        if hi < lo:
            raise ValueError(f"empty range {lo}..{hi}")
        ranges = self._ranges
        i = bisect_left(ranges, (lo, lo))
        # Merge with the previous range when it touches or overlaps.
        if i > 0 and ranges[i - 1][1] >= lo - 1:
            i -= 1
            lo = ranges[i][0]
            hi = max(hi, ranges[i][1])
        j = i
        while j < len(ranges) and ranges[j][0] <= hi + 1:
            hi = max(hi, ranges[j][1])
            j += 1
        ranges[i:j] = [(lo, hi)]

    def intersection(self, other: RangeSet) -> RangeSet:
        out = RangeSet()
        a, b = self._ranges, other._ranges
        i = j = 0
        while i < len(a) and j < len(b):
            lo = max(a[i][0], b[j][0])
            hi = min(a[i][1], b[j][1])
            if lo <= hi:
                out._ranges.append((lo, hi))
            if a[i][1] < b[j][1]:
                i += 1
            else:
                j += 1
        return out

    def truncated(self, max_values: int, max_ranges: int) -> RangeSet:
        """The lowest values of this set, at most max_values of them in at most max_ranges ranges."""
        out = RangeSet()
        left = max_values
        for lo, hi in self._ranges[:max_ranges]:
            if left <= 0:
                break
            hi = min(hi, lo + left - 1)
            out._ranges.append((lo, hi))
            left -= hi - lo + 1
        return out

    def __contains__(self, value: int) -> bool:
        i = bisect_left(self._ranges, (value + 1,)) - 1
        return i >= 0 and self._ranges[i][0] <= value <= self._ranges[i][1]

    def missing(self, lo: int, hi: int) -> Iterator[tuple[int, int]]:
        """The inclusive ranges of lo..hi that are not in this set, in order."""
        ranges = self._ranges
        i = max(0, bisect_left(ranges, (lo + 1,)) - 1)
        while lo <= hi:
            if i >= len(ranges) or ranges[i][0] > hi:
                yield lo, hi
                return
            a, b = ranges[i]
            if a > lo:
                yield lo, a - 1
            lo = max(lo, b + 1)
            i += 1

    def __iter__(self) -> Iterator[int]:
        for lo, hi in self._ranges:
            yield from range(lo, hi + 1)

    def ranges(self) -> tuple[tuple[int, int], ...]:
        return tuple(self._ranges)

    def count(self) -> int:
        return sum(hi - lo + 1 for lo, hi in self._ranges)

    def __bool__(self) -> bool:
        return bool(self._ranges)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RangeSet) and self._ranges == other._ranges

    def __repr__(self) -> str:
        return "RangeSet(" + ", ".join(f"{lo}..{hi}" for lo, hi in self._ranges) + ")"
