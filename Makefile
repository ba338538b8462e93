# The two commands of README.md. Each creates .venv on first use and (re)installs dclust into it.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test bench venv clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(STAMP): $(PY) pyproject.toml
	$(PY) -m pip install --quiet -e '.[all]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(PY) examples/demo.py --out demo-output

test: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider --durations=20

bench: $(STAMP)
	for b in engine pass_floor kmeans dynamic constraints features video pointcloud scale uci sweep rings gp gmpr_links; do $(PY) benchmarks/bench_$$b.py || exit 1; done

clean:
	rm -rf $(VENV) demo-output .pytest_cache
