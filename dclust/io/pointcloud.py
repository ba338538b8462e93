"""Point-cloud frames in and out (public API; the code is in :mod:`dclust.io._pointcloud`): sequences of ``.ply`` /
``.las`` / ``.laz`` / ``.npy`` files or a Zarr array of frames, scanned from metadata and read one frame at a
time, and the outputs of a tracking job (label store, tracks table), each written atomically. ``.ply`` and
``.las``/``.laz`` need the ``pointcloud`` extra (``pip install 'dclust[pointcloud]'``).

- :func:`scan_frames` finds and checks the frames of a directory, glob or Zarr store (a source whose
  ``read(t)`` gives a :class:`PointFrame`: ``xyz`` and optionally ``rgb``, ``normals``); :data:`FEATURES` names
  the attributes a frame may carry.
- :func:`write_ply`, :func:`write_las`, :func:`write_npy` write one frame.
- :class:`FrameLabelsWriter` fills the label store of a tracking job (frames x max points, ``-1`` padding)
  inside :func:`write_labels_store`, which creates it atomically after :func:`check_new_store`;
  :func:`write_table` writes a Parquet or CSV table, :func:`atomic_file` any file, after :func:`check_new_file`.

Examples
--------
>>> import os, tempfile, numpy as np
>>> from dclust.io.pointcloud import scan_frames, write_npy
>>> d = tempfile.mkdtemp()
>>> for t in range(2):
...     _ = write_npy(os.path.join(d, f"frame{t}.npy"), np.full((5, 3), float(t)))
>>> src = scan_frames(d)
>>> len(src.frames), src.read(1).xyz[0].tolist()
(2, [1.0, 1.0, 1.0])
"""

from __future__ import annotations

from ._pointcloud import (
    FEATURES,
    FrameLabelsWriter,
    PointFrame,
    atomic_file,
    check_new_file,
    check_new_store,
    scan_frames,
    write_labels_store,
    write_las,
    write_npy,
    write_ply,
    write_table,
)

__all__ = ["scan_frames", "PointFrame", "FEATURES", "write_ply", "write_las", "write_npy", "FrameLabelsWriter",
           "check_new_store", "write_labels_store", "write_table", "check_new_file", "atomic_file"]
