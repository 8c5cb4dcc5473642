# Two commands for a new user: `make run` and `make test`. Both create the
# virtualenv, install the CPU torch first (an unpinned torch would pull a
# multi-GB CUDA build), install the project with its test and lint extras and
# build the C++ extension.
PYTHON ?= python3
VENV ?= .venv
# Another torch build: make TORCH_SPEC='torch==2.13.0' TORCH_PIP_ARGS='--index-url ...'
TORCH_SPEC ?= torch==2.13.0
TORCH_PIP_ARGS ?=
PYTEST_ARGS ?=

PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.stamp
CSRC := $(shell find sim_ext/csrc -name '*.h' -o -name '*.cpp') CMakeLists.txt
# The editable install maps each Python module it saw: a module added, moved or removed
# needs a reinstall (cheap: the C++ build is cached in build/).
PYSRC := $(shell find workbench sim_ext -name '*.py')

.PHONY: setup run demo test test-fast test-deps lint format bench zoo-venv docs clean cluster-up cluster-down

# Every shipped experiment runs after it: the LunarLander one needs the box2d extra.
setup: $(STAMP)/ext $(STAMP)/box2d

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

# Dependencies: torch first, then the build backend (editable builds run without
# isolation so that rebuilds reuse build/), then the project and its extras: the project's
# own install (the C++ build, on one core) runs beside the install of its dependencies
# (listed from pyproject.toml), which mostly waits on the package index. A build that
# failed here (a dependency that pins a build requirement lower has pip replace it under
# the build) is tried again by the extension's rule below, which runs after this one and
# is a no-op after a build that succeeded. pip byte-compiles on one core; compileall
# afterwards uses them all, packages' tests/ folders apart (a process that imports an
# uncompiled module compiles it again each time where PYTHONDONTWRITEBYTECODE is set).
$(STAMP)/deps: pyproject.toml | $(PY)
	$(PIP) install --quiet --no-compile $(TORCH_PIP_ARGS) "$(TORCH_SPEC)"
	$(PIP) install --quiet $$($(PY) -c "import tomllib; print(*tomllib.load(open('pyproject.toml', 'rb'))['build-system']['requires'])")
	@mkdir -p $(STAMP)
	$(PY) -c "import tomllib; p = tomllib.load(open('pyproject.toml', 'rb'))['project']; extras = p['optional-dependencies']; print(*p['dependencies'], *extras['test'], *extras['lint'], sep='\n')" > $(STAMP)/requirements.txt
	$(PIP) install --quiet --no-compile --no-build-isolation --no-deps -e . & project=$$!; \
	$(PIP) install --quiet --no-compile -r $(STAMP)/requirements.txt; deps=$$?; \
	wait $$project; test $$deps = 0
	$(PY) -c "import compileall, re, sysconfig; compileall.compile_dir(sysconfig.get_paths()['purelib'], quiet=2, workers=0, rx=re.compile('/tests/'))"
	@touch $@

# The C++ extension: rebuilt when a source changes. The stamp takes the time the
# build started, so a source edited during a build triggers the next one.
$(STAMP)/ext: $(STAMP)/deps $(CSRC) $(PYSRC)
	@touch $@.start
	$(PIP) install --quiet --no-build-isolation --no-deps -e .
	@mv $@.start $@

# The main experiment, as a new population each time: `workbench run` names it
# cartpole_pbt_<YYYYMMDD-HHMMSS> (`workbench resume cartpole_pbt` continues the newest).
# All of them share the MLflow store results/mlflow.db and its experiment cartpole_pbt,
# so `workbench runs` and `workbench ui` show every one without options.
run: setup
	$(VENV)/bin/workbench run experiments/cartpole_pbt.yaml --set storage=results

# A Ray cluster of NODES nodes on this machine (loopback; CPUS a node, or one figure a
# node; MEMORY GB a node, by default a share of what is available): `workbench run FILE
# --address ADDRESS` with the address it prints. docs/resources.md.
NODES ?= 4
CPUS ?= 1
MEMORY ?=
cluster-up: setup
	$(PY) deploy/local_cluster.py up --nodes $(NODES) --cpus $(CPUS) $(if $(MEMORY),--memory $(MEMORY))

cluster-down:
	$(PY) deploy/local_cluster.py down

demo: setup
	$(PY) -m sim_ext --env CartPole-v1 --num-envs 4096

