# The two commands of README.md. Each creates .venv on first use and (re)installs dclust into it.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# the image the deploy/ files run: dclust:<the package version> (deploy/README.md)
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
IMAGE ?= dclust

.PHONY: demo test test-fast typecheck lint bench docs venv clean image

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(STAMP): $(PY) pyproject.toml
	$(PY) -m pip install --quiet -e '.[all]'
	# the OpenSky sample of benchmarks/bench_trajectories.py ([DM] 8.4): only the package's data files are read, so
	# not its (heavy) dependencies; pyproject's "trajectories" extra names it
	$(PY) -m pip install --quiet --no-deps 'traffic>=2.13'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(PY) examples/demo.py --out demo-output

# two pytest processes, each test file whole in one of them (its module-scoped clusters start once); the bytecode of
# dclust is cached (__pycache__, gitignored) even where PYTHONDONTWRITEBYTECODE is set: every CLI, benchmark and
# worker process of the suite imports the package again
test: $(STAMP)
	env -u PYTHONDONTWRITEBYTECODE $(PY) -m pytest -q -p no:cacheprovider -n 2 --dist loadfile --durations=20

test-fast: $(STAMP)  # everything but the tests marked slow (benchmark scripts end to end, killed processes)
	$(PY) -m pytest -q -p no:cacheprovider -m "not slow"

typecheck: $(STAMP)  # mypy on the public modules; configuration and documented exceptions: [tool.mypy] in pyproject.toml
	$(PY) -m mypy

lint: $(STAMP)  # ruff: the rules and their documented exceptions are [tool.ruff] in pyproject.toml
	$(VENV)/bin/ruff check .

bench: $(STAMP)
	for b in engine pass_floor occ_ratio kmeans dynamic constraints features video pointcloud scale uci sweep rings gp trajectories gmpr_links faces gmpr_step anytime; do $(PY) benchmarks/bench_$$b.py || exit 1; done

docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict   # warnings are errors; the site goes to site/ (gitignored)

image:
	docker build -f deploy/Dockerfile -t $(IMAGE):$(VERSION) .

clean:
	rm -rf $(VENV) demo-output .pytest_cache site
