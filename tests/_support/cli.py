"""Helpers of the CLI tests: run ``dclust`` in-process or as the installed entry point, read its outputs."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import zarr
from typer.testing import CliRunner

from dclust._cli.main import app

DCLUST = os.path.join(os.path.dirname(sys.executable), "dclust")


def run(args, **kwargs):
    """Invoke the CLI in-process; stdout and stderr are kept apart."""
    return CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False, **kwargs)


def sh(args, env=None, timeout=120):
    """Run the installed ``dclust`` entry point as a subprocess (without ``$DCLUST_SCHEDULER``, plus ``env``)."""
    full_env = {k: v for k, v in os.environ.items() if k != "DCLUST_SCHEDULER"}
    full_env.update(env or {})
    return subprocess.run([DCLUST, *map(str, args)], capture_output=True, text=True, env=full_env,
                          timeout=timeout)


def ok_json(r):
    """The JSON object a successful ``--json`` run printed."""
    assert r.exit_code == 0, (r.stdout, r.stderr)
    return json.loads(r.stdout)


def one_line_error(stderr):
    """The error message; asserts it is exactly one line, prefixed, and carries no traceback."""
    lines = [line for line in stderr.splitlines() if line.startswith("dclust: error:")]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


def read(path):
    """The whole Zarr array at ``path``."""
    return zarr.open_array(str(path), mode="r")[...]
