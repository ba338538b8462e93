"""Helpers of the checkpoint tests: die after iteration k as a killed driver would, and snapshot a checkpoint."""

from __future__ import annotations

import os


class Stop(Exception):
    """Raised by a progress callback: the fit dies after an iteration, as a killed driver would."""


def stop_after(k):
    """A progress callback that raises :class:`Stop` at the k-th ``"iter"`` event."""
    seen = []

    def callback(event):
        if event.phase == "iter":
            seen.append(event.iteration)
            if len(seen) == k:
                raise Stop

    return callback


def snapshot(path):
    """Every file below ``path`` as {relative path: bytes}: equal snapshots mean nothing was written."""
    out = {}
    for root, _, files in os.walk(path):
        for f in files:
            with open(os.path.join(root, f), "rb") as fh:
                out[os.path.relpath(os.path.join(root, f), path)] = fh.read()
    return out


class Interrupt:
    """A progress callback that presses Ctrl-C (raises KeyboardInterrupt) once iteration (or batch) ``at`` is done."""

    def __init__(self, at):
        self.at = at

    def __call__(self, event):
        if event.phase == "iter" and event.iteration == self.at:
            raise KeyboardInterrupt