# Two workers, a test file each at a time (a module's Ray and fixtures stay with it): on
# 2 cores much of a test's time is waiting (Ray starting, processes importing torch),
# which the other worker fills. Every test starts a Ray of its own (the cluster tier on
# ports it chooses), so two run side by side. docs/testing.md has the budget.
test: setup test-deps
	$(PY) -m pytest -n 2 --dist loadfile $(PYTEST_ARGS)

# Everything but the tests that start Ray, train or run a script end to end; none of the
# rest needs Chromium.
test-fast: setup
	$(PY) -m pytest -m "not slow" $(PYTEST_ARGS)

# One tier of the suite, a folder of tests/ (its markers: tests/conftest.py), e.g.
# make test-unit, test-sim_ext, test-integration, test-cluster or test-browser. Not in
# .PHONY: make looks for no pattern rule for a phony target. Only the browser tier
# needs Chromium.
TEST_TIERS = $(filter-out support,$(notdir $(patsubst %/,%,$(wildcard tests/*/))))
test-%: setup
	@test -d tests/$* || { echo "no tier tests/$*; the tiers: $(TEST_TIERS)" >&2; exit 2; }
	$(PY) -m pytest tests/$* $(PYTEST_ARGS)

test-browser: test-deps

# The box2d extra (pyproject.toml): Gymnasium's Box2D envs, which the LunarLander
# experiment uses (setup installs it, so `workbench validate experiments/*.yaml` passes).
$(STAMP)/box2d: pyproject.toml | $(PY)
	$(PIP) install --quiet $$($(PY) -c "import tomllib; print(*tomllib.load(open('pyproject.toml', 'rb'))['project']['optional-dependencies']['box2d'])")
	@mkdir -p $(STAMP) && touch $@

# The browser tier (tests/browser) drives headless Chromium: Debian's chromium package,
# installed here when `chromium` is not on PATH (as root or with passwordless sudo).
test-deps: $(STAMP)/box2d
	@command -v chromium >/dev/null 2>&1 && exit 0; \
	if [ "$$(id -u)" = 0 ]; then SUDO=; \
	elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO=sudo; \
	else echo "chromium is not installed (tests/browser needs it) and installing it needs root:" \
		"run 'sudo apt-get install --no-install-recommends chromium', or put another Chromium" \
		"on PATH as 'chromium', then 'make test' again" >&2; exit 1; fi; \
	command -v apt-get >/dev/null 2>&1 || { echo "chromium is not installed and there is no" \
		"apt-get: install Chromium so that 'chromium' is on PATH, then 'make test' again" >&2; \
		exit 1; }; \
	echo "installing chromium with apt-get (tests/browser needs it; a few minutes)"; \
	$$SUDO env DEBIAN_FRONTEND=noninteractive apt-get update && \
	$$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium

# mypy's cache lives outside the clone, so that a fresh clone (CI's) checks only what
# differs from the last check on this machine: about 8 s against 66 s cold. mypy checks
# each cached module against its source's hash, so one cache serves every clone.
MYPY_CACHE_DIR ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/pbt-workbench/mypy

lint: setup
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	MYPY_CACHE_DIR=$(MYPY_CACHE_DIR) $(PY) -m mypy
	$(VENV)/bin/lint-imports
	$(PY) tools/check_ray_internals.py

format: setup
	$(PY) -m ruff check --fix .
	$(PY) -m ruff format .

# The documentation site (docs/, mkdocs.yml) in build/site; strict: a broken link or a
# page missing from the navigation fails the build.
docs: setup
	$(PY) -m mkdocs build --strict --site-dir build/site

bench: setup
	$(PIP) install --quiet envpool || echo "envpool did not install; the benchmark runs without it"
	$(PY) benchmarks/env_throughput.py

# RL Zoo, the reference in benchmarks/time_to_target.py --zoo: its own virtualenv
# (it pins its own Gymnasium and SB3), with the same CPU torch.
ZOO_VENV ?= .venv-zoo
RL_ZOO_SPEC ?= rl_zoo3==2.9.2
zoo-venv: $(ZOO_VENV)/.stamp

$(ZOO_VENV)/.stamp:
	$(PYTHON) -m venv $(ZOO_VENV)
	$(ZOO_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(ZOO_VENV)/bin/python -m pip install --quiet $(TORCH_PIP_ARGS) "$(TORCH_SPEC)"
	$(ZOO_VENV)/bin/python -m pip install --quiet "$(RL_ZOO_SPEC)" pandas
	@touch $@

clean:
	rm -rf build $(VENV)/.stamp
