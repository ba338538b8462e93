"""``dclust clean PATH``: remove the temporaries that killed dclust writers left behind."""

from __future__ import annotations

from typing import Annotated

import typer

from dclust.io import clean as clean_temporaries

from ._options import DebugOpt, JsonOpt, QuietOpt, StorageOptionOpt, _storage_options
from ._session import _command


def clean(
    path: Annotated[str, typer.Argument(help="A directory, or an output path (its temporaries only; on an object "
                                             "store, s3://bucket/out.zarr, it also finishes a commit a killed "
                                             "writer of this host recorded).")],
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    debug: DebugOpt = False,
    storage_option: StorageOptionOpt = None,
) -> None:
    """Remove stale temporaries (.NAME.tmp-HOST-PID-*) of killed dclust writes on this host; those of running
    writers and of other hosts, and set-aside outputs (.NAME.old-*), are kept."""
    with _command(json_out, quiet, debug) as s:
        options = _storage_options(storage_option)
        removed = clean_temporaries(path, **({"storage_options": options} if options else {}))
        s.report({"command": "clean", "path": path, "removed": removed}, "clean",
                 {"removed": len(removed), **{f"  {i + 1}": p for i, p in enumerate(removed)}})
