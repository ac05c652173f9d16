"""What a payment flow yields besides the requests it sends: a `Pause` before sending again."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Pause:
    """Wait ``seconds`` (the sync loop sleeps, the async one awaits; a flow stepped by hand goes on)."""

    seconds: float
