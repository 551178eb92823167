#!/usr/bin/env bash
# deploy/lab.sh: a VM on this machine, for trying antrea-vm-agent by hand.
#
#   deploy/lab.sh up      build the lab: namespaces avm-vm (the "VM") and avm-ext (an outside host)
#                         joined by a veth pair, and a private Open vSwitch (userspace datapath)
#                         inside avm-vm with its sockets in /tmp/antrea-vm-lab/run
#   deploy/lab.sh down    remove everything `up` and `demo` created
#   deploy/lab.sh demo    build the agent, bring the lab up, attach the VM's eth0 to OVS with the
#                         agent (standalone mode), show the result, test traffic, enforce a
#                         NetworkPolicy and watch its per-rule counters in /metrics and through
#                         `antrea-vm-agent get`, remove it, detach, tear down
#
# Topology:
#   avm-ext: ext0 10.99.0.1/24 fd00:99::1/64  <--veth-->  avm-vm: eth0 10.99.0.2/24 fd00:99::2/64
#            MTU 1400, default via 10.99.0.1 (proto dhcp, metric 100), default via fd00:99::1
#
# Needs root and: openvswitch-switch iproute2 nftables ethtool iputils-ping netcat-openbsd
# (`make deps`). Environment: AVM_LAB_DIR (default /tmp/antrea-vm-lab), AGENT_BIN (default
# target/debug/antrea-vm-agent), AVM_SKIP_BUILD=1 (demo: use AGENT_BIN as it is), AVM_LAB_KEEP=1
# (demo: leave the lab up at the end).
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
# The demo's NetworkPolicy: an AntreaNetworkPolicy vm-ns/lab-guard, and its rules.
POLICY_NAME=lab-guard
POLICY_FILE=$POLICY_DIR/20-lab-guard.yaml
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
run() { printf '  $ %s\n' "$*"; "$@" 2>&1 | sed 's/^/    /'; }
vm() { ip netns exec "$VM_NS" "$@"; }
ext() { ip netns exec "$EXT_NS" "$@"; }

