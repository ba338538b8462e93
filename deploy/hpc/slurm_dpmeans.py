"""DP-means on an HPC batch system through dask-jobqueue (SLURM; PBSCluster / SGECluster work the same way).

    pip install "dask-jobqueue>=0.8"   # on the login node, into the environment that has dclust
    python deploy/hpc/slurm_dpmeans.py /scratch/$USER/points.zarr --jobs 8 --lam 40

Each SLURM job runs one `dask worker` process; the script (the client) runs on the login node or in its own job.
The store must be on a file system every node sees (Lustre/GPFS) or in an object store (s3://...).
"""

from __future__ import annotations

import argparse

import dclust


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("store", help="Zarr store (path or fsspec URL) with an (N, D) array")
    ap.add_argument("--jobs", type=int, default=4, help="SLURM jobs, one worker each")
    ap.add_argument("--lam", type=float, default=None, help="DP-means penalty (default: from --k)")
    ap.add_argument("--k", type=int, default=16, help="target number of clusters when --lam is not given")
    ap.add_argument("--queue", default=None, help="SLURM partition")
    ap.add_argument("--labels", default=None, help="output Zarr for the labels (default: <store>-labels.zarr)")
    args = ap.parse_args()

    from dask_jobqueue import SLURMCluster
    from distributed import Client

    cluster = SLURMCluster(cores=1, processes=1, memory="8GiB", walltime="02:00:00", queue=args.queue,
                           job_extra_directives=["--exclusive"] if args.jobs > 16 else [])
    cluster.scale(jobs=args.jobs)
    with Client(cluster) as client:
        client.wait_for_workers(1)
        X = dclust.open_array(args.store)
        params = {"lam": args.lam} if args.lam is not None else {"n_clusters": args.k}
        model = dclust.DPMeans(random_state=0, **params).fit(X)
        labels = args.labels or args.store.rstrip("/").removesuffix(".zarr") + "-labels.zarr"
        dclust.write_labels(model.predict(X), labels)
        print(f"K = {model.n_clusters_}, lam = {model.lam_:.4g}, objective = {model.objective_:.6g}, labels: {labels}")
    cluster.close()


if __name__ == "__main__":
    main()
