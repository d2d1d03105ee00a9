"""When repeating cycles stops being worth it: flavor scans that go round in a circle.

A cycle that admits, evicts, parks or places nothing may still be "changed"
(:attr:`services.core.cycle.CycleResult.changed`): some head stopped its flavor
scan early and the next cycle resumes it further down the list (Kueue's
FlavorFungibility ``LastTriedFlavorIdx``, the head requeued at once because of
its pending flavors). With several podSets the scan positions of one podSet
decide what the flavors of the next one must fit beside, so with the rest of
the state unchanged the positions can come back to where they were: e.g. a
PyTorchJob whose Master takes ``gpu-t4`` at flavor 0 so that its Workers need
``gpu-a100`` (full), then, resuming, Master on ``gpu-a100`` (full) and Workers
on ``gpu-t4`` at flavor 0, and back again. Kueue does the same; in real time
its scheduler backs off and the cluster moves on, but a loop that cycles until
a cycle is quiet would never see one.

Cycles without an admission, eviction, park or placement change nothing but the
heads' scan positions (a head not parked goes back to its place in its queue),
so the next cycle is a function of those positions. Once a cycle ends with the
positions some earlier cycle ended with since the last one that acted (or the
last event folded), the cycles from there on only repeat: the cycle is as good
as quiet. :class:`ScanOrbit` tells, cycle by cycle; the caller forgets what it
saw (:meth:`ScanOrbit.reset`) whenever it folds an event.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from services.core.cycle import CycleResult

Positions = tuple[tuple[str, str, bool, bool, tuple[tuple[int, int, int], ...] | None], ...]


def positions(result: CycleResult) -> Positions:
    """Where every head of the cycle stands afterwards: its queue, parked or not, sticky or not, and
    where its flavor scan resumes."""
    return tuple((h.key, h.cluster_queue, h.parked, h.sticky, h.last_tried) for h in result.heads)


@dataclass(slots=True)
class ScanOrbit:
    """The scan positions seen since the state last changed otherwise (membership only, never iterated)."""

    seen: set[Positions] = field(default_factory=set)

    def reset(self) -> None:
        self.seen.clear()

    def progressed(self, result: CycleResult) -> bool:
        """Whether another cycle could decide differently: ``result.changed``, except that scan
        positions already seen since the last reset (or the last cycle that acted) are a circle."""
        if not result.changed:
            return False
        if result.admitted or result.evicted or result.parked or result.placed:
            self.seen.clear()
            return True
        here = positions(result)
        if here in self.seen:
            return False
        self.seen.add(here)
        return True
