# antrea-vm-agent: build, test and demo entry points.
#
#   make build   build the agent (debug)
#   make test    every test, as root: the tests of test-unit and of test-lab, compiled once with
#                the `lab` feature, the lab's test binaries LAB_JOBS at a time (installs the lab's
#                system packages first if missing)
#   make test-unit  what a plain `cargo test` runs, without root: every test of every crate of the
#                workspace without the `lab` feature (unit, property, integration and doc tests;
#                the benches run in test mode, which checks that they build and start)
#   make test-lab   as root, only the tests the `lab` feature adds: the library's `lab_...` tests,
#                tests/lab_*.rs and tests/deb_package.rs (network namespaces, a private userspace
#                Open vSwitch per test, a real systemd), LAB_JOBS test binaries at a time
#   make demo    deploy/lab.sh demo (root): the agent on a VM made of two network namespaces, an
#                Antrea-native policy from deploy/lab/ enforced, counted and removed, the NIC
#                restored exactly; every step is checked, and any failed check fails the target
#   make deps    apt-get install the lab's packages, skipped when every tool is already there
#   make lint    rustfmt check and clippy with warnings as errors, on every crate of the workspace,
#                for the tests' build (with and without the `lab` feature) and for the product
#                build (no test-util feature)
#   make deny    cargo-deny: licenses, sources and duplicate versions (deny.toml); the advisories
#                need the RustSec database from GitHub: `make deny-advisories` where it is reachable
#   make deb     the Debian package (release build, LTO) in target/debian/; DEB_PROFILE=dev for a
#                quick package of the debug build (what tests/deb_package.rs does)

CARGO ?= cargo
# Tests at a time within one test binary. Each lab test runs its own ovsdb-server and ovs-vswitchd;
# two at a time per binary keeps them reliable on a 2-core machine.
TEST_THREADS ?= 2

DEB_PACKAGES := openvswitch-switch iproute2 nftables ethtool iputils-ping netcat-openbsd shellcheck systemd curl logrotate \
	dnsmasq-base systemd-container debootstrap man-db
LAB_TOOLS := ovsdb-tool ovsdb-server ovs-vswitchd ovs-vsctl ovs-ofctl ovs-appctl ip ss nft ethtool ping nc shellcheck systemd-analyze curl logrotate \
	dnsmasq systemd-nspawn debootstrap man dpkg-deb

# The OVS daemons and ip/nft live in sbin, which a user's PATH may lack.
export PATH := $(PATH):/usr/local/sbin:/usr/sbin:/sbin

# cargo-deb, pinned: `make deb` installs exactly this version when another (or none) is found.
CARGO_DEB_VERSION := 3.8.0
# cargo-deny, pinned the same way (`make deny`, deny.toml).
CARGO_DENY_VERSION := 0.20.2
DEB_PROFILE ?= release
# DEB_BUILD=no packages target/<profile>/antrea-vm-agent as it is instead of building it first: what
# tests/deb_package.rs does with the binary its own `cargo test` has just built.
DEB_BUILD ?= yes
DEB_PROFILE_DIR := $(if $(filter dev test,$(DEB_PROFILE)),debug,$(DEB_PROFILE))
DEB_ASSETS := target/$(DEB_PROFILE_DIR)/deb-assets
# Extra arguments for cargo-deb (e.g. DEB_ARGS=--fast, or --deb-version=0.1.0-2).
DEB_ARGS ?=
# The release profile already drops DWARF and keeps symbol names (backtraces); cargo-deb would strip
# those too. The tests' debug-build package strips everything (DEB_STRIP=--strip) to stay small.
DEB_STRIP ?= --no-strip

