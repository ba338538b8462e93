"""End-to-end jobs built only on dclust's public API: video colour quantisation and point-cloud streams.

Optional dependencies (PyAV for video, plyfile / laspy for point clouds) are imported lazily, with an
ImportError that names the extra to install (``pip install 'dclust[video]'`` / ``'dclust[pointcloud]'``).
"""
