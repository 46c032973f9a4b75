# tf-fbn-ops: two commands do everything on a fresh machine with Python 3 and g++.
#   make demo   virtual environment + TensorFlow + build, then the main job (a parity table)
#   make test   the same set-up, then the C++ core tests and the whole pytest suite
# Other targets: lib (build the op library), core-test, clean.

PYTHON     ?= python3
VENV       ?= .venv
TF_PACKAGE ?= tensorflow-cpu==2.21.0
CXX        ?= g++

PY      := $(VENV)/bin/python
DEPS    := $(VENV)/.deps-installed
LIBRARY := tf_fbn_ops/_fbn_ops.so
CC_FILES := $(shell find cc -name '*.cc' -o -name '*.h')
CORE_TEST := build/core_test

.PHONY: demo test lib core-test clean

demo: lib
	$(PY) -m tf_fbn_ops demo

test: lib core-test
	$(PY) -m pytest -q tests

lib: $(LIBRARY)

core-test: $(CORE_TEST)
	./$(CORE_TEST)

$(DEPS):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip "setuptools>=64" wheel
	$(PY) -m pip install --quiet "$(TF_PACKAGE)" pytest
	touch $@

# An editable install: the library is built in place and the package imports from the checkout.
$(LIBRARY): $(DEPS) $(CC_FILES) setup.py
	$(PY) -m pip install --quiet --no-build-isolation --no-deps -e .
	touch $@

# The core needs no TensorFlow: plain g++.
$(CORE_TEST): $(CC_FILES)
	mkdir -p $(dir $@)
	$(CXX) -std=c++17 -O2 -Wall -Wextra -I. -pthread cc/core/*.cc cc/tests/core_test.cc -o $@

clean:
	rm -rf build dist *.egg-info $(LIBRARY) tf_fbn_ops/_build_info.py
