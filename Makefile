# antrea-vm-agent: build, test and demo entry points.
#
#   make build   build the agent (debug)
#   make test    install the lab's system packages if missing, then run every test: test-unit,
#                then test-lab
#   make test-unit  the tests that need no root: the unit tests of the agent's library and
#                binaries except those named `lab_...`, the unit and property tests of the
#                workspace's crates (crates/*), and every tests/*.rs except tests/lab_*.rs and
#                tests/deb_package.rs (the benches only check that they build)
#   make test-lab   the rest, as root: network namespaces and a private userspace Open vSwitch
#                per test (the library's `lab_...` tests, tests/lab_*.rs, tests/deb_package.rs)
#   make demo    deploy/lab.sh demo: the agent on a VM made of two network namespaces (root)
#   make deps    apt-get install the lab's packages, skipped when every tool is already there
#   make lint    rustfmt check and clippy with warnings as errors, on every crate of the workspace,
#                for the tests' build and for the product build (no test-util feature)
#   make deny    cargo-deny: licenses, sources and duplicate versions (deny.toml); the advisories
#                need the RustSec database from GitHub: `make deny-advisories` where it is reachable
#   make deb     the Debian package (release build, LTO) in target/debian/; DEB_PROFILE=dev for a
#                quick package of the debug build (what tests/deb_package.rs does)

CARGO ?= cargo
# Each lab test runs its own ovsdb-server and ovs-vswitchd; two at a time keeps them reliable on a
# 2-core machine (test binaries themselves run one after the other).
TEST_THREADS ?= 2

DEB_PACKAGES := openvswitch-switch iproute2 nftables ethtool iputils-ping netcat-openbsd shellcheck systemd curl \
	dnsmasq-base systemd-container debootstrap man-db
LAB_TOOLS := ovsdb-tool ovsdb-server ovs-vswitchd ovs-vsctl ovs-ofctl ovs-appctl ip ss nft ethtool ping nc shellcheck systemd-analyze curl \
	dnsmasq systemd-nspawn debootstrap man dpkg-deb

# The OVS daemons and ip/nft live in sbin, which a user's PATH may lack.
export PATH := $(PATH):/usr/local/sbin:/usr/sbin:/sbin

# cargo-deb, pinned: `make deb` installs exactly this version when another (or none) is found.
CARGO_DEB_VERSION := 3.8.0
# cargo-deny, pinned the same way (`make deny`, deny.toml).
CARGO_DENY_VERSION := 0.20.2
DEB_PROFILE ?= release
DEB_PROFILE_DIR := $(if $(filter dev test,$(DEB_PROFILE)),debug,$(DEB_PROFILE))
DEB_ASSETS := target/$(DEB_PROFILE_DIR)/deb-assets
# Extra arguments for cargo-deb (e.g. DEB_ARGS=--fast, or --deb-version=0.1.0-2).
DEB_ARGS ?=
# The release profile already drops DWARF and keeps symbol names (backtraces); cargo-deb would strip
# those too. The tests' debug-build package strips everything (DEB_STRIP=--strip) to stay small.
DEB_STRIP ?= --no-strip

