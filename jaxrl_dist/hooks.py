"""The run loop's periodic work as a table: what runs, and how often.

A period is given in updates, in seconds, or both. One in updates fires when the update count
crosses a multiple of it (a resumed run keeps the same grid). One in seconds is turned into
updates from the measured speed, with process 0's measurement broadcast to every process, and
fires once that many updates have passed since the hook last fired (or the loop began), so
every process fires the same hooks after the same updates, which is what lets a hook be a
collective (a checkpoint save, a replica check) in a multi-process job. The speed is measured
again after calls 1, 3, 7, 15, ... (each over the calls since the last measurement): an
off-policy run's first calls act at random and learn nothing, 10-100x faster than the rest, and
a period from them alone put a 10-minute checkpoint past the end of a 300k-step SAC run. A
population or a new algorithm reuses the loop by passing other actions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable


@dataclass
class Hook:
    name: str
    action: Callable[[int], None]     # called with the number of updates done
    every: int = 0                    # updates between calls; 0 = no update period
    seconds: float = 0.0              # wall-clock period; 0 = none
    _from_seconds: int = field(default=0, init=False)
    _last: int = field(default=0, init=False)   # updates when it last fired (or the loop began)

    @property
    def period(self) -> int:
        """The period in updates now in force (the smaller of the two), 0 = never."""
        periods = [p for p in (self.every, self._from_seconds) if p > 0]
        return min(periods) if periods else 0

    def due(self, before: int, after: int) -> bool:
        """Whether a multiple of ``every`` lies in (before, after], or the period from seconds
        has passed since the hook last fired."""
        if self.every > 0 and after // self.every > before // self.every:
            return True
        return self._from_seconds > 0 and after - self._last >= self._from_seconds


class HookTable:
    """The hooks of one run. ``calibrate`` with the agreed seconds per update whenever
    ``calibrates_after`` says so."""

    def __init__(self, hooks: list[Hook]):
        self.hooks = hooks
        self.timed = any(h.seconds > 0 for h in hooks)   # some period is in seconds

    def begin(self, updates: int) -> None:
        """The loop starts (or resumes) at ``updates``: periods in seconds count from here."""
        for h in self.hooks:
            h._last = updates

    def calibrates_after(self, call_index: int) -> bool:
        """Whether the speed is measured (and the periods in seconds set anew) after the call
        ``call_index`` (0, 1, 2, ...): calls 1, 3, 7, 15, ..., a few dozen times in any run."""
        return self.timed and call_index >= 1 and (call_index + 1) & call_index == 0

    def calibrate(self, seconds_per_update: float) -> None:
        for h in self.hooks:
            if h.seconds > 0:
                h._from_seconds = max(1, math.ceil(h.seconds / max(seconds_per_update, 1e-9)))

    def run_due(self, before: int, after: int, skip: tuple[str, ...] = ()) -> list[str]:
        """Call every hook due in (before, after], in table order; returns their names."""
        fired = []
        for h in self.hooks:
            if h.name not in skip and h.due(before, after):
                h.action(after)
                h._last = after
                fired.append(h.name)
        return fired

    def describe(self) -> str:
        return ", ".join(f"{h.name} every {h.period} updates" if h.period else f"{h.name} off"
                         for h in self.hooks)
