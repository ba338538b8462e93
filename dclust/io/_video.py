"""Video frames in and out: PyAV decode/encode, and frames as a Zarr array ``(T, H, W, 3)`` uint8.

PyAV is imported lazily (``pip install 'dclust[video]'``). Every output is written under a temporary sibling name
(``.{name}.tmp-<random>``) and renamed into place by :meth:`FrameSink.commit` once complete; :meth:`FrameSink.abort`
removes it, so an interrupted or failed job leaves no partial output behind.

Sources iterate RGB frames as ``(H, W, 3)`` uint8 arrays; sinks take the same. Decoding and encoding run inside
PyAV's codecs, which release the GIL, so a reader and a writer thread overlap with the caller's computation.
"""

from __future__ import annotations

import os
import shutil
from fractions import Fraction
from typing import Any, Iterator

import numpy as np

from ..errors import InvalidDataError, StorageError, message
from .._store._atomic import (  # noqa: F401 - check_output, write_bytes: re-exported
    _atomic_write,
    _is_zarr_dir,
    _remove_tmp,
    _tmp_name,
    check_output,
    remove_stale_tmp,
    write_bytes,
)
from .._store._zarr import checksummed

__all__ = [
    "import_av",
    "is_zarr_path",
    "open_frames",
    "create_sink",
    "check_output",
    "FrameSource",
    "FrameSink",
    "write_video",
    "write_png",
    "write_bytes",
    "remove_tree",
    "read_frame",
    "write_frame",
]

#: Encoders tried in order for a new video (the first one the installed PyAV/FFmpeg offers), with their options.
_ENCODERS: tuple[tuple[str, dict[str, str]], ...] = (
    ("libx264", {"preset": "ultrafast", "crf": "18"}),
    ("h264", {}),
    ("libopenh264", {}),
    ("mpeg4", {"qscale": "2"}),
)
_DEFAULT_ZARR_FPS = Fraction(25)


def import_av() -> Any:
    """The ``av`` module, or an ImportError naming the extra to install."""
    try:
        import av
    except ImportError as exc:  # pragma: no cover - exercised by a test that hides the module
        raise ImportError(
            "video input/output needs PyAV (the 'av' package), which is not installed; "
            "install the extra: pip install 'dclust[video]'"
        ) from exc
    return av


def is_zarr_path(path: str | os.PathLike[str]) -> bool:
    """True for a path that names (or will name) a Zarr store: an existing Zarr directory or a ``.zarr`` suffix.

    Examples
    --------
    >>> from dclust.io.video import is_zarr_path
    >>> is_zarr_path("frames.zarr"), is_zarr_path("movie.mp4")
    (True, False)
    """
    text = os.fspath(path).rstrip("/")
    return text.endswith(".zarr") or _is_zarr_dir(os.path.abspath(text))


# ------------------------------------------------------------------------------------------------------ sources


