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
