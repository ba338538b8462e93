"""The checkpoint of the video job (``.{OUT}.resume/``): the per-frame palettes and the fitter's model, saved every
few seconds and on interruption, and refused when the parameters or the input changed."""

from __future__ import annotations

import json
import os
import time
from typing import Any

from dclust.errors import StorageError
from dclust.io import write_bytes
from dclust.io.video import remove_tree

from ._palettes import Palette

__all__ = ["Checkpoint", "checkpoint_dir", "fingerprint"]

_VERSION = 1
_SECONDS = 5.0


def checkpoint_dir(output: str) -> str:
    parent, name = os.path.split(os.path.abspath(output).rstrip(os.sep))
    return os.path.join(parent, f".{name}.resume")


def fingerprint(src: Any) -> dict:
    """What identifies the input of a checkpoint (a video file by its size and modification time too)."""
    st = os.stat(src.path)
    return {"path": os.path.abspath(src.path), "kind": src.kind, "width": src.width, "height": src.height,
            "size": st.st_size if src.kind == "video" else None,
            "mtime_ns": st.st_mtime_ns if src.kind == "video" else None, "n_frames": src.n_frames}


class Checkpoint:
    def __init__(self, directory: str, params: dict, fingerprint: dict) -> None:
        self.dir, self.params, self.fingerprint = directory, params, fingerprint
        self.last = time.perf_counter()
        self.saved_n = -1

    def load(self) -> tuple[list[Palette], str | None] | None:
        path = os.path.join(self.dir, "state.json")
        if not os.path.isfile(path):
            return None
        try:
            with open(path) as f:
                doc = json.load(f)
        except (OSError, ValueError) as exc:
            raise StorageError(f"the checkpoint {path!r} cannot be read ({exc}); remove {self.dir!r} to start "
                               "afresh.") from exc
        if doc.get("version") != _VERSION:
            raise StorageError(f"the checkpoint {path!r} has version {doc.get('version')!r}, this dclust reads "
                               f"{_VERSION}; remove {self.dir!r} to start afresh.")
        diff = [f"{k}={doc['params'].get(k)!r} (now {v!r})" for k, v in self.params.items()
                if doc["params"].get(k) != v]
        if diff:
            raise StorageError(f"the checkpoint in {self.dir!r} was written with other parameters: "
                               f"{', '.join(diff)}; pass the same parameters to resume, or drop --resume.")
        theirs = {k: v for k, v in doc["input"].items() if k != "n_frames"}
        ours = {k: v for k, v in self.fingerprint.items() if k != "n_frames"}
        if theirs != ours:
            raise StorageError(f"the checkpoint in {self.dir!r} belongs to another input ({doc['input']['path']!r}, "
                               "or the file changed since); resume with the same input, or drop --resume.")
        return [Palette.from_json(d) for d in doc["palettes"]], doc.get("model")

    def save(self, palettes: list[Palette], fitter: Any, force: bool = False) -> None:
        n = len(palettes)
        if n == self.saved_n or not n or (not force and time.perf_counter() - self.last < _SECONDS):
            return
        os.makedirs(self.dir, exist_ok=True)
        model = fitter.save(self.dir, n)
        doc = {"version": _VERSION, "params": self.params, "input": self.fingerprint, "model": model,
               "palettes": [p.to_json() for p in palettes]}
        write_bytes(json.dumps(doc).encode(), os.path.join(self.dir, "state.json"))
        for name in os.listdir(self.dir):  # older models
            if name.startswith("model-") and name != model:
                remove_tree(os.path.join(self.dir, name))
        self.last, self.saved_n = time.perf_counter(), n

    def remove(self) -> None:
        remove_tree(self.dir)
