# rdmad — see README.md. `make run` and `make test` are the two set-up
# commands; both install what they need on Debian/Ubuntu when run as root.

GO       ?= go
# The version is computed once per make run (not per use), and sorts by
# time: VERSION file + commit count + commit.
ifndef VERSION
# Outside a git checkout (a source tarball) the count and commit are 0 and
# unknown; inside one, git's errors are shown.
VERSION := $(shell cat VERSION)+git$(shell if [ -e .git ]; then git rev-list --count HEAD; else echo 0; fi).$(shell if [ -e .git ]; then git rev-parse --short HEAD; else echo unknown; fi)
endif
LDFLAGS  := -X main.version=$(VERSION)
RUN_DIR  ?= $(CURDIR)/.run
RUN_SOCK ?= $(RUN_DIR)/rdmad.sock

.PHONY: all build run test fuzz bench soak deps e2e package clean

all: build

build: deps-build
	$(GO) build -trimpath -ldflags "$(LDFLAGS)" -o bin/rdmad ./cmd/rdmad
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w $(LDFLAGS)" -o bin/rdmactl ./cmd/rdmactl

# run: build, start rdmad in the foreground on etc/rdmad.toml with a socket
# the invoking user can reach, show `rdmactl status` against it, and keep
# running until Ctrl-C.
run: build
	@mkdir -p $(RUN_DIR)
	@./scripts/run-foreground bin/rdmad bin/rdmactl etc/rdmad.toml $(RUN_SOCK)

# test: install missing build/test dependencies (as root), then vet and test
# everything, with the race detector. RDMAD_TEST_STRICT makes a test whose
# tool is missing fail instead of skipping (internal/testenv): deps
# installed them all. The second run is the verbs data plane against the
# fake NIC (-tags verbsfake, docs/TESTING.md): the packages that link the
# binding (verbs and the daemon; the daemon's transports and sources do not
# change under the tag, and the first run tests them).
test: deps
	$(GO) vet ./...
	$(GO) vet -tags verbsfake ./verbs/... ./daemon/...
	$(GO) vet -tags e2e ./e2e/...
	RDMAD_TEST_STRICT=1 $(GO) test -race -count=1 ./...
	RDMAD_TEST_STRICT=1 $(GO) test -race -count=1 -tags verbsfake ./verbs/... ./daemon/

# fuzz: every fuzz target of the repository (func Fuzz* in the test files),
# FUZZTIME each (default 20s), one after another; a table of the executions
# per target is printed and written to .fuzz/summary.txt. A failing input is
# left in the package's testdata/fuzz/ (scripts/fuzz).
FUZZTIME ?= 20s
fuzz: deps
	FUZZTIME=$(FUZZTIME) ./scripts/fuzz

# bench: the host benchmarks (docs/BENCHMARKS.md): the peer engine at 100,
# 1,000 and 10,000 peers at 1 Hz, publishing, scraping and status at scale,
# the MR pool; output in .bench/results.txt (scripts/bench). Not in CI.
bench: deps
	./scripts/bench

# soak: rdmad's main loop, API, watch hub, metrics and peer manager with
# 1,000 peers on the in-memory transport for SOAK_DURATION (default 30m)
# while peers, configuration and watchers change; the slopes per hour of
# heap, goroutines, open files and RSS in .soak/report.txt (scripts/soak,
# docs/BENCHMARKS.md). Not in CI.
SOAK_DURATION ?= 30m
soak: deps-build
	SOAK_DURATION=$(SOAK_DURATION) ./scripts/soak

deps-build:
	@./scripts/deps build

deps:
	@./scripts/deps test

# e2e: the VM suite (docs/TESTING.md): real RDMA over Soft-RoCE in qemu,
# with rdmad installed from the package, as operators install it. The
# bed's bound (RDMAD_VM_TIMEOUT, 55 min) leaves CI's 90 minutes room for
# make test and make fuzz (about 18 min); the test binaries time out 7 min
# before it (test/vm/e2e).
e2e: package
	RDMAD_VM_INSTALL=deb RDMAD_VM_TIMEOUT=$${RDMAD_VM_TIMEOUT:-3300} ./test/vm/e2e

# package: dist/*.deb and dist/*.rpm (nfpm.yaml), checked (contents,
# conffiles, dependencies, lintian, rpm metadata).
package: build
	VERSION=$(VERSION) ./packaging/build
	./packaging/check

clean:
	rm -rf bin dist $(RUN_DIR)