# A test that needs root is compiled only with the `lab` cargo feature (Cargo.toml), so that a plain
# `cargo test` passes as a normal user: the library's such tests are named `lab_...` and gated
# #[cfg(feature = "lab")]; the integration tests are the targets that require the feature, every
# tests/lab_*.rs and the ones named here. tests/gating.rs fails when a gate, a name or this list
# disagrees with the others. (deb_package first: the longest runs should start first.)
LAB_TEST_CRATES := deb_package $(basename $(notdir $(wildcard tests/lab_*.rs)))
UNIT_TEST_CRATES := $(filter-out $(LAB_TEST_CRATES),$(basename $(notdir $(wildcard tests/*.rs))))
# The lab's test binaries wait far more than they compute (an agent reacting, OVS reconnecting,
# traffic timing out: seconds of CPU in a minute), and each lab has network namespaces, an OVS and
# a directory of its own under a random prefix (tests/support/lab.rs). So LAB_JOBS of them run at
# once, each with TEST_THREADS tests at a time; make -O keeps each one's output in one piece.
LAB_JOBS ?= 4
LAB_RUNS := lab-run-lib $(addprefix lab-run-,$(LAB_TEST_CRATES))

.PHONY: build test test-unit test-lab root $(LAB_RUNS) deps demo lint deny deny-advisories deb cargo-deb cargo-deny

build:
	$(CARGO) build

# Every target is compiled once, with the `lab` feature (test-unit then test-lab would compile the
# agent's library, binary and tests twice: the feature changes the library). Then the tests that
# need no root run one binary after the other, as `cargo test` runs them, and the lab's ones
# LAB_JOBS at a time: the library's binary runs twice, its tests split by name (`--skip lab_`
# here, `-- lab_` in lab-run-lib). --benches runs the benches in test mode (each checks that it
# starts). deps first: some unit tests run the lab's tools too (shellcheck, systemd-analyze).
test: root deps cargo-deb
	$(CARGO) test --workspace --all-targets --features lab --no-run
	$(CARGO) test --workspace --features lab --no-fail-fast --lib --bins --benches $(addprefix --test ,$(UNIT_TEST_CRATES)) -- --skip lab_ --test-threads=$(TEST_THREADS)
	$(CARGO) test --workspace --doc --features lab
	$(MAKE) --no-print-directory -k -O -j$(LAB_JOBS) $(LAB_RUNS)

test-unit:
	$(CARGO) test --workspace --all-targets -- --test-threads=$(TEST_THREADS)
	$(CARGO) test --workspace --doc

test-lab: root deps cargo-deb
	$(CARGO) test --features lab --no-run --lib $(addprefix --test ,$(LAB_TEST_CRATES))
	$(MAKE) --no-print-directory -k -O -j$(LAB_JOBS) $(LAB_RUNS)

# First, before installing anything: the lab tests need root (network namespaces, Open vSwitch).
root:
	@[ "$$(id -u)" = 0 ] || { echo "make $(MAKECMDGOALS) needs root (the lab tests); make test-unit runs the others without"; exit 1; }

# One lab test binary each (built by test or test-lab first). The library's lab tests are those
# with `lab_` in their path: named so, or in a `lab_tests` module.
lab-run-lib:
	$(CARGO) test --features lab --lib -- lab_ --test-threads=$(TEST_THREADS)

$(addprefix lab-run-,$(LAB_TEST_CRATES)): lab-run-%:
	$(CARGO) test --features lab --test $* -- --test-threads=$(TEST_THREADS)

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
	CARGO="$(CARGO)" deploy/lab.sh demo

cargo-deb:
	@if [ "$$(cargo deb --version 2>/dev/null)" != "cargo-deb $(CARGO_DEB_VERSION)" ]; then \
		echo "cargo-deb: installing $(CARGO_DEB_VERSION)"; \
		$(CARGO) install cargo-deb --version $(CARGO_DEB_VERSION) --locked; \
	fi

# The package: the binary, its man pages and completions generated from that very binary, the unit
# (pointing at /usr/bin), the sample config as a conffile and the network-manager drop-ins (no
# logrotate file: the agent rotates its own log). The emulator is not in it. See deploy/debian/
# for the maintainer scripts.
deb: cargo-deb
	$(if $(filter no,$(DEB_BUILD)),test -x target/$(DEB_PROFILE_DIR)/antrea-vm-agent,$(CARGO) build --profile $(DEB_PROFILE) --bin antrea-vm-agent)
	rm -rf $(DEB_ASSETS) && mkdir -p $(DEB_ASSETS)
	target/$(DEB_PROFILE_DIR)/antrea-vm-agent gen-docs --out $(DEB_ASSETS) >/dev/null
	gzip -9n $(DEB_ASSETS)/man/*.8
	sed 's|/usr/sbin/antrea-vm-agent|/usr/bin/antrea-vm-agent|g; s|^# Installed by deploy/install-vm.sh as .*|# Installed by the antrea-vm-agent Debian package.|' \
		deploy/systemd/antrea-vm-agent.service > $(DEB_ASSETS)/antrea-vm-agent.service
	cargo deb --no-build $(DEB_STRIP) --profile $(DEB_PROFILE) $(DEB_ARGS)

# Clippy on the tests' build with and without the `lab` feature (the code each of `cargo test` and
# `make test-lab` compiles), then on the product build: --lib --bins without --all-targets builds
# no dev-dependency, so the test-util feature is off; it fails if product code names a fake or the
# emulator (docs/architecture.md rule 10).
lint:
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) clippy --workspace --all-targets --features lab -- -D warnings
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
