#!/usr/bin/env bash
# deploy/lab.sh: a VM on this machine, for trying antrea-vm-agent by hand.
#
#   deploy/lab.sh up      build the lab: namespaces avm-vm (the "VM") and avm-ext (an outside host)
#                         joined by a veth pair, and a private Open vSwitch (userspace datapath)
#                         inside avm-vm with its sockets in /tmp/antrea-vm-lab/run
#   deploy/lab.sh down    remove everything `up` and `demo` created
#   deploy/lab.sh demo    build the agent, bring the lab up, attach the VM's eth0 to OVS with the
#                         agent (standalone mode), show the result, test traffic, enforce an Antrea
#                         NetworkPolicy written as a user writes it (deploy/lab/policies/) and
#                         watch its per-rule counters in /metrics and through `antrea-vm-agent
#                         get`, remove it, detach, check that the VM's network configuration is
#                         back exactly as it was, tear down. Exit status 0 only if every check passed.
#
# Topology:
#   avm-ext: ext0 10.99.0.1/24 fd00:99::1/64  <--veth-->  avm-vm: eth0 10.99.0.2/24 fd00:99::2/64
#            MTU 1400, default via 10.99.0.1 (proto dhcp, metric 100), default via fd00:99::1
#
# Needs root and: openvswitch-switch iproute2 nftables ethtool iputils-ping netcat-openbsd
# (`make deps`). Environment: AVM_LAB_DIR (default /tmp/antrea-vm-lab), AGENT_BIN (default
# target/debug/antrea-vm-agent), AVM_SKIP_BUILD=1 (demo: use AGENT_BIN as it is), AVM_LAB_KEEP=1
# (demo: leave the lab up at the end), CARGO (default cargo).
set -euo pipefail

VM_NS=avm-vm
EXT_NS=avm-ext
LAB_DIR=${AVM_LAB_DIR:-/tmp/antrea-vm-lab}
RUN_DIR=$LAB_DIR/run
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
AGENT_BIN=${AGENT_BIN:-$REPO/target/debug/antrea-vm-agent}
CONFIG=$LAB_DIR/antrea-agent.conf
EN_FILE=$LAB_DIR/external-node.yaml
AGENT_LOG=$LAB_DIR/agent.log
AGENT_PID=$LAB_DIR/agent.pid
POLICY_DIR=$LAB_DIR/policies
API_SOCKET=$LAB_DIR/agent-api.sock
# The metrics listener, inside the VM namespace (its loopback).
METRICS_ADDR=127.0.0.1:10351
# The demo's YAML, as a user writes it: the ExternalNode (the VM), the inventory (an
# ExternalEntity for the outside host) and the AntreaNetworkPolicy vm-ns/lab-guard with its rules
# drop-8080 and allow-icmp.
FIXTURES=$REPO/deploy/lab
POLICY_NAME=lab-guard
INVENTORY_FILE=$POLICY_DIR/10-outside-host.yaml
POLICY_FILE=$POLICY_DIR/20-lab-guard.yaml
# The VM's network configuration before the agent started (see vm_net_state).
VM_STATE_BEFORE=$LAB_DIR/vm-net-before.txt
NFT_TABLE=avm_lab_uplink
VM_IP4=10.99.0.2 EXT_IP4=10.99.0.1 VM_IP6=fd00:99::2 EXT_IP6=fd00:99::1
export PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"
# The original stderr and stdout, for failure messages and the exit trap even when they happen
# inside a check whose output is redirected.
exec 3>&2 4>&1

# --- output helpers --------------------------------------------------------------------------

if [[ -t 1 ]]; then
    BOLD=$'\033[1m' GREEN=$'\033[32m' RED=$'\033[31m' RESET=$'\033[0m'
else
    BOLD='' GREEN='' RED='' RESET=''
fi
section() { printf '\n%s==== %s ====%s\n' "$BOLD" "$*" "$RESET"; }
info() { printf '  %s\n' "$*"; }
ok() { printf '  %sOK%s   %s\n' "$GREEN" "$RESET" "$*"; }
fail() {
    printf '  %sFAIL%s %s\n' "$RED" "$RESET" "$*" >&3
    exit 1
}
# runas SHOWN COMMAND...: prints SHOWN as the command line, runs COMMAND with its output indented,
# and fails the demo if COMMAND fails. run COMMAND...: the same, shown as it is.
runas() {
    local shown=$1 rc=0
    shift
    printf '  $ %s\n' "$shown"
    "$@" 2>&1 | sed 's/^/    /' || rc=$?
    ((rc == 0)) || fail "exit status $rc: $shown"
}
run() { runas "$*" "$@"; }
vm() { ip netns exec "$VM_NS" "$@"; }
ext() { ip netns exec "$EXT_NS" "$@"; }

# poll SECONDS COMMAND...: runs COMMAND every 0.2 s until it succeeds (status 0) or SECONDS have
# passed (status 1).
poll() {
    local deadline=$((SECONDS + $1))
    shift
    until "$@" >/dev/null 2>&1; do
        ((SECONDS < deadline)) || return 1
        sleep 0.2
    done
}

