"""Video frames in and out (public API; the code is in :mod:`dclust.io._video`): PyAV decode/encode and frames as a
Zarr array ``(T, H, W, 3)`` uint8, every output written under a temporary name and renamed into place when
complete. Needs the ``video`` extra for video files (``pip install 'dclust[video]'``); Zarr frames need nothing more.

- :func:`open_frames` opens a video file or Zarr frames store from its metadata (a :class:`FrameSource`:
  ``width``, ``height``, ``fps``, ``n_frames``, ``frames(start, stop)``, ``frame(t)``).
- :func:`create_sink` creates a new video file or Zarr frames store (a :class:`FrameSink`: ``write(frame)``,
  ``commit()``, ``abort()``); :func:`write_video` writes an iterable of frames in one call.
- :func:`read_frame` / :func:`write_frame` read or write frame ``t`` of a Zarr frames store (the workers of a
  distributed job); :func:`write_png` writes an RGB(A) image; :func:`is_zarr_path` tells a Zarr output from a video.
- :func:`remove_tree` removes a file or directory if present.

Examples
--------
>>> import os, tempfile, numpy as np
>>> from dclust.io.video import open_frames, write_video
>>> frames = [np.full((4, 6, 3), t, np.uint8) for t in range(3)]
>>> path = write_video(frames, os.path.join(tempfile.mkdtemp(), "clip.zarr"))
>>> src = open_frames(path)
>>> (src.n_frames, src.height, src.width), int(src.frame(2)[0, 0, 0])
((3, 4, 6), 2)
"""

from __future__ import annotations

from ._video import (
    FrameSink,
    FrameSource,
    create_sink,
    is_zarr_path,
    open_frames,
    read_frame,
    remove_tree,
    write_frame,
    write_png,
    write_video,
)

__all__ = ["open_frames", "create_sink", "write_video", "read_frame", "write_frame", "write_png", "is_zarr_path",
           "remove_tree", "FrameSource", "FrameSink"]
