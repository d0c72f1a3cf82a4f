# Two commands do all the set-up on a fresh clone: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: test demo venv clean peers

$(STAMP): pyproject.toml setup.py $(wildcard rocks_timer/_native/*.c rocks_timer/_native/*.h)
	$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Python 3.11+ is needed"'
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,grpc]'
	touch $(STAMP)

venv: $(STAMP)

# The peers that `python -m bench.peers` starts (beanstalkd, redis-server), from Debian's packages.
# Installed only when missing and we are root; otherwise say so and go on (the benchmark then
# names the missing peer and measures the others; its smoke test fails only under CI=true).
peers:
	@if command -v beanstalkd >/dev/null && command -v redis-server >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "installing the benchmark peers: apt-get install -y beanstalkd redis-server"; \
	  (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
	    beanstalkd redis-server) >/dev/null || echo "make: installing beanstalkd/redis-server failed"; \
	else echo "make: beanstalkd or redis-server is missing and this is not root with apt-get:" \
	  "not installing them (sudo apt-get install -y beanstalkd redis-server)"; fi

test: $(STAMP) peers
	$(PY) -m pytest -q

demo: $(STAMP)
	rm -rf demo-data
	$(VENV)/bin/rtimer --data-dir demo-data demo

clean:
	rm -rf $(VENV) demo-data rtimer-data .pytest_cache .hypothesis
