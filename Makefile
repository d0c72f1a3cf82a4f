# Two commands do all the set-up on a fresh clone: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: test demo venv clean peers rocketmq faketime browser prometheus valgrind remoting-clients \
	java-remoting-client rocketmq4-venv js-remoting-client rocketmq-setup rocketmq-compare

# $(call debian,<what>,<check>,<apt-get install arguments>): Debian packages a target needs, installed
# only when <check> fails and we are root with apt-get; otherwise say what is missing and how to
# install it, and go on (what needs it then skips with the reason, and fails under CI=true).
debian = @if $(2); then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "installing $(1): apt-get install -y $(3)"; \
	  (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $(3)) \
	    >/dev/null || echo "make: installing $(1) failed"; \
	else echo "make: $(1) missing; not installing as this is not root with apt-get" \
	  "(sudo apt-get install -y $(3))"; fi

# The dev venv: the library and `rtimer` installed editable with every extra the suite and the
# tools need (`spark`: pyspark and the dataframe/plotting stack), and the checkout itself on the
# path (rocks_timer_checkout.pth), so its tools run as `python -m bench.x`, `python -m spark.x`,
# `python -m cli.main` from any directory; `pip install .` installs none of those three
# (docs/DECISIONS.md "Packaging").
# nghttp2's header first: the gRPC front's native HTTP/2 codec (rocks_timer/_native/h2.c) is built
# only where it is installed; without it the front serves through grpcio (docs/FRONTS.md).
$(STAMP): pyproject.toml setup.py $(wildcard rocks_timer/_native/*.c rocks_timer/_native/*.h)
	$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Python 3.11+ is needed"'
	$(call debian,the nghttp2 header for the native HTTP/2 codec,[ -e /usr/include/nghttp2/nghttp2.h ],libnghttp2-dev)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,grpc,spark,fast]'
	echo "$(CURDIR)" > "$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/rocks_timer_checkout.pth"
	touch $(STAMP)

venv: $(STAMP)

# The peers that `python -m bench.peers` starts (beanstalkd, redis-server), from Debian's packages.
# Installed only when missing and we are root; otherwise say so and go on (the benchmark then
# names the missing peer and measures the others; its smoke test fails only under CI=true).
peers:
	$(call debian,the benchmark peers (beanstalkd and redis-server),command -v beanstalkd >/dev/null && command -v redis-server >/dev/null,beanstalkd redis-server)

# The unmodified RocketMQ 4.x clients the remoting front's tests drive (tests/fronts/):
# the Java client 4.9.8 (Maven Central, into the Maven cache, compiled once), PyPI `rocketmq`
# 0.4.4 (bundles the C++ core; a venv of its own, since its top-level package clashes with
# rocketmq-python-client's) and npm `ali-ons` (from its lockfile). A missing tool is said and
# skipped here; the tests then fail under CI=true and skip otherwise.
JAVA_CLIENT := tests/fronts/java
JAVA_CLIENT_CLASS := $(JAVA_CLIENT)/target/classes/rtimer/RemotingClient.class
RMQ4_VENV := .venv-rocketmq4
RMQ4_STAMP := $(RMQ4_VENV)/.installed
JS_CLIENT := tests/fronts/js
JS_STAMP := $(JS_CLIENT)/node_modules/.installed

remoting-clients: java-remoting-client rocketmq4-venv js-remoting-client

java-remoting-client: $(JAVA_CLIENT_CLASS)

$(JAVA_CLIENT_CLASS): $(JAVA_CLIENT)/pom.xml $(JAVA_CLIENT)/src/main/java/rtimer/RemotingClient.java
	@if command -v mvn >/dev/null && command -v javac >/dev/null; then \
	  cd $(JAVA_CLIENT) && mvn -q -B dependency:build-classpath \
	    -Dmdep.outputFile=target/classpath.txt && \
	  javac --release 11 -d target/classes -cp "$$(cat target/classpath.txt)" \
	    src/main/java/rtimer/RemotingClient.java; \
	else echo "make: mvn or javac is missing: not building the Java 4.x client" \
	  "(apt-get install -y maven openjdk-17-jdk-headless)"; fi

rocketmq4-venv: $(RMQ4_STAMP)

$(RMQ4_STAMP): pyproject.toml
	@if $(PYTHON) -m venv $(RMQ4_VENV) && $(RMQ4_VENV)/bin/pip install --quiet \
	    "$$(sed -n 's/^ *"\(rocketmq==[0-9.]*\)",*$$/\1/p' pyproject.toml)"; \
	then touch $(RMQ4_STAMP); else echo "make: installing PyPI rocketmq 0.4.4 failed"; fi

js-remoting-client: $(JS_STAMP)

$(JS_STAMP): $(JS_CLIENT)/package.json $(JS_CLIENT)/package-lock.json
	@if command -v npm >/dev/null; then \
	  cd $(JS_CLIENT) && npm ci --silent --no-audit --no-fund && touch node_modules/.installed; \
	else echo "make: npm is missing: not installing ali-ons (apt-get install -y npm)"; fi

# The real Apache RocketMQ (bench/rocketmq, issue #29): Maven resolves the pinned jars of
# bench/rocketmq/pom.xml into the Maven cache (~/.m2/repository) and writes the runtime classpath
# to bench/rocketmq/.classpath (gitignored). The first run downloads; while the classpath file is
# newer than the pom, later runs resolve offline (mvn -o) and only check the cache is whole.
# Without java or mvn it says so and goes on (the smoke test then skips, or fails under CI=true).
RMQ_POM := bench/rocketmq/pom.xml
RMQ_CP  := bench/rocketmq/.classpath
RMQ_MVN := mvn -B -q -f $(RMQ_POM) dependency:build-classpath -Dmdep.outputFile=.classpath \
	-Dmdep.includeScope=runtime

rocketmq:
	@if ! command -v java >/dev/null || ! command -v mvn >/dev/null; then \
	  echo "make: java or mvn is missing: not resolving the real RocketMQ" \
	    "(apt-get install -y openjdk-17-jdk-headless maven)"; \
	elif [ -s $(RMQ_CP) ] && [ $(RMQ_CP) -nt $(RMQ_POM) ] && $(RMQ_MVN) -o >/dev/null 2>&1; then :; \
	else echo "resolving Apache RocketMQ 5.5.1 into the Maven cache ($(RMQ_POM))"; \
	  rm -f $(RMQ_CP); $(RMQ_MVN) && test -s $(RMQ_CP); fi

# libfaketime (Debian faketime) runs the broker JVM on a sped-up clock for multi-day delays
# (bench/rocketmq/compare.py --validate). Installed only when missing and we are root.
faketime:
	$(call debian,libfaketime,[ -e /usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1 ],faketime)

# valgrind (callgrind) counts the instructions the metric counters add to the hot paths
# (`python -m bench.metrics_instructions`, docs/BENCHMARKS.md "Metrics"); a benchmark's tool, so
# not a step of `make test`. Installed only when missing and we are root, as above.
valgrind:
	$(call debian,valgrind,command -v valgrind >/dev/null,valgrind)

# Compare with the real RocketMQ (README): set-up once, then the whole comparison in one run
# (docs/BENCHMARKS.md "The real Apache RocketMQ"); RMQ_ARGS passes options to the run. The burst
# cell drives every engine with the Java 4.9.8 client, hence java-remoting-client.
rocketmq-setup: $(STAMP) rocketmq faketime java-remoting-client

rocketmq-compare: rocketmq-setup
	$(PY) -m bench.rocketmq.compare $(RMQ_ARGS)
	$(PY) -m spark.real_check

# The dashboard's browser test drives Debian's headless Chromium through chromedriver (selenium
# comes with the dev extra); `promtool check metrics` comes with Debian's prometheus package.
# Installed only when missing and we are root; otherwise say so and go on (those tests then skip
# with the reason, and fail under CI=true).
browser:
	$(call debian,the dashboard test's browser (chromium and chromedriver),command -v chromium >/dev/null && command -v chromedriver >/dev/null,chromium chromium-driver)

prometheus:
	$(call debian,promtool,command -v promtool >/dev/null,--no-install-recommends prometheus)

test: $(STAMP) peers rocketmq browser prometheus remoting-clients
	$(VENV)/bin/lint-imports --no-cache  # the import contracts (.importlinter), under a second
	$(PY) -m pytest -q

demo: $(STAMP)
	rm -rf demo-data
	$(VENV)/bin/rtimer --data-dir demo-data demo

clean:
	rm -rf $(VENV) $(RMQ4_VENV) $(JAVA_CLIENT)/target
	rm -rf $(JS_CLIENT)/node_modules demo-data rtimer-data .pytest_cache .hypothesis
