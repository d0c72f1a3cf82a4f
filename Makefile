# Two commands do all the set-up on a fresh clone: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: test demo venv clean peers browser prometheus

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

# The dashboard's browser test drives Debian's headless Chromium through chromedriver (selenium
# comes with the dev extra); `promtool check metrics` comes with Debian's prometheus package.
# Installed only when missing and we are root; otherwise say so and go on (those tests then skip
# with the reason, and fail under CI=true).
browser:
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "installing the dashboard test's browser: apt-get install -y chromium chromium-driver"; \
	  (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
	    chromium chromium-driver) >/dev/null || echo "make: installing chromium failed"; \
	else echo "make: chromium or chromedriver is missing and this is not root with apt-get:" \
	  "not installing them (sudo apt-get install -y chromium chromium-driver)"; fi

prometheus:
	@if command -v promtool >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "installing promtool: apt-get install -y prometheus"; \
	  (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
	    --no-install-recommends prometheus) >/dev/null || echo "make: installing prometheus failed"; \
	else echo "make: promtool is missing and this is not root with apt-get:" \
	  "not installing it (sudo apt-get install -y prometheus)"; fi

test: $(STAMP) peers browser prometheus
	$(PY) -m pytest -q

demo: $(STAMP)
	rm -rf demo-data
	$(VENV)/bin/rtimer --data-dir demo-data demo

clean:
	rm -rf $(VENV) demo-data rtimer-data .pytest_cache .hypothesis
