"""End-to-end jobs built only on dclust's public API: video color quantisation (:mod:`dclust.apps.video`) and
point-cloud streams (:mod:`dclust.apps.pointcloud`).

Optional dependencies (PyAV for video, plyfile / laspy for point clouds) are imported lazily, with an
ImportError that names the extra to install (``pip install 'dclust[video]'`` / ``'dclust[pointcloud]'``).
"""

__all__ = ["video", "pointcloud"]