class FrameSource:
    """Frames of a video file (PyAV) or of a Zarr array ``(T, H, W, 3)`` uint8.

    Attributes: ``path``, ``width``, ``height``, ``fps`` (Fraction), ``n_frames`` (int, or None when a video
    container does not state it), ``kind`` ("video" or "zarr").

    Examples
    --------
    >>> import os, tempfile, numpy as np
    >>> from dclust.io.video import open_frames, write_video
    >>> with tempfile.TemporaryDirectory() as d:
    ...     src = open_frames(write_video([np.full((2, 3, 3), t, np.uint8) for t in range(4)],
    ...                                   os.path.join(d, "c.zarr")))
    ...     print([int(f[0, 0, 0]) for f in src.frames(1, 3)], int(src.frame(3)[0, 0, 0]))
    [1, 2] 3
    """

    def __init__(self, path: str, kind: str, width: int, height: int, fps: Fraction, n_frames: int | None,
                 array: Any = None) -> None:
        self.path, self.kind = path, kind
        self.width, self.height, self.fps, self.n_frames = int(width), int(height), Fraction(fps), n_frames
        self._array = array

    def frames(self, start: int = 0, stop: int | None = None) -> Iterator[np.ndarray]:
        """RGB frames ``start, start+1, ... < stop`` as contiguous ``(H, W, 3)`` uint8 arrays."""
        if self.kind == "zarr":
            end = self._array.shape[0] if stop is None else min(stop, self._array.shape[0])
            for t in range(start, end):
                yield np.ascontiguousarray(self._array[t])
            return
        av = import_av()
        try:
            container = av.open(self.path, mode="r")
        except Exception as exc:  # noqa: BLE001 - PyAV raises many FFmpeg error types
            raise _unreadable(self.path, exc) from exc
        try:
            stream = container.streams.video[0]
            stream.thread_type = "AUTO"
            t = 0
            try:
                for frame in container.decode(stream):
                    if stop is not None and t >= stop:
                        break
                    if t >= start:
                        yield frame.to_ndarray(format="rgb24")
                    t += 1
            except av.error.FFmpegError as exc:
                raise InvalidDataError(
                    message(f"video {self.path!r}", "a decodable video stream", f"a decoding error at frame {t}: "
                            f"{_one_line(exc)}", "Check or re-encode the file (e.g. with ffmpeg).")
                ) from exc
        finally:
            container.close()

    def frame(self, t: int) -> np.ndarray:
        """One frame (Zarr sources only; videos are read sequentially)."""
        return np.ascontiguousarray(self._array[t])


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _unreadable(path: str, exc: BaseException | None) -> InvalidDataError:
    got = "a file PyAV cannot open as a video" + (f" ({_one_line(exc)})" if exc is not None else "")
    return InvalidDataError(
        message(f"input {path!r}", "a video file (mp4, avi, mkv, ...) with a video stream, or a Zarr array "
                "(T, H, W, 3) uint8", got, "Pass a video file or a frames store.")
    )


def open_frames(path: str | os.PathLike[str]) -> FrameSource:
    """Open ``path`` (a video file, or a Zarr array ``(T, H, W, 3)`` uint8) from its metadata.

    Raises
    ------
    StorageError
        ``path`` does not exist.
    InvalidDataError
        Not a readable video with a video stream, a Zarr array of the wrong shape/dtype, or zero frames stated.
    ImportError
        A video file while PyAV is not installed (names the extra ``video``).

    Examples
    --------
    >>> import os, tempfile, numpy as np
    >>> from dclust.io.video import open_frames, write_video
    >>> with tempfile.TemporaryDirectory() as d:
    ...     path = write_video([np.zeros((4, 6, 3), np.uint8)] * 5, os.path.join(d, "clip.zarr"), fps=30)
    ...     src = open_frames(path)
    ...     print(src.kind, src.n_frames, (src.height, src.width), src.fps)
    zarr 5 (4, 6) 30
    """
    text = os.fspath(path)
    if not os.path.lexists(text):
        raise StorageError(message(f"input {text!r}", "an existing video file or Zarr store", "a path that does "
                                   "not exist", "Check the path."))
    if is_zarr_path(text):
        import zarr

        try:
            arr = zarr.open_array(text, mode="r")
        except Exception as exc:  # noqa: BLE001 - zarr raises several types for a non-array path
            raise InvalidDataError(message(f"input {text!r}", "a Zarr array (T, H, W, 3) uint8", "a path zarr "
                                           f"cannot open as an array ({_one_line(exc)})",
                                           "Pass the array itself (not a group).")) from exc
        if arr.ndim != 4 or arr.shape[3] != 3 or arr.dtype != np.uint8:
            raise InvalidDataError(message(f"input {text!r}", "a Zarr array (T, H, W, 3) uint8 of RGB frames",
                                           f"shape {tuple(arr.shape)} {arr.dtype}",
                                           "Store frames as uint8 RGB with the colour channel last."))
        if arr.shape[0] == 0 or arr.shape[1] == 0 or arr.shape[2] == 0:
            raise InvalidDataError(message(f"input {text!r}", "at least one frame of at least 1 x 1 pixel",
                                           f"shape {tuple(arr.shape)}", "Pass a store that holds frames."))
        stored: Any = arr.attrs.get("fps")
        fps = Fraction(stored).limit_denominator(1001 * 1000) if stored else _DEFAULT_ZARR_FPS
        return FrameSource(text, "zarr", arr.shape[2], arr.shape[1], fps, int(arr.shape[0]), arr)
    if os.path.isdir(text):
        raise _unreadable(text, None)
    av = import_av()
    try:
        with av.open(text, mode="r") as container:
            if not container.streams.video:
                raise InvalidDataError(message(f"input {text!r}", "a video with at least one frame",
                                               "a file with no video stream (zero frames)",
                                               "Pass a video that holds frames."))
            stream = container.streams.video[0]
            width, height = stream.codec_context.width, stream.codec_context.height
            rate = stream.average_rate or stream.guessed_rate or stream.base_rate
            n = int(stream.frames) if stream.frames else None
    except InvalidDataError:
        raise
    except Exception as exc:  # noqa: BLE001 - FFmpeg errors of every kind: not a video
        raise _unreadable(text, exc) from exc
    if not width or not height or n == 0:
        raise InvalidDataError(message(f"input {text!r}", "a video with at least one frame", "a video stream with "
                                       "zero frames", "Pass a video that holds frames."))
    return FrameSource(text, "video", width, height, Fraction(rate) if rate else Fraction(25), n)


