"""The documentation: the site builds with warnings as errors, every doctest of the package passes, every public class
and function has a numpydoc "Examples" section, and the shell commands of the docs and README run as written."""

from __future__ import annotations

import doctest
import importlib
import inspect
import os
import pkgutil
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import dclust

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"

def _modules(include_private: bool) -> list[str]:
    names = ["dclust"]
    for info in pkgutil.walk_packages(dclust.__path__, "dclust."):
        parts = info.name.split(".")
        if info.name == "dclust.__main__":
            continue
        if not include_private and (any(p.startswith("_") for p in parts) or parts[1] == "kernels"):
            continue
        names.append(info.name)
    return names


#: the public modules: ``dclust`` and every module without a private part in its name, except the kernels (the
#: engine's innermost layer, not public API)
PUBLIC_MODULES = _modules(include_private=False)


def _nav_pages(nav) -> list[str]:
    out = []
    for item in nav:
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, dict):
            for value in item.values():
                out.extend(_nav_pages(value) if isinstance(value, list) else [value])
    return out


def _config() -> dict:
    # mkdocs.yml has no custom YAML tags, so the safe loader reads it
    return yaml.safe_load((ROOT / "mkdocs.yml").read_text())


# ---------------------------------------------------------------------------------------------------------------
# the site
# ---------------------------------------------------------------------------------------------------------------


def test_every_nav_page_exists_and_every_page_is_in_the_nav():
    pages = _nav_pages(_config()["nav"])
    missing = [p for p in pages if not (DOCS / p).is_file()]
    assert not missing, f"mkdocs.yml's nav names pages that are not in docs/: {missing}"
    on_disk = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}
    assert not on_disk - set(pages), f"pages in docs/ that no nav entry reaches: {sorted(on_disk - set(pages))}"
    for page in ("reproduction.md", "scaling.md", "architecture.md", "algorithms.md"):
        assert page in pages


def test_every_example_is_in_the_gallery_with_its_source():
    config_pages = set(_nav_pages(_config()["nav"]))
    for script in sorted((ROOT / "examples").glob("*.py")):
        page = f"examples/{script.stem}.md"
        assert page in config_pages, f"{script.name} has no gallery page"
        assert f'--8<-- "examples/{script.name}"' in (DOCS / page).read_text(), f"{page} does not include the source"


def test_no_link_leaves_the_repository():
    """Users have the repository, not the project's shared folder: no page, README or docstring points there."""
    texts = {p: p.read_text() for p in [ROOT / "README.md", *DOCS.rglob("*.md")]}
    texts.update({p: p.read_text() for p in (ROOT / "dclust").rglob("*.py")})
    for path, text in texts.items():
        assert "../shared" not in text and "shared/ALGORITHMS" not in text, path
        assert "ALGORITHMS.md" not in text, f"{path} cites ALGORITHMS.md; cite docs/algorithms.md (same sections)"


def test_algorithm_sections_cited_in_the_code_exist():
    """The code cites ``docs/algorithms.md N.M``; every such section number is a heading of that page."""
    page = (DOCS / "algorithms.md").read_text()
    headings = set(re.findall(r"^#{2,4} (\d+(?:\.\d+)?)[ .]", page, flags=re.M))
    labels = set(re.findall(r"^\s*- (E-[A-Z]+\d+|[A-Z]{2,3}\d+)[:,]", page, flags=re.M))  # errata, test properties
    cited = set()
    for path in (ROOT / "dclust").rglob("*.py"):
        text = path.read_text()
        cited.update(re.findall(r"docs/algorithms\.md,? (?:section )?(\d+(?:\.\d+)?|E-[A-Z]+\d+|[A-Z]{2,3}\d+)", text))
    assert cited, "no citation of docs/algorithms.md found in the package"
    missing = sorted(c for c in cited if c not in headings and c not in labels)
    assert not missing, f"docs/algorithms.md has no section or erratum {missing}"


def test_site_builds_with_warnings_as_errors(tmp_path):
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings")
    pytest.importorskip("material")
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"),
                           "-d", str(site)], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    api = (site / "api" / "estimators" / "index.html").read_text()
    for name in ("dclust.cluster.KMeans", "dclust.cluster.DPMeans", "dclust.cluster.GMPR"):
        assert f'id="{name}"' in api, f"the API reference lacks {name}"
    assert "Examples" in api
    gallery = (site / "examples" / "kmeans_zarr" / "index.html").read_text()
    assert "open_array" in gallery, "the gallery page does not show the example's source"
    algorithms = (site / "algorithms" / "index.html").read_text()
    assert "DP-means" in algorithms and "OCC" in algorithms


# ---------------------------------------------------------------------------------------------------------------
# docstrings
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", _modules(include_private=True))
def test_doctests(name):
    """Every doctest of every module of the package passes (as ``pytest --doctest-modules dclust`` would run)."""
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS, verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} doctests of {name} failed (output above)"


