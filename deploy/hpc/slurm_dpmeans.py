"""DP-means on an HPC batch system through dask-jobqueue (SLURM; PBSCluster / SGECluster work the same way).

    pip install "dclust[hpc]"          # dask-jobqueue, on the login node, into the environment that has dclust
    python deploy/hpc/slurm_dpmeans.py /scratch/$USER/points.zarr --jobs 8 --lam 40 \
        --module python/3.11 --venv /scratch/$USER/dclust-venv

Each SLURM job runs one single-threaded `dask worker` process (one core, ``--memory`` of RAM); the script (the client)
runs on the login node or in its own job. The store must be on a file system every node sees (Lustre/GPFS) or in an
object store (``s3://...``, with ``--storage-option KEY=VALUE`` or the ``AWS_*`` environment of the jobs).

The workers' environment: every job script starts with ``module load NAME`` for each ``--module`` (placeholders:
use your site's module names, e.g. ``python/3.11``, or none), then activates the virtual environment ``--venv``
(default: the one this script runs in, when it runs in one), then any ``--prologue`` line, before it starts the
worker with the same Python as this script. ``--print-job-script`` shows the script without submitting anything.
No ``#SBATCH --exclusive``: a worker needs one core, not a node (ask for more with ``--cores``). The cluster and its
jobs are closed when the script ends, also after an error or Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import dclust


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("store", help="Zarr store (path or fsspec URL) with an (N, D) array")
    ap.add_argument("--jobs", type=int, default=4, help="SLURM jobs, one worker each")
    ap.add_argument("--cores", type=int, default=1, help="cores (worker threads) per job")
    ap.add_argument("--memory", default="8GiB", help="memory per job")
    ap.add_argument("--walltime", default="02:00:00", help="walltime per job")
    ap.add_argument("--lam", type=float, default=None, help="DP-means penalty (default: from --k)")
    ap.add_argument("--k", type=int, default=16, help="target number of clusters when --lam is not given")
    ap.add_argument("--queue", default=None, help="SLURM partition")
    ap.add_argument("--account", default=None, help="SLURM account")
    ap.add_argument("--module", action="append", default=[], metavar="NAME",
                    help="environment module the workers load first (repeatable; your site's names)")
    ap.add_argument("--venv", default=None,
                    help="virtual environment the workers activate (default: the one running this script)")
    ap.add_argument("--prologue", action="append", default=[], metavar="LINE",
                    help="extra shell line of the job script, before the worker starts (repeatable)")
    ap.add_argument("--storage-option", action="append", default=[], metavar="KEY=VALUE",
                    help="fsspec storage option of an s3:// (gs://, ...) store and labels (repeatable)")
    ap.add_argument("--labels", default=None, help="output Zarr for the labels (default: <store>-labels.zarr)")
    ap.add_argument("--print-job-script", action="store_true", help="print the job script and exit")
    return ap.parse_args(argv)


def prologue(args: argparse.Namespace) -> list[str]:
    """The job script's lines before the worker starts: modules, the virtual environment, extra lines."""
    venv = args.venv or (sys.prefix if sys.prefix != sys.base_prefix else None)
    return ([f"module load {name}" for name in args.module]
            + ([f"source {venv}/bin/activate"] if venv else []) + list(args.prologue))


def cluster_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The arguments of ``dask_jobqueue.SLURMCluster``: one single-process worker of ``--cores`` threads per job."""
    return {"cores": args.cores, "processes": 1, "memory": args.memory, "walltime": args.walltime,
            "queue": args.queue, "account": args.account, "job_script_prologue": prologue(args),
            "python": sys.executable}


def storage_options(pairs: list[str]) -> dict[str, Any] | None:
    """``KEY=VALUE`` pairs; a VALUE that reads as JSON (``true``, ``3``) is that value, else a string."""
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"--storage-option takes KEY=VALUE, not {pair!r}")
        try:
            options[key] = json.loads(value)
        except ValueError:
            options[key] = value
    return options or None


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    from dask_jobqueue import SLURMCluster
    from distributed import Client

    options = storage_options(args.storage_option)
    io = {"storage_options": options} if options else {}
    labels = args.labels or args.store.rstrip("/").removesuffix(".zarr") + "-labels.zarr"
    with SLURMCluster(**cluster_kwargs(args)) as cluster:  # closed (jobs cancelled) however the block ends
        if args.print_job_script:
            print(cluster.job_script())
            return
        cluster.scale(jobs=args.jobs)
        with Client(cluster) as client:
            client.wait_for_workers(1)
            X = dclust.open_array(args.store, **io)
            params = {"lam": args.lam} if args.lam is not None else {"n_clusters": args.k}
            model = dclust.DPMeans(random_state=0, **params).fit(X)
            dclust.write_labels(model.predict(X), labels, **io)
            print(f"K = {model.n_clusters_}, lam = {model.lam_:.4g}, objective = {model.objective_:.6g}, "
                  f"labels: {labels}")


if __name__ == "__main__":
    main()
