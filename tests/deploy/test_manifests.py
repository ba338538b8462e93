"""deploy/: the manifests parse, carry their required keys, and every dclust command they run exists."""

from __future__ import annotations

import ast
import re
import shlex
import tomllib
from pathlib import Path

import pytest
import typer
import yaml

from dclust._cli.main import app

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"


def _yaml(name: str):
    return yaml.safe_load((DEPLOY / name).read_text())


def _dclust_invocations(text: str) -> list[list[str]]:
    """Every ``dclust ...`` command line in a shell string (split at ``&&`` / ``;`` / newlines)."""
    out = []
    for part in re.split(r"&&|;|\n", text):
        words = shlex.split(part)
        if words and words[0] == "dclust":
            out.append(words[1:])
    return out


def _check_cli(args: list[str]) -> None:
    """Walk the subcommands of ``args`` and check that every option used is one the command accepts."""
    cmd = typer.main.get_command(app)
    words = list(args)
    while hasattr(cmd, "commands") and words and not words[0].startswith("-"):
        name = words.pop(0)
        assert name in cmd.commands, f"dclust has no subcommand {name!r} (in {args})"
        cmd = cmd.commands[name]
    accepted = {opt for p in cmd.params for opt in p.opts + p.secondary_opts}
    for w in words:
        if w.startswith("--"):
            assert w.split("=")[0] in accepted, f"{w} is not an option of `dclust {' '.join(args[:2])}`"


def test_dockerfile_installs_the_project_and_runs_the_real_entry_point():
    text = (DEPLOY / "Dockerfile").read_text()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "dclust" in project["scripts"]
    assert re.search(r'ENTRYPOINT \["dclust"\]', text)
    extras = re.search(r'pip install "\.\[([a-z,]+)\]"', text).group(1).split(",")
    assert set(extras) <= set(project["optional-dependencies"]), extras
    for src in re.findall(r"^COPY (\S+)", text, flags=re.M):
        assert (ROOT / src).exists(), f"Dockerfile copies {src}, which is not in the project"
    users = re.findall(r"^USER (\S+)", text, flags=re.M)
    assert users and users[-1] not in ("root", "0"), "the image must run as a non-root user"


def test_compose_has_scheduler_workers_and_a_job_running_real_commands():
    doc = _yaml("docker-compose.yml")
    services = doc["services"]
    assert {"scheduler", "worker", "job"} <= set(services)
    assert services["scheduler"]["entrypoint"][:2] == ["dask", "scheduler"]
    assert services["worker"]["entrypoint"][:2] == ["dask", "worker"]
    assert services["worker"]["command"][0] == "tcp://scheduler:8786"
    assert services["job"]["environment"]["DCLUST_SCHEDULER"] == "tcp://scheduler:8786"
    assert (DEPLOY / services["scheduler"]["build"]["dockerfile"].removeprefix("deploy/")).exists()
    invocations = _dclust_invocations(" ".join(services["job"]["command"]))
    assert len(invocations) >= 2
    for args in invocations:
        _check_cli(args)


def test_helm_values_use_the_image_and_single_threaded_workers():
    doc = _yaml("kubernetes/helm-values.yaml")
    for role in ("scheduler", "worker"):
        assert doc[role]["image"]["repository"] == "dclust"
        assert {"requests", "limits"} <= set(doc[role]["resources"])
    assert doc["worker"]["replicas"] >= 1
    cmd = doc["worker"]["custom_command"]
    assert cmd[:2] == ["dask", "worker"] and cmd[cmd.index("--nthreads") + 1] == "1"


def test_daskcluster_manifest_is_a_valid_operator_resource():
    doc = _yaml("kubernetes/daskcluster.yaml")
    assert doc["apiVersion"] == "kubernetes.dask.org/v1" and doc["kind"] == "DaskCluster"
    spec = doc["spec"]
    worker = spec["worker"]["spec"]["containers"][0]
    scheduler = spec["scheduler"]["spec"]["containers"][0]
    assert worker["command"][:2] == ["dask", "worker"]
    assert scheduler["command"][:2] == ["dask", "scheduler"]
    ports = {p["name"]: p["port"] for p in spec["scheduler"]["service"]["ports"]}
    assert ports["tcp-comm"] == 8786
    for part in (spec["worker"]["spec"], spec["scheduler"]["spec"]):
        assert part["securityContext"]["runAsNonRoot"] is True


def test_jobqueue_script_uses_the_public_api_only():
    tree = ast.parse((DEPLOY / "hpc" / "slurm_dpmeans.py").read_text())
    used = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and getattr(n.value, "id", "") == "dclust"}
    import dclust

    assert used and used <= set(dclust.__all__), used - set(dclust.__all__)
    assert any(isinstance(n, ast.ImportFrom) and n.module == "dask_jobqueue" for n in ast.walk(tree))


def test_readme_commands_exist():
    text = (DEPLOY / "README.md").read_text() + (ROOT / "README.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)```", text, flags=re.S)
    commands = [inv for b in blocks for inv in _dclust_invocations(b.replace("\\\n", " "))]
    assert len(commands) >= 5
    for args in commands:
        _check_cli(args)


@pytest.mark.parametrize("args", [["fit", "nosuch"], ["fit", "kmeans", "--no-such-option"]])
def test_the_checker_itself_rejects_unknown_commands(args):
    with pytest.raises(AssertionError):
        _check_cli(args)


# ------------------------------------------------------------------------------------------------ image and commands


def _version() -> str:
    import dclust

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["version"] == dclust.__version__
    return dclust.__version__


def _kubernetes_docs() -> list[tuple[str, dict]]:
    out = []
    for path in sorted((DEPLOY / "kubernetes").glob("*.yaml")):
        out += [(path.name, doc) for doc in yaml.safe_load_all(path.read_text()) if doc]
    return out