def _public_callables() -> list[tuple[str, object]]:
    out, seen = [], set()
    for name in PUBLIC_MODULES:
        module = importlib.import_module(name)
        for attr in getattr(module, "__all__", ()):
            if not hasattr(module, attr):  # a submodule named in __all__ (dclust.apps), listed on its own
                continue
            obj = getattr(module, attr)
            if (inspect.isclass(obj) or inspect.isfunction(obj)) and id(obj) not in seen:
                seen.add(id(obj))
                out.append((f"{name}.{attr}", obj))
    return out


def test_public_callables_are_found():
    names = {n for n, _ in _public_callables()}
    assert {"dclust.KMeans", "dclust.open_array", "dclust.errors.InvalidDataError", "dclust.plot.plot_sweep"} <= names


def test_every_public_class_and_function_has_an_example():
    """numpydoc: an "Examples" section with at least one doctest, on every name of the public ``__all__``s."""
    missing = []
    for name, obj in _public_callables():
        doc = inspect.getdoc(obj) or ""
        section = re.search(r"^Examples\n-{8,}\n(.*?)(?=^\w[\w ]*\n-{3,}\n|\Z)", doc, flags=re.M | re.S)
        if section is None or ">>>" not in section.group(1):
            missing.append(name)
    assert not missing, f"public names without an Examples section holding a doctest: {missing}"


# ---------------------------------------------------------------------------------------------------------------
# shell commands of the docs, run as written
# ---------------------------------------------------------------------------------------------------------------

#: pages whose ``bash`` blocks marked ``<!-- run -->`` are cheap enough to run verbatim
RUN_MARK = "<!-- test: run -->"


def _runnable_blocks() -> dict[str, list[str]]:
    """Marked blocks -> the pages that hold them (a block shown on several pages runs once)."""
    out: dict[str, list[str]] = {}
    for page in [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]:
        text = page.read_text()
        for block in re.findall(re.escape(RUN_MARK) + r"\s*```bash\n(.*?)```", text, flags=re.S):
            out.setdefault(block, []).append(str(page.relative_to(ROOT)))
    return out


def test_there_are_runnable_blocks():
    pages = {p for pages in _runnable_blocks().values() for p in pages}
    assert "README.md" in pages and "docs/getting-started.md" in pages, pages


@pytest.mark.parametrize("block", list(_runnable_blocks()), ids=lambda b: "+".join(_runnable_blocks()[b]))
def test_marked_shell_blocks_run_verbatim(block, tmp_path, monkeypatch, local_cluster):
    """Every command of a marked block runs, in order, in an empty directory, and succeeds.

    ``dclust ...`` lines run in-process with exactly the words written (the entry point's own parsing and code),
    on the test session's cluster through ``DCLUST_SCHEDULER`` (the documented alternative to ``--scheduler``);
    anything else runs as a subprocess."""
    from _support.cli import run

    monkeypatch.chdir(tmp_path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "MPLBACKEND": "Agg", "DCLUST_SCHEDULER": local_cluster.scheduler_address}
    commands = [c for c in block.replace("\\\n", " ").splitlines() if c.strip() and not c.lstrip().startswith("#")]
    assert commands
    for command in commands:
        words = shlex.split(command.split(" #")[0])  # without a trailing comment
        if words[0] == "dclust":
            result = run(words[1:], env={"DCLUST_SCHEDULER": local_cluster.scheduler_address})
            code, out, err = result.exit_code, result.stdout, result.stderr
        else:
            words[0] = sys.executable if words[0] == "python" else words[0]
            proc = subprocess.run(words, capture_output=True, text=True, env=env, timeout=300)
            code, out, err = proc.returncode, proc.stdout, proc.stderr
        assert code == 0, f"`{command}` exited {code}\n{out[-2000:]}\n{err[-2000:]}"
    assert sorted(os.listdir(tmp_path)), "the commands wrote nothing"


def _cli_checker():
    """The CLI option checker of tests/deploy (one copy): walks the typer app for a ``dclust ...`` line."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_manifest_checks", ROOT / "tests" / "deploy" / "test_manifests.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module._dclust_invocations, module._check_cli


def test_every_dclust_command_in_the_docs_exists():
    """The commands too large to run (terabyte stores, clusters, videos) still name real subcommands and options."""
    invocations, check = _cli_checker()
    commands = []
    for page in sorted(DOCS.rglob("*.md")):
        for block in re.findall(r"```bash\n(.*?)```", page.read_text(), flags=re.S):
            commands += [(page.name, args) for args in invocations(block.replace("\\\n", " "))]
    assert len(commands) >= 15
    for page, args in commands:
        try:
            check(args)
        except AssertionError as exc:
            raise AssertionError(f"{page}: dclust {' '.join(args)}: {exc}") from None


def test_readme_links_point_into_the_repository():
    """Every relative link of the README names a file or folder of the repository."""
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", (ROOT / "README.md").read_text())
    relative = [link for link in links if "://" not in link]
    assert "docs/algorithms.md" in relative and "docs/getting-started.md" in relative
    missing = [link for link in relative if not (ROOT / link).exists()]
    assert not missing, f"README links to paths that are not in the repository: {missing}"