# wait_for SECONDS DESCRIPTION COMMAND...: polls COMMAND every 0.2 s.
wait_for() {
    local secs=$1 what=$2
    shift 2
    local deadline=$((SECONDS + secs))
    until "$@" >/dev/null 2>&1; do
        if ((SECONDS >= deadline)); then
            fail "timed out after ${secs}s waiting for $what"
        fi
        sleep 0.2
    done
    ok "$what"
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
dump_flows() { ovs-ofctl -O OpenFlow15 --timeout=10 dump-flows --names --no-stats "unix:$RUN_DIR/br-int.mgmt"; }
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
    vm ip addr add "$VM_IP6/64" dev eth0 nodad
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

write_external_node() {
    cat >"$EN_FILE.tmp" <<EOF
apiVersion: crd.antrea.io/v1alpha1
kind: ExternalNode
metadata:
  name: vm1
  namespace: vm-ns
  labels:
    antrea-external-node: vm1
spec:
  interfaces:
  - name: eth0
    ips: ["$VM_IP4", "$VM_IP6"]
EOF
    mv "$EN_FILE.tmp" "$EN_FILE"
}

agent_alive() { [[ -f $AGENT_PID ]] && kill -0 "$(cat "$AGENT_PID")" 2>/dev/null; }

# The agent is attached: eth0~ exists, eth0 is the OVS internal port and carries the VM's address.
attached() {
    agent_alive || fail "the agent exited; log:$(echo; tail -n 40 "$AGENT_LOG")"
    link_exists 'eth0~' && [[ $(link_driver eth0) == tun ]] &&
        vm ip -o addr show dev eth0 | grep -q "inet $VM_IP4/24"
}

# The bridge has flows (fail_mode secure: none means no traffic) and the flows were committed (the
# agent records its round number on the bridge afterwards).
flows_installed() {
    agent_alive || fail "the agent exited; log:$(echo; tail -n 40 "$AGENT_LOG")"
    dump_flows | grep -q . && vsctl get Bridge br-int external_ids:roundNum
}

# The NIC is back: no eth0~, eth0 is the veth with its address and default route.
restored() {
    ! link_exists 'eth0~' && [[ $(link_driver eth0) == veth ]] &&
        vm ip -o addr show dev eth0 | grep -q "inet $VM_IP4/24" &&
        vm ip route show default | grep -q "via $EXT_IP4 dev eth0"
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

# The AppliedToGroup of vm1's eth0 (its ExternalEntity is vm1-<first 5 hex digits of sha1("eth0")>)
# and the policy, as antrea-controller would send them (controlplane.antrea.io/v1beta2).
write_policy() {
    mkdir -p "$POLICY_DIR"
    cat >"$POLICY_DIR/.atg.tmp" <<EOF
apiVersion: controlplane.antrea.io/v1beta2
kind: AppliedToGroup
metadata: {name: atg-vm1}
groupMembers: [{externalEntity: {name: vm1-3e616, namespace: vm-ns}}]
EOF
    mv "$POLICY_DIR/.atg.tmp" "$POLICY_DIR/10-atg-vm1.yaml"
    cat >"$POLICY_DIR/.policy.tmp" <<EOF
apiVersion: controlplane.antrea.io/v1beta2
kind: NetworkPolicy
metadata: {name: uid-$POLICY_NAME, uid: uid-$POLICY_NAME, generation: 1}
sourceRef: {type: AntreaNetworkPolicy, namespace: vm-ns, name: $POLICY_NAME, uid: uid-$POLICY_NAME}
appliedToGroups: [atg-vm1]
priority: 5
tierPriority: 250
rules:
- name: drop-8080
  direction: In
  from: {ipBlocks: [{cidr: $EXT_IP4/32}, {cidr: "$EXT_IP6/128"}]}
  services: [{protocol: TCP, port: 8080}]
  action: Drop
  priority: 0
- name: allow-icmp
  direction: In
  from: {ipBlocks: [{cidr: $EXT_IP4/32}]}
  services: [{protocol: ICMP}]
  action: Allow
  priority: 1
EOF
    mv "$POLICY_DIR/.policy.tmp" "$POLICY_FILE"
}

agent_get() { vm "$AGENT_BIN" get "$@" --socket "$API_SOCKET"; }

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

# The flows are read into a variable first: with pipefail, `grep -q` leaving early would make
# the dump fail with SIGPIPE, and a negated check pass.
conj_flow_count() {
    local flows
    flows=$(dump_flows) || return 1
    grep -c 'conj_id=' <<<"$flows" || true
}
policy_flows_installed() { (($(conj_flow_count) > 0)); }
policy_flows_removed() {
    local n
    n=$(conj_flow_count) && ((n == 0))
}
# Both rules are reported in /metrics.
rules_reported() { [[ -n $(rule_counter packets drop-8080) && -n $(rule_counter packets allow-icmp) ]]; }
rules_unreported() { [[ -z $(rule_metrics) ]]; }
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
    section "A NetworkPolicy from the policy directory: drop TCP 8080 from the outside host, allow ICMP"
    write_policy
    info "$POLICY_FILE:"
    sed 's/^/    /' "$POLICY_FILE"
    wait_for 30 "the policy's conjunctive flows are installed" policy_flows_installed
    wait_for 30 "/metrics reports the policy's rules" rules_reported
    info "per-rule counters in /metrics (http://$METRICS_ADDR/metrics in $VM_NS) before traffic:"
    rule_metrics | sed 's/^/    /'
    [[ $(rule_counter packets drop-8080) == 0 && $(rule_counter packets allow-icmp) == 0 ]] ||
        fail "the rules counted packets before any traffic"

    section "Traffic under the policy"
    tcp_blocked "$VM_NS" "$EXT_NS" "$VM_IP4" 8080
    tcp_blocked "$VM_NS" "$EXT_NS" "$VM_IP6" 8080
    tcp_check "$VM_NS" "$EXT_NS" "$VM_IP4" 8081
    ping_check ext "$VM_IP4"
    # Two blocked connections: at least one SYN each; 3 pings: 3 requests and 3 replies.
    wait_for 15 "the per-rule counters moved and settled" counters_settled 2 6
    info "per-rule counters in /metrics after traffic:"
    rule_metrics | sed 's/^/    /'
    local sessions
    sessions=$(rule_counter sessions allow-icmp)
    [[ $sessions == 1 ]] || fail "allow-icmp: one ping run should be one session, /metrics says $sessions"
    ok "drop-8080 counted $(rule_counter packets drop-8080) dropped packets, allow-icmp $(rule_counter packets allow-icmp) packets in 1 session"

    section "The policy through the agent API ($API_SOCKET)"
    local out
    run agent_get networkpolicy
    out=$(agent_get networkpolicy) || fail "get networkpolicy failed"
    grep -q "AntreaNetworkPolicy:vm-ns/$POLICY_NAME" <<<"$out" ||
        fail "get networkpolicy does not list $POLICY_NAME"
    run agent_get networkpolicy "$POLICY_NAME"
    out=$(agent_get networkpolicy "$POLICY_NAME") || fail "get networkpolicy $POLICY_NAME failed"
    # The RULE row's last three columns are PACKETS BYTES SESSIONS.
    local rule want
    for rule in drop-8080 allow-icmp; do
        want="$(rule_counter packets "$rule") $(rule_counter bytes "$rule") $(rule_counter sessions "$rule")"
        awk -v r="$rule" -v w="$want" '$1 == r && $(NF-2) " " $(NF-1) " " $NF == w {found=1} END {exit !found}' <<<"$out" ||
            fail "get networkpolicy $POLICY_NAME does not show $rule's counters from /metrics ($want)"
    done
    ok "get networkpolicy $POLICY_NAME shows the same packets, bytes and sessions as /metrics"
    run agent_get ovsflows --policy "$POLICY_NAME"
    out=$(agent_get ovsflows --policy "$POLICY_NAME") || fail "get ovsflows --policy $POLICY_NAME failed"
    grep -q 'conjunction(' <<<"$out" || fail "get ovsflows --policy $POLICY_NAME shows no conjunctive flow"

    section "Removing the policy"
    rm -f "$POLICY_FILE"
    info "removed $POLICY_FILE"
    wait_for 30 "the policy's flows are removed" policy_flows_removed
    wait_for 30 "its per-rule series are gone from /metrics" rules_unreported
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
        (cd "$REPO" && cargo build) || fail "cargo build failed"
    fi
    [[ -x $AGENT_BIN ]] || fail "no agent binary at $AGENT_BIN"
    ok "$AGENT_BIN"

    cmd_down >/dev/null 2>&1 || true
    trap demo_exit EXIT
    cmd_up

    section "The VM before the agent"
    show_state
    ping_check ext "$VM_IP4"
    ping_check ext "$VM_IP6"

    section "Configuration"
    write_config
    write_external_node
    info "config $CONFIG:"
    sed 's/^/    /' "$CONFIG"
    info "ExternalNode $EN_FILE:"
    sed 's/^/    /' "$EN_FILE"
    run vm env NODE_NAME=vm1 "$AGENT_BIN" check-config --config "$CONFIG"

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
    run vsctl show
    section "OpenFlow flows on br-int"
    run dump_flows

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
    run vsctl show
    ping_check ext "$VM_IP4"
    ping_check ext "$VM_IP6"
    tcp_check "$VM_NS" "$EXT_NS" "$VM_IP4" 8080

    section "Stopping the agent"
    stop_agent
    ok "agent stopped"

    section "DEMO OK"
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
