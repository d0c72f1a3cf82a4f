# Two commands do all the set-up on a fresh clone: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: test demo venv clean

$(STAMP): pyproject.toml setup.py $(wildcard rocks_timer/_native/*.c rocks_timer/_native/*.h)
	$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Python 3.11+ is needed"'
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,grpc]'
	touch $(STAMP)

venv: $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q

demo: $(STAMP)
	rm -rf demo-data
	$(VENV)/bin/rtimer --data-dir demo-data demo

clean:
	rm -rf $(VENV) demo-data rtimer-data .pytest_cache .hypothesis
