# antrea-vm-agent: build, test and demo entry points.
#
#   make build   build the agent (debug)
#   make test    install the lab's system packages if missing, then run every test; the lab tests
#                need root (network namespaces and a private userspace Open vSwitch per test)
#   make demo    deploy/lab.sh demo: the agent on a VM made of two network namespaces (root)
#   make deps    apt-get install the lab's packages, skipped when every tool is already there
#   make lint    rustfmt check and clippy with warnings as errors

CARGO ?= cargo
# Each lab test runs its own ovsdb-server and ovs-vswitchd; two at a time keeps them reliable on a
# 2-core machine (test binaries themselves run one after the other).
TEST_THREADS ?= 2

DEB_PACKAGES := openvswitch-switch iproute2 nftables ethtool iputils-ping netcat-openbsd shellcheck systemd dnsmasq-base
LAB_TOOLS := ovsdb-tool ovsdb-server ovs-vswitchd ovs-vsctl ovs-ofctl ovs-appctl ip ss nft ethtool ping nc shellcheck systemd-analyze dnsmasq

# The OVS daemons and ip/nft live in sbin, which a user's PATH may lack.
export PATH := $(PATH):/usr/local/sbin:/usr/sbin:/sbin

.PHONY: build test deps demo lint

build:
	$(CARGO) build

test: deps
	$(CARGO) test --all-targets -- --test-threads=$(TEST_THREADS)

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

lint:
	$(CARGO) fmt --check
	$(CARGO) clippy --all-targets -- -D warnings