# A test that needs root has `lab_` in its name (the library's helpers that create a namespace
# or start OVS refuse to run in a test named otherwise) or lives in tests/lab_*.rs.
LAB_TEST_CRATES := $(basename $(notdir $(wildcard tests/lab_*.rs))) deb_package
UNIT_TEST_CRATES := $(filter-out $(LAB_TEST_CRATES),$(basename $(notdir $(wildcard tests/*.rs))))
# The benches by name: `--benches` would also select the library (bench = true by default) and
# run its unit tests a second time, `lab_...` ones included, which need root.
BENCH_CRATES := $(basename $(notdir $(wildcard benches/*.rs)))

.PHONY: build test test-unit test-lab deps demo lint deny deny-advisories deb cargo-deb cargo-deny

build:
	$(CARGO) build

# deps first: some unit tests run the lab's tools too (shellcheck, systemd-analyze).
test: deps cargo-deb
	$(MAKE) test-unit
	$(MAKE) test-lab

# --workspace --lib: the agent's library and the crates under crates/ (which have no lab tests;
# the lab tests of their code live in the agent, beside the lab harness).
test-unit:
	$(CARGO) test --workspace --lib -- --skip lab_ --test-threads=$(TEST_THREADS)
	$(CARGO) test --bins $(addprefix --bench ,$(BENCH_CRATES)) $(addprefix --test ,$(UNIT_TEST_CRATES)) -- --test-threads=$(TEST_THREADS)

test-lab: deps cargo-deb
	@[ "$$(id -u)" = 0 ] || { echo "test-lab needs root (network namespaces, Open vSwitch)"; exit 1; }
	$(CARGO) test --lib -- lab_ --test-threads=$(TEST_THREADS)
	$(CARGO) test --no-fail-fast $(addprefix --test ,$(LAB_TEST_CRATES)) -- --test-threads=$(TEST_THREADS)

deps:
	@missing=""; \
	for tool in $(LAB_TOOLS); do command -v $$tool >/dev/null 2>&1 || missing="$$missing $$tool"; done; \
	if [ -z "$$missing" ]; then \
		echo "deps: every lab tool is present"; \
	else \
		echo "deps: missing:$$missing; installing $(DEB_PACKAGES)"; \
		sudo=""; [ "$$(id -u)" = 0 ] || sudo="sudo"; \
		$$sudo apt-get update && \
		$$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $(DEB_PACKAGES); \
	fi

demo: deps
	deploy/lab.sh demo

cargo-deb:
	@if [ "$$(cargo deb --version 2>/dev/null)" != "cargo-deb $(CARGO_DEB_VERSION)" ]; then \
		echo "cargo-deb: installing $(CARGO_DEB_VERSION)"; \
		$(CARGO) install cargo-deb --version $(CARGO_DEB_VERSION) --locked; \
	fi

# The package: the binary, its man pages and completions generated from that very binary, the unit
# (pointing at /usr/bin), the sample config as a conffile, logrotate and the network-manager
# drop-ins. The emulator is not in it. See deploy/debian/ for the maintainer scripts.
deb: cargo-deb
	$(CARGO) build --profile $(DEB_PROFILE) --bin antrea-vm-agent
	rm -rf $(DEB_ASSETS) && mkdir -p $(DEB_ASSETS)
	target/$(DEB_PROFILE_DIR)/antrea-vm-agent gen-docs --out $(DEB_ASSETS) >/dev/null
	gzip -9n $(DEB_ASSETS)/man/*.8
	sed 's|/usr/sbin/antrea-vm-agent|/usr/bin/antrea-vm-agent|g; s|^# Installed by deploy/install-vm.sh as .*|# Installed by the antrea-vm-agent Debian package.|' \
		deploy/systemd/antrea-vm-agent.service > $(DEB_ASSETS)/antrea-vm-agent.service
	cargo deb --no-build $(DEB_STRIP) --profile $(DEB_PROFILE) $(DEB_ARGS)

# The second clippy checks the product build: --lib --bins without --all-targets builds no
# dev-dependency, so the test-util feature is off; it fails if product code names a fake or the
# emulator (docs/architecture.md rule 10).
lint:
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) clippy --workspace --lib --bins -- -D warnings

cargo-deny:
	@if [ "$$(cargo deny --version 2>/dev/null)" != "cargo-deny $(CARGO_DENY_VERSION)" ]; then \
		echo "cargo-deny: installing $(CARGO_DENY_VERSION)"; \
		$(CARGO) install cargo-deny --version $(CARGO_DENY_VERSION) --locked; \
	fi

deny: cargo-deny
	$(CARGO) deny check licenses bans sources

deny-advisories: cargo-deny
	$(CARGO) deny check advisories