# ------------------------------------------------------------------------------------------------------ sinks


class FrameSink:
    """A new video file or Zarr frames store, written under a temporary name; ``commit`` renames it into place.

    Examples
    --------
    >>> import os, tempfile, numpy as np
    >>> from fractions import Fraction
    >>> from dclust.io.video import create_sink
    >>> with tempfile.TemporaryDirectory() as d:
    ...     sink = create_sink(os.path.join(d, "out.zarr"), 2, 2, Fraction(25), n_frames=1)
    ...     sink.write(np.zeros((2, 2, 3), np.uint8))
    ...     sink.abort()                                    # nothing is left behind
    ...     print(os.listdir(d))
    []
    """

    def write(self, frame: np.ndarray) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def commit(self) -> str:  # pragma: no cover - abstract
        raise NotImplementedError

    def abort(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError


def _replace_into(tmp: str, target: str) -> None:
    """Commit a sink's complete temporary (file or directory) to ``target`` through the one atomic-write helper."""
    _atomic_write(target, lambda t: os.replace(tmp, t))


class _VideoSink(FrameSink):
    def __init__(self, target: str, width: int, height: int, fps: Fraction, codec: str | None) -> None:
        av = import_av()
        self.target = target
        parent, name = os.path.split(target)
        ext = os.path.splitext(name)[1] or ".mp4"
        remove_stale_tmp(parent)
        self.tmp = _tmp_name(parent, name, "tmp") + ext  # the container format follows the extension
        try:
            self.container = av.open(self.tmp, mode="w")
        except Exception as exc:  # noqa: BLE001 - FFmpeg knows no container for this extension
            if os.path.lexists(self.tmp):
                os.remove(self.tmp)
            raise StorageError(message(f"output {target!r}", "a video file name whose extension names a container "
                                       "FFmpeg writes (.mp4, .mkv, .avi, .mov, ...) or a .zarr store",
                                       f"{ext!r} ({_one_line(exc)})", "Change the extension.")) from exc
        try:
            self.codec = self._add_stream(av, width, height, fps, codec)
        except BaseException:
            self.abort()
            raise
        self.n = 0

    def _add_stream(self, av: Any, width: int, height: int, fps: Fraction, codec: str | None) -> str:
        candidates = [(codec, {})] if codec else list(_ENCODERS)
        errors = []
        for name, options in candidates:
            if name not in av.codecs_available:
                errors.append(f"{name}: not available")
                continue
            try:
                stream = self.container.add_stream(name, rate=fps)
            except Exception as exc:  # noqa: BLE001 - the container format does not take this codec
                errors.append(f"{name}: {_one_line(exc)}")
                continue
            stream.width, stream.height = width, height
            even = width % 2 == 0 and height % 2 == 0
            stream.pix_fmt = "yuv420p" if even or name == "mpeg4" else "yuv444p"
            if not even and name == "mpeg4":
                raise InvalidDataError(message("output video", "even frame dimensions for the mpeg4 codec",
                                               f"{width} x {height}", "Write frames to Zarr, or install a PyAV "
                                               "with libx264."))
            stream.options = dict(options)
            stream.thread_type = "AUTO"
            self.stream = stream
            return name
        raise StorageError(message("output video", "an encoder for this container (libx264, h264, mpeg4)",
                                   "; ".join(errors), "Install a PyAV build with libx264, or write frames to Zarr."))

    def write(self, frame: np.ndarray) -> None:
        av = import_av()
        vf = av.VideoFrame.from_ndarray(frame, format="rgb24")
        for packet in self.stream.encode(vf):
            self.container.mux(packet)
        self.n += 1

    def commit(self) -> str:
        for packet in self.stream.encode():
            self.container.mux(packet)
        self.container.close()
        _replace_into(self.tmp, self.target)
        return self.target

    def abort(self) -> None:
        try:
            self.container.close()
        except Exception:  # noqa: BLE001 - closing a broken container: the file is removed anyway
            pass
        if os.path.lexists(self.tmp):
            os.remove(self.tmp)


class _ZarrSink(FrameSink):
    def __init__(self, target: str, width: int, height: int, fps: Fraction, n_frames: int | None) -> None:
        import zarr
        from zarr.codecs import ZstdCodec

        self.target = target
        parent, name = os.path.split(target.rstrip(os.sep))
        remove_stale_tmp(parent)
        self.tmp = _tmp_name(parent, name, "tmp")
        self.n = 0
        self.capacity = max(1, n_frames or 64)
        self.array = zarr.create_array(store=self.tmp, shape=(self.capacity, height, width, 3), dtype=np.uint8,
                                       chunks=(1, height, width, 3), zarr_format=3,
                                       compressors=checksummed([ZstdCodec()]))
        self.array.attrs["fps"] = float(fps)
        self.array.attrs["fps_fraction"] = [fps.numerator, fps.denominator]

    def write(self, frame: np.ndarray) -> None:
        if self.n == self.capacity:
            self.capacity *= 2
            self.array.resize((self.capacity,) + self.array.shape[1:])
        self.array[self.n] = frame
        self.n += 1

    def commit(self) -> str:
        if self.array.shape[0] != self.n:
            self.array.resize((self.n,) + self.array.shape[1:])
        _replace_into(self.tmp, self.target)
        return self.target

    def abort(self) -> None:
        if os.path.lexists(self.tmp):
            _remove_tmp(self.tmp) if os.path.isdir(self.tmp) else os.remove(self.tmp)


def create_sink(path: str | os.PathLike[str], width: int, height: int, fps: Fraction, *, n_frames: int | None = None,
                codec: str | None = None) -> FrameSink:
    """A new output for frames of ``width`` x ``height``: a Zarr store for ``*.zarr`` paths, else a video file
    whose container follows the extension (H.264 via libx264 when available, else the best encoder offered).

    Examples
    --------
    >>> import os, tempfile, numpy as np
    >>> from fractions import Fraction
    >>> from dclust.io.video import create_sink, open_frames
    >>> with tempfile.TemporaryDirectory() as d:
    ...     sink = create_sink(os.path.join(d, "out.zarr"), 6, 4, Fraction(25), n_frames=2)
    ...     for t in range(2):
    ...         sink.write(np.full((4, 6, 3), t, np.uint8))
    ...     path = sink.commit()
    ...     print(open_frames(os.path.join(d, "out.zarr")).n_frames)
    2
    """
    target = os.path.abspath(os.fspath(path))
    if is_zarr_path(target):
        return _ZarrSink(target, width, height, fps, n_frames)
    return _VideoSink(target, width, height, fps, codec)


def write_video(frames: Any, path: str | os.PathLike[str], *, fps: float | Fraction = 25, codec: str | None = None,
                overwrite: bool = False) -> str:
    """Write an iterable of ``(H, W, 3)`` uint8 RGB frames to a video file or a Zarr store, atomically.

    Examples
    --------
    >>> import os, tempfile, numpy as np
    >>> from dclust.io.video import read_frame, write_video
    >>> frames = (np.full((4, 6, 3), t, np.uint8) for t in range(3))        # any iterable of frames
    >>> with tempfile.TemporaryDirectory() as d:
    ...     path = write_video(frames, os.path.join(d, "clip.zarr"))
    ...     print(int(read_frame(path, 2)[0, 0, 0]))
    2
    """
    target = check_output(path, overwrite)
    it = iter(frames)
    first = np.asarray(next(it))
    sink = create_sink(target, first.shape[1], first.shape[0], Fraction(fps).limit_denominator(1001 * 1000),
                       codec=codec)
    try:
        sink.write(np.ascontiguousarray(first, dtype=np.uint8))
        for frame in it:
            sink.write(np.ascontiguousarray(frame, dtype=np.uint8))
        return sink.commit()
    except BaseException:
        sink.abort()
        raise


def remove_tree(path: str) -> None:
    """Remove a file or directory if present (checkpoint clean-up).

    Examples
    --------
    >>> import os, tempfile
    >>> from dclust.io.video import remove_tree
    >>> d = tempfile.mkdtemp()
    >>> remove_tree(d); remove_tree(d)                       # a missing path is not an error
    >>> os.path.exists(d)
    False
    """
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.lexists(path):
        os.remove(path)


def read_frame(path: str, t: int) -> np.ndarray:
    """Frame ``t`` of a Zarr frames store (used by workers of a distributed job).

    Examples
    --------
    >>> import os, tempfile, numpy as np
    >>> from dclust.io.video import read_frame, write_video
    >>> with tempfile.TemporaryDirectory() as d:
    ...     path = write_video([np.full((2, 2, 3), 7, np.uint8)], os.path.join(d, "one.zarr"))
    ...     frame = read_frame(path, 0)
    >>> frame.shape, frame.dtype.name, int(frame.max())
    ((2, 2, 3), 'uint8', 7)
    """
    import zarr

    return np.ascontiguousarray(zarr.open_array(path, mode="r")[t])


def write_frame(path: str, t: int, frame: np.ndarray) -> None:
    """Write frame ``t`` into an existing Zarr frames store (one chunk per frame: writers never share a chunk).

    Examples
    --------
    >>> import os, tempfile, numpy as np
    >>> from dclust.io.video import read_frame, write_frame, write_video
    >>> with tempfile.TemporaryDirectory() as d:
    ...     path = write_video([np.zeros((2, 2, 3), np.uint8)] * 2, os.path.join(d, "clip.zarr"))
    ...     write_frame(path, 1, np.full((2, 2, 3), 9, np.uint8))
    ...     print(int(read_frame(path, 0).max()), int(read_frame(path, 1).max()))
    0 9
    """
    import zarr

    zarr.open_array(path, mode="r+")[t] = frame


def write_png(image: np.ndarray, path: str | os.PathLike[str], *, overwrite: bool = False) -> str:
    """Write an ``(H, W, 3)`` RGB or ``(H, W, 4)`` RGBA uint8 image as a PNG (zlib only), atomically.

    Examples
    --------
    >>> import os, tempfile, numpy as np
    >>> from dclust.io.video import write_png
    >>> with tempfile.TemporaryDirectory() as d:
    ...     path = write_png(np.zeros((8, 8, 4), np.uint8), os.path.join(d, "palette.png"))
    ...     print(open(path, "rb").read(8) == b"\\x89PNG\\r\\n\\x1a\\n")
    True
    """
    import struct
    import zlib

    target = check_output(path, overwrite, "png")
    img = np.ascontiguousarray(image, dtype=np.uint8)
    h, w, c = img.shape
    color_type = {3: 2, 4: 6}[c]
    raw = np.concatenate([np.zeros((h, 1), np.uint8), img.reshape(h, w * c)], axis=1).tobytes()

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

    png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, color_type, 0, 0, 0))
           + chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b""))
    write_bytes(png, target)
    return target