# wait_for SECONDS DESCRIPTION COMMAND...: polls COMMAND; fails the demo if it never succeeds.
wait_for() {
    local secs=$1 what=$2
    shift 2
    poll "$secs" "$@" || fail "timed out after ${secs}s waiting for $what"
    ok "$what"
}

# explain TITLE COMMAND...: prints TITLE and COMMAND's output, indented, on the original stderr,
# to show why a check failed.
explain() {
    printf '  %s\n' "$1" >&3
    shift
    "$@" 2>&1 | sed 's/^/    /' >&3 || true
}

preflight() {
    [[ $(id -u) == 0 ]] || fail "the lab needs root (network namespaces, OVS)"
    local missing=()
    for t in ip ss nft ethtool ping nc timeout ovsdb-tool ovsdb-server ovs-vswitchd ovs-vsctl ovs-ofctl ovs-appctl; do
        command -v "$t" >/dev/null 2>&1 || missing+=("$t")
    done
    ((${#missing[@]} == 0)) || fail "missing tools: ${missing[*]} (run: make deps)"
}

vsctl() { ovs-vsctl --db="unix:$RUN_DIR/db.sock" --timeout=10 "$@"; }
# The bridge's flows as `ovs-ofctl dump-flows --names --no-stats` prints them, without its leading
# space (so that they read as `get ovsflows` prints them).
dump_flows() {
    ovs-ofctl -O OpenFlow15 --timeout=10 dump-flows --names --no-stats "unix:$RUN_DIR/br-int.mgmt" | sed 's/^ //'
}
link_exists() { vm ip link show dev "$1" >/dev/null 2>&1; }
link_driver() { vm ethtool -i "$1" 2>/dev/null | sed -n 's/^driver: //p'; }

# --- up / down -------------------------------------------------------------------------------

start_ovs() {
    local env=(env "OVS_RUNDIR=$RUN_DIR" "OVS_DBDIR=$RUN_DIR" "OVS_LOGDIR=$RUN_DIR")
    vm "${env[@]}" ovsdb-server "$RUN_DIR/conf.db" --remote="punix:$RUN_DIR/db.sock" \
        --pidfile="$RUN_DIR/ovsdb-server.pid" --unixctl="$RUN_DIR/ovsdb-server.ctl" \
        --log-file="$RUN_DIR/ovsdb-server.log" --detach --no-chdir >>"$RUN_DIR/start.log" 2>&1 3>&- 4>&- ||
        fail "ovsdb-server did not start (see $RUN_DIR/ovsdb-server.log)"
    vsctl --no-wait init -- set Open_vSwitch . \
        "ovs_version=\"$(ovs-vswitchd --version | awk 'NR==1{print $NF}')\""
    # OVS_RUNDIR makes ovs-vswitchd put <bridge>.mgmt in the run dir.
    vm "${env[@]}" ovs-vswitchd "unix:$RUN_DIR/db.sock" --pidfile="$RUN_DIR/ovs-vswitchd.pid" \
        --unixctl="$RUN_DIR/ovs-vswitchd.ctl" --log-file="$RUN_DIR/ovs-vswitchd.log" \
        --detach --no-chdir >>"$RUN_DIR/start.log" 2>&1 3>&- 4>&- ||
        fail "ovs-vswitchd did not start (see $RUN_DIR/ovs-vswitchd.log)"
}

cmd_up() {
    preflight
    if ip netns list | grep -qwE "$VM_NS|$EXT_NS"; then
        fail "the lab is already up (run: $0 down)"
    fi
    section "Creating the lab (namespaces $VM_NS and $EXT_NS, OVS in $RUN_DIR)"
    mkdir -p "$RUN_DIR" "$LAB_DIR/state"
    ip netns add "$VM_NS"
    ip netns add "$EXT_NS"
    ip link add ext0 netns "$EXT_NS" type veth peer name eth0 netns "$VM_NS"
    local no_dad="net.ipv6.conf.all.accept_dad=0 net.ipv6.conf.default.accept_dad=0"
    # shellcheck disable=SC2086
    vm sysctl -qw $no_dad net.ipv6.conf.eth0.accept_dad=0
    # shellcheck disable=SC2086
    ext sysctl -qw $no_dad net.ipv6.conf.ext0.accept_dad=0
    vm ip link set lo up
    ext ip link set lo up
    # Checksum offload off: TCP through the userspace datapath needs complete checksums.
    vm ethtool -K eth0 tx off >/dev/null
    ext ethtool -K ext0 tx off >/dev/null
    vm ip link set dev eth0 mtu 1400
    vm ip addr add "$VM_IP4/24" dev eth0
    # Without `nodad`, as a VM's own configuration has it (accept_dad=0 above already spares the
    # lab the DAD delay).
    vm ip addr add "$VM_IP6/64" dev eth0
    vm ip link set dev eth0 up
    ext ip addr add "$EXT_IP4/24" dev ext0
    ext ip addr add "$EXT_IP6/64" dev ext0 nodad
    ext ip link set dev ext0 up
    vm ip route add default via "$EXT_IP4" dev eth0 proto dhcp metric 100
    vm ip -6 route add default via "$EXT_IP6" dev eth0 metric 1024
    ovsdb-tool create "$RUN_DIR/conf.db" /usr/share/openvswitch/vswitch.ovsschema
    start_ovs
    wait_for 15 "ovs-vswitchd answers" ovs-appctl --target="$RUN_DIR/ovs-vswitchd.ctl" version
    ok "lab is up: $VM_NS ($VM_IP4, $VM_IP6) <-> $EXT_NS ($EXT_IP4, $EXT_IP6)"
    info "try: ip netns exec $VM_NS ip addr; ovs-vsctl --db=unix:$RUN_DIR/db.sock show"
}

kill_pidfile() {
    local f=$1 pid
    [[ -f $f ]] || return 0
    pid=$(cat "$f" 2>/dev/null || true)
    if [[ -n $pid ]]; then kill -9 "$pid" 2>/dev/null || true; fi
}

cmd_down() {
    [[ $(id -u) == 0 ]] || fail "the lab needs root"
    section "Removing the lab"
    kill_pidfile "$AGENT_PID"
    kill_pidfile "$RUN_DIR/ovs-vswitchd.pid"
    kill_pidfile "$RUN_DIR/ovsdb-server.pid"
    local ns pid
    for ns in "$VM_NS" "$EXT_NS"; do
        if ip netns list | grep -qw "$ns"; then
            for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
            ip netns del "$ns"
        fi
    done
    rm -rf "$LAB_DIR"
    ok "lab removed"
}

# --- demo ------------------------------------------------------------------------------------

write_config() {
    cat >"$CONFIG" <<EOF
# antrea-agent.conf for the lab (see deploy/antrea-agent.conf.sample)
nodeType: externalNode
featureGates:
  ExternalNode: true
  AntreaPolicy: true
ovsBridge: br-int
ovsDatapathType: netdev
ovsRunDir: $RUN_DIR
stateDir: $LAB_DIR/state
externalNode:
  externalNodeNamespace: vm-ns
  policyBypassRules:
  - direction: ingress
    protocol: tcp
    cidr: $EXT_IP4/32
    port: 22
standalone:
  externalNodeFile: $EN_FILE
  policyDir: $POLICY_DIR
metricsServer:
  bindAddress: "$METRICS_ADDR"
agentAPI:
  socket: $API_SOCKET
EOF
}

# fixture_names FILE IP...: the fixture deploy/lab/FILE names the lab's addresses IP...
fixture_names() {
    local file=$1 ip
    shift
    for ip in "$@"; do
        grep -qF -- "$ip" "$FIXTURES/$file" || fail "deploy/lab/$file does not name $ip, an address of the lab"
    done
}

# The ExternalNode and the inventory, from deploy/lab/.
write_external_node() {
    fixture_names external-node.yaml "$VM_IP4" "$VM_IP6"
    fixture_names policies/10-outside-host.yaml "$EXT_IP4" "$EXT_IP6"
    mkdir -p "$POLICY_DIR"
    install_file "$FIXTURES/external-node.yaml" "$EN_FILE"
    install_file "$FIXTURES/policies/10-outside-host.yaml" "$INVENTORY_FILE"
}

agent_alive() { [[ -f $AGENT_PID ]] && kill -0 "$(cat "$AGENT_PID")" 2>/dev/null; }

# The agent is attached: eth0~ exists, eth0 is the OVS internal port and carries the VM's address.
attached() {
    agent_alive || fail "the agent exited; log:$(echo; tail -n 40 "$AGENT_LOG")"
    link_exists 'eth0~' && [[ $(link_driver eth0) == tun ]] &&
        grep -q "inet $VM_IP4/24" <<<"$(vm ip -o addr show dev eth0)"
}

# The bridge has flows (fail_mode secure: none means no traffic) and the flows were committed (the
# agent records its round number on the bridge afterwards).
flows_installed() {
    agent_alive || fail "the agent exited; log:$(echo; tail -n 40 "$AGENT_LOG")"
    [[ -n $(dump_flows) ]] && vsctl get Bridge br-int external_ids:roundNum
}

# The NIC is back: no eth0~, eth0 is the veth with its address and default route.
restored() {
    ! link_exists 'eth0~' && [[ $(link_driver eth0) == veth ]] &&
        grep -q "inet $VM_IP4/24" <<<"$(vm ip -o addr show dev eth0)" &&
        grep -q "via $EXT_IP4 dev eth0" <<<"$(vm ip route show default)"
}

# The userspace datapath lets the kernel see the uplink's frames too: keep the VM's own stack off
# eth0~ (nftables netdev ingress drop; AF_PACKET, used by OVS, sees frames before that hook).
isolate_uplink() {
    vm nft delete table netdev "$NFT_TABLE" 2>/dev/null || true
    vm nft -f - <<EOF
table netdev $NFT_TABLE {
  chain uplink_in {
    type filter hook ingress device "eth0~" priority -500; policy drop;
  }
}
EOF
    vm ip link set dev 'eth0~' arp off
    vm ethtool -K eth0 tx off >/dev/null
}

unisolate_uplink() {
    vm nft delete table netdev "$NFT_TABLE" 2>/dev/null || true
    if link_exists 'eth0~'; then vm ip link set dev 'eth0~' arp on; fi
}

show_state() {
    run ip -n "$VM_NS" addr
    run ip -n "$VM_NS" route
    run ip -n "$VM_NS" -6 route
}

# The devices the switch itself creates in the VM (the bridge's own port and the userspace
# datapath's ovs-netdev): OVS keeps running after a detach, so they stay; they are not the VM's.
OVS_OWN_LINKS='br-int|ovs-netdev|ovs-system'

# vm_net_state: the VM's network configuration as a text that detach must give back exactly: eth0
# (ifindex, MAC, MTU, flags, promiscuity, qdisc, driver details), its addresses with their flags
# and lifetimes, its per-device sysctls, the routes of every table (IPv4 and IPv6, with type,
# proto, scope, source, metric and preference), the routing rules, the offloads and the list of
# links. Left out or masked, each for its reason:
# - counters (link statistics, `ip -s`): traffic moves them;
# - the neighbour tables: entries come and go with traffic and age;
# - the links of the switch itself (OVS_OWN_LINKS) and their routes: OVS outlives the detach;
# - stable_secret: unreadable until someone sets it.
# Deliberately compared although a test elsewhere might mask them: eth0's ifindex (the agent gives
# back the same device, renamed, never a new one), the address lifetimes (every address of the
# lab is permanent, "forever", so a restore that made one expire would be a bug) and the address
# flags, `nodad` included (the agent adds IPv6 addresses with it, so that they are usable at once,
# then gives them their own flags back).
vm_net_state() {
    echo "## ip -d link show dev eth0"
    vm ip -d link show dev eth0
    echo "## ip addr show dev eth0"
    vm ip addr show dev eth0
    echo "## /proc/sys/net/ipv{4,6}/conf/eth0"
    vm grep -r . /proc/sys/net/ipv4/conf/eth0 /proc/sys/net/ipv6/conf/eth0 2>/dev/null | sort || true
    echo "## ip -4 route show table all"
    vm ip -4 route show table all | { grep -Ev "dev ($OVS_OWN_LINKS)( |$)" || true; }
    echo "## ip -6 route show table all"
    vm ip -6 route show table all | { grep -Ev "dev ($OVS_OWN_LINKS)( |$)" || true; }
    echo "## ip rule, ip -6 rule"
    vm ip -4 rule show
    vm ip -6 rule show
    echo "## ethtool -k eth0"
    vm ethtool -k eth0
    echo "## links"
    vm ip -o link show | awk -F': ' '{print $2}' | sed 's/@.*//' | { grep -Evx "$OVS_OWN_LINKS" || true; } | sort
}

# check_vm_state_restored WHEN: compares the VM's network configuration with the one saved before
# the agent started; prints the difference and fails on any.
check_vm_state_restored() {
    local now=$LAB_DIR/vm-net-now.txt
    vm_net_state >"$now" || fail "could not read the VM's network configuration"
    if ! diff -u --label "before the agent" --label "$1" "$VM_STATE_BEFORE" "$now" >"$LAB_DIR/vm-net.diff"; then
        sed 's/^/    /' "$LAB_DIR/vm-net.diff" >&3
        fail "the VM's network configuration $1 differs from before the agent (diff above)"
    fi
    ok "the VM's network configuration $1 is exactly as before the agent ($(grep -c . "$now") lines compared)"
}

ping_check() { # FROM(ext|vm) TARGET
    local from=$1 target=$2 ns=$VM_NS out
    [[ $from == ext ]] && ns=$EXT_NS
    out=$(ip netns exec "$ns" ping -n -q -c 3 -i 0.2 -W 1 "$target" 2>&1 || true)
    if grep -q ' 3 received' <<<"$out" && ! grep -q duplicates <<<"$out"; then
        ok "ping $from -> $target: 3/3"
    else
        fail "ping $from -> $target: $(grep -m1 transmitted <<<"$out" || echo "$out")"
    fi
}

# tcp_try SERVER_NS CLIENT_NS IP PORT: listens with nc in SERVER_NS, connects from CLIENT_NS and
# sends a token; succeeds if the token arrived.
tcp_try() {
    local server=$1 client=$2 ip=$3 port=$4 token out=$LAB_DIR/tcp.out pid
    token="avm-demo-$RANDOM$RANDOM"
    ip netns exec "$server" nc -l -n "$ip" "$port" </dev/null >"$out" 2>/dev/null 3>&- 4>&- &
    pid=$!
    local deadline=$((SECONDS + 10))
    until ip netns exec "$server" ss -Hltn "sport = :$port" | grep -q .; do
        ((SECONDS < deadline)) || fail "nc did not listen on $ip port $port"
        sleep 0.1
    done
    printf '%s' "$token" | ip netns exec "$client" timeout 10 nc -n -N -w 3 "$ip" "$port" || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    grep -q "$token" "$out"
}

tcp_check() { # SERVER_NS CLIENT_NS IP PORT
    if tcp_try "$@" 2>/dev/null; then
        ok "TCP $2 -> $3:$4"
    else
        fail "TCP $2 -> $3:$4: no data arrived"
    fi
}

tcp_blocked() { # SERVER_NS CLIENT_NS IP PORT
    if tcp_try "$@" 2>/dev/null; then
        fail "TCP $2 -> $3:$4 went through, but the policy should drop it"
    else
        ok "TCP $2 -> $3:$4 is blocked"
    fi
}

# --- the NetworkPolicy part of the demo ------------------------------------------------------

agent_get() { vm "$AGENT_BIN" get "$@" --socket "$API_SOCKET"; }
# run_get ARGS...: `antrea-vm-agent get ARGS`, shown and checked.
run_get() { runas "antrea-vm-agent get $* --socket $API_SOCKET" agent_get "$@"; }

# install_file SRC DEST: copies through a temporary name and a rename, so the agent's directory
# watcher never reads a half-written file.
install_file() {
    cp "$1" "$2.tmp"
    mv "$2.tmp" "$2"
}

# show_file FILE: prints FILE, indented, under its name.
show_file() {
    info "$1:"
    sed 's/^/    /' "$1"
}

# GET /metrics from inside the VM namespace (the listener is on its loopback): plain HTTP/1.0
# through nc, headers stripped.
scrape_metrics() {
    printf 'GET /metrics HTTP/1.0\r\nHost: %s\r\n\r\n' "$METRICS_ADDR" |
        vm nc -N -w 5 "${METRICS_ADDR%:*}" "${METRICS_ADDR##*:}" | sed '1,/^\r\{0,1\}$/d'
}

# The demo policy's per-rule series.
rule_metrics() { scrape_metrics | grep '^antrea_vm_agent_rule_' | grep "policy_name=\"$POLICY_NAME\"" || true; }

# rule_counter FAMILY RULE: the value of antrea_vm_agent_rule_FAMILY_total for RULE (empty if absent).
rule_counter() {
    rule_metrics | grep "^antrea_vm_agent_rule_$1_total{" | grep "rule_name=\"$2\"" | awk '{print $NF}'
}

# The policy's own flows. The agent names them: `get ovsflows --policy` lists the flows of the
# policy's rules (recognized by the rules' conjunction ids) and those ids. What the agent believes
# is not proof, so the checks below read the bridge itself (ovs-ofctl) and look there for the
# flows that carry those ids; cookies cannot tell policies apart (every NetworkPolicy flow has the
# same cookie, as in antrea-agent), and a global pattern such as `conj_id=` also matches the DNS
# interception conjunction the agent installs at start.
POLICY_IDS=()
POLICY_FLOWS_FILE=$LAB_DIR/policy-flows.txt
PIPELINE_FILE=$LAB_DIR/pipeline-without-policy.txt

# record_policy_flows: keeps the policy's conjunction ids (POLICY_IDS) and flows as the agent
# lists them; fails until the agent knows the policy and lists at least one flow for it.
record_policy_flows() {
    local json
    json=$(agent_get ovsflows --policy "$POLICY_NAME" -o json) || return 1
    mapfile -t POLICY_IDS < <(tr -d ' \n' <<<"$json" | grep -o '"conjunctionIds":\[[0-9,]*\]' | grep -o '[0-9][0-9]*')
    # One id per rule, none of them the DNS interception's (1), which is not the policy's.
    ((${#POLICY_IDS[@]} == 2)) && [[ " ${POLICY_IDS[*]} " != *" 1 "* ]] || return 1
    agent_get ovsflows --policy "$POLICY_NAME" >"$POLICY_FLOWS_FILE.tmp" || return 1
    [[ -s $POLICY_FLOWS_FILE.tmp ]] || return 1
    mv "$POLICY_FLOWS_FILE.tmp" "$POLICY_FLOWS_FILE"
}

# bridge_flows_of IDS...: the flows on the bridge that belong to the rules with these conjunction
# ids, found the way `get ovsflows --policy` finds them: the action flow (`conj_id=N`), the clause
# flows (`conjunction(N,k/n)`), and the metric flows (the id in reg3 for Drop/Reject rules, in
# ct_label for Allow rules: bits 0-31 ingress, 32-63 egress).
bridge_flows_of() {
    local flows
    flows=$(dump_flows) || return 1
    awk -v ids="$*" '
        BEGIN { n = split(ids, list, " "); for (i = 1; i <= n; i++) {
            id = list[i] + 0; hex = sprintf("0x%x", id)
            pat[++k] = "conj_id=" id "([, ]|$)"
            pat[++k] = "conjunction\\(" id ","
            pat[++k] = "reg3=(" id "|" hex ")([, ]|$)"
            pat[++k] = "ct_label=" hex "/0xffffffff([, ]|$)"
            pat[++k] = "ct_label=" hex "00000000/0xffffffff00000000([, ]|$)"
        } }
        { for (i = 1; i <= k; i++) if ($0 ~ pat[i]) { print; next } }' <<<"$flows"
}

# The bridge holds the policy: an action flow and a clause flow for each of its rules, and every
# flow the agent lists for it, as `ovs-ofctl dump-flows` prints it.
policy_flows_on_bridge() {
    local id on_bridge
    on_bridge=$(bridge_flows_of "${POLICY_IDS[@]}") || return 1
    for id in "${POLICY_IDS[@]}"; do
        grep -Eq "conj_id=$id([, ]|$)" <<<"$on_bridge" || return 1
        grep -q "conjunction($id," <<<"$on_bridge" || return 1
    done
    [[ -z $(missing_policy_flows) ]]
}

# The flows the agent lists for the policy that the bridge does not hold (round and counters are
# not in either text: --no-stats).
missing_policy_flows() {
    local flows
    flows=$(dump_flows) || return 1
    grep -vxF -f <(printf '%s\n' "$flows") "$POLICY_FLOWS_FILE" || true
}

# policy_flow_count: how many flows on the bridge carry the policy's conjunction ids.
policy_flow_count() {
    local flows
    flows=$(bridge_flows_of "${POLICY_IDS[@]}") || return 1
    grep -c . <<<"$flows" || true
}
policy_flows_removed() {
    local n
    n=$(policy_flow_count) && ((n == 0))
}

# The pipeline as it was before the policy: every flow on the bridge. After the removal it must
# be back exactly, which keeps the DNS interception and every other feature's flows in view.
save_pipeline() { dump_flows | sort >"$PIPELINE_FILE"; }
pipeline_restored() { diff -u "$PIPELINE_FILE" <(dump_flows | sort) >/dev/null; }

# The DNS interception conjunction the agent installs at start (as antrea-agent does): its action
# flow, conjunction 1 at priority 64991, and its clause flows.
dns_interception_present() {
    local flows
    flows=$(bridge_flows_of 1) || return 1
    grep -Eq 'priority=64991,conj_id=1([, ]|$)' <<<"$flows" && grep -q 'conjunction(1,' <<<"$flows"
}

# The output is read into a variable first: with pipefail, `grep -q` leaving early could make the
# writer fail with SIGPIPE, and a negated check pass.
policy_listed() {
    local out
    out=$(agent_get networkpolicy) && grep -q "AntreaNetworkPolicy:vm-ns/$POLICY_NAME" <<<"$out"
}
policy_unlisted() {
    local out
    out=$(agent_get networkpolicy) && ! grep -q "AntreaNetworkPolicy:vm-ns/$POLICY_NAME" <<<"$out"
}

# Both rules are reported in /metrics.
rules_reported() { [[ -n $(rule_counter packets drop-8080) && -n $(rule_counter packets allow-icmp) ]]; }
# None of the policy's series is left, on a page that was scraped (it has the agent's other series).
rules_unreported() {
    local page
    page=$(scrape_metrics) && grep -q '^antrea_vm_agent_' <<<"$page" &&
        ! grep -q "policy_name=\"$POLICY_NAME\"" <<<"$page"
}
# counters_settled DROPPED ALLOWED: the counters reached at least what the traffic produced and
# stay put for a second (the userspace datapath pushes its counts to the OpenFlow rules about
# every half second, so a reading may lag the traffic).
counters_settled() {
    local drop icmp
    drop=$(rule_counter packets drop-8080)
    icmp=$(rule_counter packets allow-icmp)
    sleep 1
    [[ $drop == "$(rule_counter packets drop-8080)" && $icmp == "$(rule_counter packets allow-icmp)" ]] &&
        ((${drop:-0} >= $1 && ${icmp:-0} >= $2))
}

section_policy() {
    section "An Antrea NetworkPolicy in the policy directory: drop TCP 8080 from the outside host, allow ICMP"
    # Before any policy the bridge already has a conjunction: a count of every `conj_id=` flow
    # would never reach zero, which is why the checks below look at the policy's own flows.
    dns_interception_present || fail "the DNS interception conjunction is not on the bridge"
    ok "before the policy: the pipeline's own conjunction (DNS interception, conjunction 1) is installed"
    save_pipeline
    info "the YAML a user writes (the inventory $INVENTORY_FILE is already there):"
    install_file "$FIXTURES/policies/${POLICY_FILE##*/}" "$POLICY_FILE"
    show_file "$POLICY_FILE"
    info "what the agent's local controller makes of the directory, as antrea-controller would:"
    runas "antrea-vm-agent translate $POLICY_DIR --external-node $EN_FILE" \
        "$AGENT_BIN" translate "$POLICY_DIR" --external-node "$EN_FILE"
    wait_for 30 "get networkpolicy lists $POLICY_NAME" policy_listed
    wait_for 30 "get ovsflows --policy $POLICY_NAME names the policy's two rules and their flows" record_policy_flows
    info "the policy's conjunction ids: ${POLICY_IDS[*]}"
    local what="the bridge holds every flow of $POLICY_NAME (an action and a clause flow per rule)"
    if ! poll 30 policy_flows_on_bridge; then
        explain "flows of conjunctions ${POLICY_IDS[*]} on the bridge:" bridge_flows_of "${POLICY_IDS[@]}"
        explain "flows get ovsflows lists that the bridge lacks:" missing_policy_flows
        fail "timed out after 30s waiting for $what"
    fi
    ok "$what"
    run_get ovsflows --policy "$POLICY_NAME"
    wait_for 30 "/metrics reports the policy's rules" rules_reported
    info "per-rule counters in /metrics (http://$METRICS_ADDR/metrics in $VM_NS) before traffic:"
    rule_metrics | sed 's/^/    /'
    [[ $(rule_counter packets drop-8080) == 0 && $(rule_counter packets allow-icmp) == 0 ]] ||
        fail "the rules counted packets before any traffic"

    section "Traffic under the policy"
    # Each blocked connection must be counted by drop-8080: a connection that failed for any
    # other reason would not move the rule's counter.
    local dropped
    tcp_blocked "$VM_NS" "$EXT_NS" "$VM_IP4" 8080
    wait_for 15 "drop-8080 counted the IPv4 connection's SYNs" counters_settled 1 0
    dropped=$(rule_counter packets drop-8080)
    tcp_blocked "$VM_NS" "$EXT_NS" "$VM_IP6" 8080
    wait_for 15 "drop-8080 counted the IPv6 connection's SYNs too" counters_settled $((dropped + 1)) 0
    tcp_check "$VM_NS" "$EXT_NS" "$VM_IP4" 8081
    tcp_check "$VM_NS" "$EXT_NS" "$VM_IP6" 8081
    ping_check ext "$VM_IP4"
    # 3 pings: 3 requests and 3 replies.
    wait_for 15 "the per-rule counters moved and settled" counters_settled $((dropped + 1)) 6
    info "per-rule counters in /metrics after traffic:"
    rule_metrics | sed 's/^/    /'
    local sessions
    sessions=$(rule_counter sessions allow-icmp)
    [[ $sessions == 1 ]] || fail "allow-icmp: one ping run should be one session, /metrics says $sessions"
    ok "drop-8080 counted $(rule_counter packets drop-8080) dropped packets, allow-icmp $(rule_counter packets allow-icmp) packets in 1 session"

    section "The policy through the agent API ($API_SOCKET)"
    local out
    run_get networkpolicy
    run_get networkpolicy "$POLICY_NAME"
    out=$(agent_get networkpolicy "$POLICY_NAME") || fail "get networkpolicy $POLICY_NAME failed"
    # The RULE row's last three columns are PACKETS BYTES SESSIONS.
    local rule want
    for rule in drop-8080 allow-icmp; do
        want="$(rule_counter packets "$rule") $(rule_counter bytes "$rule") $(rule_counter sessions "$rule")"
        awk -v r="$rule" -v w="$want" '$1 == r && $(NF-2) " " $(NF-1) " " $NF == w {found=1} END {exit !found}' <<<"$out" ||
            fail "get networkpolicy $POLICY_NAME does not show $rule's counters from /metrics ($want)"
        ok "$rule: packets, bytes, sessions = $want in /metrics and in get networkpolicy"
    done

    section "Removing the policy"
    rm -f "$POLICY_FILE"
    info "removed $POLICY_FILE"
    what="no flow of $POLICY_NAME is left on the bridge (conjunction ids ${POLICY_IDS[*]})"
    if ! poll 30 policy_flows_removed; then
        explain "flows of conjunctions ${POLICY_IDS[*]} still on the bridge:" bridge_flows_of "${POLICY_IDS[@]}"
        fail "timed out after 30s waiting for $what"
    fi
    ok "$what"
    wait_for 30 "get networkpolicy no longer lists $POLICY_NAME" policy_unlisted
    wait_for 30 "its per-rule series are gone from /metrics" rules_unreported
    if ! pipeline_restored; then
        diff -u --label "before the policy" --label "now" "$PIPELINE_FILE" <(dump_flows | sort) |
            sed 's/^/    /' >&3 || true
        fail "the bridge's flows differ from those before the policy (diff above)"
    fi
    ok "the rest of the pipeline is as before the policy ($(grep -c . "$PIPELINE_FILE") flows)"
    dns_interception_present || fail "the DNS interception flows are gone"
    ok "the DNS interception conjunction is still installed"
    tcp_check "$VM_NS" "$EXT_NS" "$VM_IP4" 8080
    tcp_check "$VM_NS" "$EXT_NS" "$VM_IP6" 8080
    ping_check ext "$VM_IP4"
}

stop_agent() {
    agent_alive || return 0
    local pid
    pid=$(cat "$AGENT_PID")
    kill -TERM "$pid"
    for _ in $(seq 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    if kill -0 "$pid" 2>/dev/null; then
        kill -9 "$pid"
        fail "the agent did not exit within 30 s of SIGTERM"
    fi
    wait "$pid" 2>/dev/null || true
    rm -f "$AGENT_PID"
}

demo_exit() {
    local rc=$?
    exec 1>&4 2>&3
    if ((rc != 0)); then
        section "DEMO FAILED (exit $rc)"
        if [[ -f $AGENT_LOG ]]; then
            info "last lines of the agent log ($AGENT_LOG):"
            tail -n 40 "$AGENT_LOG" | sed 's/^/    /'
        fi
    fi
    if [[ ${AVM_LAB_KEEP:-} == 1 ]]; then
        info "AVM_LAB_KEEP=1: the lab stays up; remove it with: $0 down"
    else
        cmd_down >/dev/null 2>&1 || true
    fi
    exit "$rc"
}

cmd_demo() {
    preflight
    section "Building the agent"
    if [[ ${AVM_SKIP_BUILD:-} != 1 ]]; then
        (cd "$REPO" && "${CARGO:-cargo}" build --bin antrea-vm-agent) || fail "cargo build failed"
    fi
    [[ -x $AGENT_BIN ]] || fail "no agent binary at $AGENT_BIN"
    ok "$AGENT_BIN"

    cmd_down >/dev/null 2>&1 || true
    trap demo_exit EXIT
    local started=$SECONDS
    cmd_up

    section "The VM before the agent"
    show_state
    vm_net_state >"$VM_STATE_BEFORE" || fail "could not read the VM's network configuration"
    info "saved its network configuration in $VM_STATE_BEFORE: eth0's link, addresses, sysctls and"
    info "offloads, the routes of every table, the routing rules and the links. The detach must give"
    info "it back exactly (not compared: counters and neighbours)."
    ping_check ext "$VM_IP4"
    ping_check ext "$VM_IP6"

    section "Configuration"
    write_config
    write_external_node
    info "config $CONFIG:"
    sed 's/^/    /' "$CONFIG"
    show_file "$EN_FILE"
    show_file "$INVENTORY_FILE"
    runas "NODE_NAME=vm1 antrea-vm-agent check-config --config $CONFIG" \
        vm env NODE_NAME=vm1 "$AGENT_BIN" check-config --config "$CONFIG"

    section "Starting the agent in $VM_NS (standalone mode)"
    vm env NODE_NAME=vm1 "$AGENT_BIN" run --config "$CONFIG" >"$AGENT_LOG" 2>&1 3>&- 4>&- &
    echo $! >"$AGENT_PID"
    info "pid $(cat "$AGENT_PID"), log $AGENT_LOG"
    wait_for 60 "the agent attached eth0 to OVS (eth0~ is the uplink)" attached
    isolate_uplink
    ok "uplink isolated (lab only: nftables drop on eth0~, ARP off)"
    wait_for 30 "the agent installed its flows" flows_installed

    section "The VM attached to OVS"
    show_state
    runas "ovs-vsctl show" vsctl show
    section "OpenFlow flows on br-int"
    runas "ovs-ofctl dump-flows --names --no-stats br-int" dump_flows

    section "Traffic from the outside host through OVS"
    ping_check ext "$VM_IP4"
    ping_check ext "$VM_IP6"
    ping_check vm "$EXT_IP4"
    ping_check vm "$EXT_IP6"
    tcp_check "$VM_NS" "$EXT_NS" "$VM_IP4" 8080
    tcp_check "$VM_NS" "$EXT_NS" "$VM_IP6" 8080
    tcp_check "$VM_NS" "$EXT_NS" "$VM_IP4" 22
    tcp_check "$EXT_NS" "$VM_NS" "$EXT_IP4" 8081

    section_policy

    section "Deleting the ExternalNode (detach)"
    unisolate_uplink
    rm -f "$EN_FILE"
    info "removed $EN_FILE"
    wait_for 60 "eth0 restored (eth0~ gone, addresses and default route back)" restored
    agent_alive || fail "the agent exited after the detach"
    show_state
    runas "ovs-vsctl show" vsctl show
    check_vm_state_restored "after the detach"
    ping_check ext "$VM_IP4"
    ping_check ext "$VM_IP6"
    tcp_check "$VM_NS" "$EXT_NS" "$VM_IP4" 8080

    section "Stopping the agent"
    stop_agent
    ok "agent stopped"
    check_vm_state_restored "after the agent stopped"

    section "DEMO OK: every check passed ($((SECONDS - started)) s after the build)"
}

case ${1:-} in
up) cmd_up ;;
down) cmd_down ;;
demo) cmd_demo ;;
*)
    echo "usage: $0 up|down|demo" >&2
    exit 2
    ;;
esac