def _containers(node):
    """Every container spec (a dict with ``image``) anywhere in a manifest."""
    if isinstance(node, dict):
        if "image" in node and isinstance(node["image"], str):
            yield node
        for value in node.values():
            yield from _containers(value)
    elif isinstance(node, list):
        for value in node:
            yield from _containers(value)


def test_make_image_builds_the_image_every_manifest_runs():
    """`make image` tags dclust:<package version>; every Kubernetes manifest, the Helm values and compose run it."""
    import subprocess

    version = _version()
    import os

    # under `make test` the outer make's MAKELEVEL/MAKEFLAGS would make this one print "make[1]: Entering ..."
    env = {k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS")}
    dry = subprocess.run(["make", "--no-print-directory", "-n", "image"], cwd=ROOT, capture_output=True, text=True,
                         timeout=60, env=env)
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.split() == ["docker", "build", "-f", "deploy/Dockerfile", "-t", f"dclust:{version}", "."]
    images = {(name, c["image"]) for name, doc in _kubernetes_docs() if "kind" in doc for c in _containers(doc)}
    assert {name for name, _ in images} >= {"daskcluster.yaml", "job.yaml"}
    assert {image for _, image in images} == {f"dclust:{version}"}, images
    helm = _yaml("kubernetes/helm-values.yaml")
    for role in ("scheduler", "worker"):
        assert (helm[role]["image"]["repository"], str(helm[role]["image"]["tag"])) == ("dclust", version)
    compose = _yaml("docker-compose.yml")["services"]
    assert {s["image"] for s in compose.values()} == {f"dclust:{version}"}
    assert f"dclust:{version}" in (DEPLOY / "README.md").read_text()


def _check_dask(words: list[str]) -> None:
    """``dask worker ...`` / ``dask scheduler ...``: every option is one of distributed's command."""
    from distributed.cli import dask_scheduler, dask_worker

    command = {"worker": dask_worker.main, "scheduler": dask_scheduler.main}[words[1]]
    accepted = {opt for p in command.params for opt in p.opts + p.secondary_opts}
    for w in words[2:]:
        if w.startswith("--"):
            assert w.split("=")[0] in accepted, f"{w} is not an option of `dask {words[1]}`"


def test_every_manifest_runs_real_commands():
    """Each container's command (+ args) is `dask worker|scheduler` with real options, or a dclust command that
    `dclust --help` lists, with options the command accepts."""
    import subprocess
    import sys

    listed = subprocess.run([sys.executable, "-m", "dclust", "--help"], capture_output=True, text=True, timeout=120,
                            env={**__import__("os").environ, "COLUMNS": "200"})
    assert listed.returncode == 0, listed.stderr
    commands = [c.get("command", []) + c.get("args", []) for _, doc in _kubernetes_docs() for c in _containers(doc)]
    helm = _yaml("kubernetes/helm-values.yaml")
    commands.append(helm["worker"]["custom_command"])
    compose = _yaml("docker-compose.yml")["services"]
    commands += [s["entrypoint"] + s.get("command", []) for s in compose.values() if s["entrypoint"][0] == "dask"]
    ran_dclust = 0
    for words in commands:
        assert words, "a container without a command runs the image's entrypoint (dclust --help): give one"
        if words[0] == "dask":
            _check_dask(words)
            continue
        assert words[0] == "dclust", words
        assert re.search(rf"^\W*{re.escape(words[1])}\s", listed.stdout, flags=re.M), (
            f"`dclust --help` lists no {words[1]}")
        _check_cli(words[1:])
        ran_dclust += 1
    assert ran_dclust >= 1 and any(w[:2] == ["dask", "worker"] for w in commands)


def _slurm_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("slurm_dpmeans", DEPLOY / "hpc" / "slurm_dpmeans.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_slurm_job_script_sets_up_the_workers_environment_without_exclusive():
    """The job script dask-jobqueue renders (no SLURM needed): modules, then the venv, then the worker on one core;
    no --exclusive however many jobs."""
    from dask_jobqueue.slurm import SLURMJob

    slurm = _slurm_module()
    args = slurm.parse(["s3://bucket/points.zarr", "--jobs", "64", "--module", "python/3.11", "--module", "gcc/12",
                        "--venv", "/opt/venvs/dclust", "--prologue", "export OMP_NUM_THREADS=1"])
    script = SLURMJob(scheduler="tcp://127.0.0.1:8786", name="w0", **slurm.cluster_kwargs(args)).job_script()
    lines = script.splitlines()
    order = [lines.index(x) for x in ("module load python/3.11", "module load gcc/12",
                                      "source /opt/venvs/dclust/bin/activate", "export OMP_NUM_THREADS=1")]
    worker = next(i for i, line in enumerate(lines) if "distributed.cli.dask_worker" in line)
    assert order == sorted(order) and order[-1] < worker
    assert "--nthreads 1" in lines[worker] and "#SBATCH --cpus-per-task=1" in lines
    assert "exclusive" not in script
    assert slurm.storage_options(["endpoint_url=http://127.0.0.1:9000", "anon=false"]) == {
        "endpoint_url": "http://127.0.0.1:9000", "anon": False}


def test_slurm_script_closes_its_cluster_however_it_ends():
    """SLURMCluster is entered as a context manager (closed, jobs cancelled, on success, error or Ctrl-C)."""
    tree = ast.parse((DEPLOY / "hpc" / "slurm_dpmeans.py").read_text())
    managed = [item.context_expr for node in ast.walk(tree) if isinstance(node, ast.With) for item in node.items]
    assert any(isinstance(c, ast.Call) and getattr(c.func, "id", "") == "SLURMCluster" for c in managed)
    created = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "SLURMCluster"]
    assert len(created) == 1
