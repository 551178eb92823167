#!/usr/bin/env bash
# install-vm.sh: install, update or remove antrea-vm-agent on a VM or bare-metal server.
#
# It takes the Go agent installer's options (hack/externalnode/install-vm.sh) and keeps the Go
# agent's layout, so the same kubeconfigs and config work:
#
#   /etc/antrea/antrea-agent.conf                  the config (kubeconfig paths made absolute)
#   /etc/antrea/antrea-agent.kubeconfig            --kubeconfig (mode 0600)
#   /etc/antrea/antrea-agent.antrea.kubeconfig     --antrea-kubeconfig (mode 0600)
#   /etc/antrea/antrea-vm-agent.env                NODE_NAME=<--nodename>
#   /usr/sbin/antrea-vm-agent                      --bin
#   /etc/systemd/system/antrea-vm-agent.service    systemd/antrea-vm-agent.service (next to this script)
#   /var/log/antrea, /var/lib/antrea-vm-agent      the agent's log and state directories
#
# No logrotate file: the agent rotates its own log (--log_file_max_size, --log_file_max_num), as the
# Go agent's klog does. An /etc/logrotate.d/antrea-vm-agent that an earlier version of this script
# installed is removed on update (the host's own file, if it had one, is put back).
#
# Every path it creates is listed in /etc/antrea/antrea-vm-agent.manifest, and every file it had to
# replace is kept as <file>.pre-antrea-vm-agent, so --uninstall puts the host back as it found it.
# It is idempotent: a re-run with the same inputs changes nothing and says so; a re-run with a new
# binary or config updates what differs and restarts the agent.
#
# Run `install-vm.sh --help` for the options. Exit status: 0 done, 1 failed, 2 bad command line.

set -euo pipefail

readonly PROG=install-vm.sh
SELF_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
readonly SELF_DIR

# The layout, as seen from inside --root.
readonly ETC_DIR=/etc/antrea
readonly CONF=/etc/antrea/antrea-agent.conf
readonly KUBECONFIG_DST=/etc/antrea/antrea-agent.kubeconfig
readonly ANTREA_KUBECONFIG_DST=/etc/antrea/antrea-agent.antrea.kubeconfig
readonly ENV_FILE=/etc/antrea/antrea-vm-agent.env
readonly MANIFEST=/etc/antrea/antrea-vm-agent.manifest
readonly BIN_DST=/usr/sbin/antrea-vm-agent
readonly UNIT=antrea-vm-agent.service
readonly UNIT_DST=/etc/systemd/system/antrea-vm-agent.service
# Installed by earlier versions only; removed on update and uninstall (retire_logrotate).
readonly OLD_LOGROTATE_DST=/etc/logrotate.d/antrea-vm-agent
readonly LOG_DIR=/var/log/antrea
readonly DEFAULT_STATE_DIR=/var/lib/antrea-vm-agent
readonly GO_AGENT_UNIT=antrea-agent.service
readonly BACKUP_SUFFIX=.pre-antrea-vm-agent

readonly UNIT_SRC=$SELF_DIR/systemd/antrea-vm-agent.service

# How long --uninstall waits for a standalone agent to restore the interfaces (seconds).
DETACH_TIMEOUT=${ANTREA_VM_AGENT_DETACH_TIMEOUT:-60}
# The systemctl to call; tests point it (or PATH) at a fake.
SYSTEMCTL=${SYSTEMCTL:-systemctl}

usage() {
  cat <<EOF
Usage:
  $PROG --config FILE --bin FILE [--kubeconfig FILE --antrea-kubeconfig FILE] [options]
  $PROG --uninstall [--force] [--purge] [options]

Install (or update) antrea-vm-agent as the systemd service $UNIT.

Install options:
  --config FILE             antrea-agent.conf (nodeType: externalNode); validated with
                            'antrea-vm-agent check-config' before anything is changed
  --bin FILE                the antrea-vm-agent binary
  --kubeconfig FILE         kubeconfig for kube-apiserver     } required unless the config runs
  --antrea-kubeconfig FILE  kubeconfig for antrea-controller  } standalone (a 'standalone:' section)
  --ns NAMESPACE            the ExternalNode's Namespace (sets externalNode.externalNodeNamespace)
  --nodename NAME           the ExternalNode's name, NODE_NAME (default: this host's name)
  --ovs-bridge NAME         the OVS bridge (sets ovsBridge; default: as in the config, br-int)

Uninstall options:
  --uninstall               stop and disable the agent, restore the interfaces it attached (see
                            below), and remove every file the installer created
  --force                   uninstall even when interfaces are still attached and cannot be
                            restored (they stay on OVS; the agent's records are kept)
  --purge                   also delete the agent's state and logs (kept by default)

Common options:
  --root DIR                act on the file tree under DIR instead of / (tests, image staging)
  --dry-run                 print each action, change nothing
  --no-systemd              do not call systemctl (files only; start the agent yourself)
  -h, --help                this text

Environment: SYSTEMCTL (the systemctl to run), ANTREA_VM_AGENT_DETACH_TIMEOUT (seconds, default 60).

Restoring interfaces: the agent puts a NIC back when its ExternalNode goes away. On --uninstall, if
interfaces are attached: with a 'standalone.externalNodeFile' and the agent running, the file is
moved aside to <file>.uninstalled and the installer waits until the agent has restored them; with
Kubernetes, delete the ExternalNode (kubectl -n NS delete externalnode NAME), wait for the agent to
restore the interfaces, then run --uninstall.
EOF
}

usage_error() {
  echo "$PROG: $*" >&2
  echo "Try '$PROG --help'." >&2
  exit 2
}

fail() {
  echo "$PROG: error: $*" >&2
  exit 1
}

note() {
  echo "$PROG: $*"
}

# ---------------------------------------------------------------------------------------------
# Command line

CONFIG_SRC=""
BIN_SRC=""
KUBECONFIG_SRC=""
ANTREA_KUBECONFIG_SRC=""
NS=""
NODE_NAME_ARG=""
BRIDGE=""
ROOT_ARG="/"
UNINSTALL=0
FORCE=0
PURGE=0
DRY_RUN=0
NO_SYSTEMD=0

# Options that take a value; both "--opt value" and "--opt=value" are accepted.
takes_value() {
  case $1 in
    --ns | --bin | --config | --kubeconfig | --antrea-kubeconfig | --nodename | --ovs-bridge | --root) return 0 ;;
    *) return 1 ;;
  esac
}

while [[ $# -gt 0 ]]; do
  opt=$1
  shift
  if [[ $opt == --*=* ]]; then
    value=${opt#*=}
    opt=${opt%%=*}
    takes_value "$opt" || usage_error "option $opt takes no value"
  elif takes_value "$opt"; then
    [[ $# -gt 0 && $1 != --* ]] || usage_error "option $opt needs a value"
    value=$1
    shift
  else
    value=""
  fi
  if takes_value "$opt" && [[ -z $value ]]; then
    usage_error "option $opt needs a value"
  fi
  case $opt in
    --config) CONFIG_SRC=$value ;;
    --bin) BIN_SRC=$value ;;
    --kubeconfig) KUBECONFIG_SRC=$value ;;
    --antrea-kubeconfig) ANTREA_KUBECONFIG_SRC=$value ;;
    --ns) NS=$value ;;
    --nodename) NODE_NAME_ARG=$value ;;
    --ovs-bridge) BRIDGE=$value ;;
    --root) ROOT_ARG=$value ;;
    --uninstall) UNINSTALL=1 ;;
    --force) FORCE=1 ;;
    --purge) PURGE=1 ;;
    --dry-run) DRY_RUN=1 ;;
    --no-systemd) NO_SYSTEMD=1 ;;
    -h | --help)
      usage
      exit 0
      ;;
    --containerize | --antrea-version | --validate-ovs)
      usage_error "option $opt of the Go agent's installer is not supported: see deploy/Containerfile for the container, and the agent heals stale OVS ports itself"
      ;;
    *) usage_error "unknown option: $opt" ;;
  esac
done

[[ -d $ROOT_ARG ]] || usage_error "--root $ROOT_ARG: not a directory"
ROOT=$(cd "$ROOT_ARG" && pwd -P)
if [[ $ROOT == / ]]; then ROOT=""; fi
readonly ROOT

# A path inside the root.
r() {
  printf '%s%s' "$ROOT" "$1"
}

if [[ $UNINSTALL == 1 ]]; then
  for given in CONFIG_SRC BIN_SRC KUBECONFIG_SRC ANTREA_KUBECONFIG_SRC NS NODE_NAME_ARG BRIDGE; do
    [[ -z ${!given} ]] || usage_error "--uninstall takes no install options (got ${given})"
  done
else
  [[ $FORCE == 0 ]] || usage_error "--force is an --uninstall option"
  [[ $PURGE == 0 ]] || usage_error "--purge is an --uninstall option"
  missing=()
  [[ -n $CONFIG_SRC ]] || missing+=(--config)
  [[ -n $BIN_SRC ]] || missing+=(--bin)
  [[ ${#missing[@]} -eq 0 ]] || usage_error "missing argument(s): ${missing[*]}"
  [[ -f $CONFIG_SRC && -r $CONFIG_SRC ]] || usage_error "--config $CONFIG_SRC: no such readable file"
  [[ -f $BIN_SRC && -x $BIN_SRC ]] || usage_error "--bin $BIN_SRC: no such executable file"
  # Standalone configs take the ExternalNode and policies from local files: no kubeconfig needed.
  if grep -Eq '^standalone:' "$CONFIG_SRC"; then
    STANDALONE=1
  else
    STANDALONE=0
  fi
  if [[ -n $KUBECONFIG_SRC || -n $ANTREA_KUBECONFIG_SRC || $STANDALONE == 0 ]]; then
    missing=()
    [[ -n $KUBECONFIG_SRC ]] || missing+=(--kubeconfig)
    [[ -n $ANTREA_KUBECONFIG_SRC ]] || missing+=(--antrea-kubeconfig)
    [[ ${#missing[@]} -eq 0 ]] ||
      usage_error "missing argument(s): ${missing[*]} (both kubeconfigs are needed unless the config has a 'standalone:' section)"
    [[ -f $KUBECONFIG_SRC && -r $KUBECONFIG_SRC ]] || usage_error "--kubeconfig $KUBECONFIG_SRC: no such readable file"
    [[ -f $ANTREA_KUBECONFIG_SRC && -r $ANTREA_KUBECONFIG_SRC ]] ||
      usage_error "--antrea-kubeconfig $ANTREA_KUBECONFIG_SRC: no such readable file"
  fi
  # Kubernetes names: a Namespace is a DNS-1123 label, an ExternalNode name a DNS-1123 subdomain.
  if [[ -n $NS ]] && { [[ ${#NS} -gt 63 ]] || ! [[ $NS =~ ^[a-z0-9]([-a-z0-9]*[a-z0-9])?$ ]]; }; then
    usage_error "--ns $NS: not a valid Namespace name (lower-case letters, digits and '-', at most 63)"
  fi
  if [[ -z $NODE_NAME_ARG ]]; then
    NODE_NAME_ARG=$(cat /proc/sys/kernel/hostname 2>/dev/null || hostname)
    node_name_origin="the host name; use --nodename to choose another"
  else
    node_name_origin="--nodename"
  fi
  if [[ ${#NODE_NAME_ARG} -gt 253 ]] || ! [[ $NODE_NAME_ARG =~ ^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$ ]]; then
    usage_error "node name $NODE_NAME_ARG ($node_name_origin): not a valid ExternalNode name (lower-case letters, digits, '-' and '.')"
  fi
  if [[ -n $BRIDGE ]] && ! [[ $BRIDGE =~ ^[A-Za-z0-9_.-]{1,15}$ ]]; then
    usage_error "--ovs-bridge $BRIDGE: not a valid bridge name (at most 15 letters, digits, '_', '.', '-')"
  fi
  [[ -f $UNIT_SRC ]] || fail "$UNIT_SRC is missing: run the installer from the deploy/ directory it ships in"
fi

if [[ -z $ROOT && $DRY_RUN == 0 && $(id -u) != 0 ]]; then
  fail "must run as root (or with --dry-run, or --root DIR)"
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/install-vm.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

[[ -z $ROOT ]] || note "acting on the tree under $ROOT"
[[ $DRY_RUN == 0 ]] || note "dry run: nothing is changed"

# ---------------------------------------------------------------------------------------------
# The manifest: what this installer created ("dir P", "file P") or replaced ("backup P").

MANIFEST_LINES=()
if [[ -f $(r "$MANIFEST") ]]; then
  while IFS= read -r line; do
    if [[ -n $line ]]; then MANIFEST_LINES+=("$line"); fi
  done <"$(r "$MANIFEST")"
fi

manifest_has() {
  local line
  for line in "${MANIFEST_LINES[@]+"${MANIFEST_LINES[@]}"}"; do
    if [[ $line == "$1" ]]; then return 0; fi
  done
  return 1
}

manifest_add() {
  manifest_has "$1" || MANIFEST_LINES+=("$1")
}

manifest_drop() {
  local line kept=()
  for line in "${MANIFEST_LINES[@]+"${MANIFEST_LINES[@]}"}"; do
    if [[ $line != "$1" ]]; then kept+=("$line"); fi
  done
  MANIFEST_LINES=("${kept[@]+"${kept[@]}"}")
}

CHANGES=0

# Prints an action ("would <what>" in a dry run, "<what> in the past tense" otherwise) and, unless
# this is a dry run, does it. WHAT starts with one of the verbs of past_tense.
do_action() {
  local what=$1
  shift
  if [[ $DRY_RUN == 1 ]]; then
    echo "would $what"
  else
    "$@"
    echo "$(past_tense "${what%% *}") ${what#* }"
  fi
  CHANGES=$((CHANGES + 1))
}

past_tense() {
  case $1 in
    run) echo ran ;;
    keep) echo kept ;;
    set) echo set ;;
    *e) echo "${1}d" ;;
    *) echo "${1}ed" ;;
  esac
}

# Paths a dry run pretends to have removed, so that their parents count as empty.
DRY_REMOVED=()

is_empty_dir() {
  local entry gone
  for entry in "$1"/* "$1"/.[!.]* "$1"/..?*; do
    [[ -e $entry || -L $entry ]] || continue
    gone=0
    local p
    for p in "${DRY_REMOVED[@]+"${DRY_REMOVED[@]}"}"; do
      if [[ $p == "$entry" ]]; then
        gone=1
        break
      fi
    done
    [[ $gone == 1 ]] || return 1
  done
  return 0
}

# Removes a file or directory (do_action), remembering it in a dry run.
remove_path() {
  local what=$1
  shift
  do_action "$what" "$@"
  if [[ $DRY_RUN == 1 ]]; then DRY_REMOVED+=("${!#}"); fi
}

# Ensures a directory exists, recording every component it creates.
ensure_dir() {
  local dir=$1 mode=$2 path="" part
  local -a parts
  IFS=/ read -r -a parts <<<"${dir#/}"
  for part in "${parts[@]}"; do
    path=$path/$part
    if [[ ! -d $(r "$path") ]]; then
      [[ ! -e $(r "$path") ]] || fail "$(r "$path") exists and is not a directory"
      local m=0755
      if [[ $path == "$dir" ]]; then m=$mode; fi
      do_action "create directory $path (mode $m)" install -d -m "$m" "$(r "$path")"
      manifest_add "dir $path"
    fi
  done
}

file_mode() {
  stat -c '%a' "$1"
}

# Installs SRC as DST with MODE unless DST already has that content and mode. A file that was there
# before the first install is kept as DST.pre-antrea-vm-agent (restored by --uninstall). Sets
# LAST_CHANGED to 1 when DST changed.
ensure_file() {
  local src=$1 dst=$2 mode=$3 real
  real=$(r "$dst")
  LAST_CHANGED=0
  # A file that was there before the first install (even an identical one) is the host's.
  if [[ -e $real ]] && ! manifest_has "file $dst" && ! manifest_has "backup $dst"; then
    [[ ! -e $real$BACKUP_SUFFIX ]] || fail "both $dst and $dst$BACKUP_SUFFIX exist: move one away first"
    do_action "keep the previous $dst as $dst$BACKUP_SUFFIX" cp -p "$real" "$real$BACKUP_SUFFIX"
    manifest_add "backup $dst"
  fi
  if [[ -f $real ]] && cmp -s "$src" "$real"; then
    if [[ $(file_mode "$real") != "${mode#0}" ]]; then
      do_action "set mode $mode on $dst" chmod "$mode" "$real"
      LAST_CHANGED=1
    else
      echo "unchanged $dst"
    fi
  else
    local verb=install
    if [[ -e $real ]]; then verb=update; fi
    do_action "$verb $dst (mode $mode)" install_atomically "$src" "$real" "$mode"
    LAST_CHANGED=1
  fi
  manifest_has "backup $dst" || manifest_add "file $dst"
}

# Writes via a temporary file and a rename, so a running agent never sees half a file.
install_atomically() {
  local src=$1 dst=$2 mode=$3 tmp
  tmp=$(dirname "$dst")/.$(basename "$dst").install-vm.$$
  install -m "$mode" "$src" "$tmp"
  mv -f "$tmp" "$dst"
}

# ---------------------------------------------------------------------------------------------
# Config rewriting: sets one key (top-level when SECTION is empty, else SECTION.KEY) in a block-style
# YAML file: replaces the key's line if it is set, else uncomments a commented-out line for it, else
# adds it under its section (or adds the section). Other lines are kept as written.

set_yaml_key() {
  local file=$1 section=$2 key=$3 value=$4 out=$WORK/set-key.$$ rc=0
  awk -v sec="$section" -v key="$key" -v val="$value" '
    function ind(s) { match(s, /^[ \t]*/); return substr(s, 1, RLENGTH) }
    function toplevel(s) { return s ~ /^[^ \t#]/ }
    NR == FNR {
      if (toplevel($0)) {
        cur = $0; sub(/:.*/, "", cur)
        if (sec != "" && cur == sec && !hdr) {
          hdr = FNR
          if ($0 !~ /^[^:]*:[ \t]*(#.*)?$/) flow = 1
        }
      }
      if (sec == "") {
        if (!set && $0 ~ ("^" key ":")) set = FNR
        if (!commented && $0 ~ ("^#[ \t]*" key ":")) commented = FNR
      } else if (hdr && cur == sec && FNR != hdr) {
        if (!set && $0 ~ ("^[ \t]+" key ":")) set = FNR
        if (!commented && $0 ~ ("^[ \t]*#[ \t]*" key ":")) commented = FNR
        if (sind == "" && $0 ~ /^[ \t]+[^ \t#]/) sind = ind($0)
      }
      next
    }
    FNR == 1 && flow { exit 3 }
    {
      if (set) {
        if (FNR == set) { print ind($0) key ": " val; next }
      } else if (commented) {
        if (FNR == commented) {
          i = ind($0)
          if (sec != "" && i == "") i = (sind == "" ? "  " : sind)
          print i key ": " val; next
        }
      } else if (hdr && FNR == hdr) {
        print; print (sind == "" ? "  " : sind) key ": " val; next
      }
      print
    }
    END {
      if (flow) exit 3
      if (!set && !commented && !hdr) {
        if (sec == "") print key ": " val
        else { print sec ":"; print "  " key ": " val }
      }
    }
  ' "$file" "$file" >"$out" || rc=$?
  if [[ $rc == 3 ]]; then
    fail "$CONFIG_SRC: '$section:' is written in flow style ({...}); write it as a block so $section.$key can be set"
  elif [[ $rc != 0 ]]; then
    fail "cannot rewrite $CONFIG_SRC"
  fi
  mv -f "$out" "$file"
}

# ---------------------------------------------------------------------------------------------
# systemd

systemd_query() {
  [[ $NO_SYSTEMD == 0 ]] || return 1
  "$SYSTEMCTL" "$@" >/dev/null 2>&1
}

systemd_do() {
  if [[ $NO_SYSTEMD == 1 ]]; then
    return 0
  fi
  do_action "run systemctl $*" "$SYSTEMCTL" "$@"
}

check_systemctl() {
  if [[ $NO_SYSTEMD == 1 ]]; then return 0; fi
  command -v "$SYSTEMCTL" >/dev/null 2>&1 ||
    fail "$SYSTEMCTL not found: is this a systemd host? Use --no-systemd to install the files only"
}

# ---------------------------------------------------------------------------------------------
# Install

install_agent() {
  check_systemctl
  # Two agents on one bridge would undo each other's work.
  if systemd_query is-active --quiet "$GO_AGENT_UNIT"; then
    fail "the Go antrea-agent ($GO_AGENT_UNIT) is running; two agents would fight over the same interfaces and bridge. Stop it first: systemctl disable --now $GO_AGENT_UNIT"
  fi

  # The config as it will be installed: kubeconfig paths made absolute (the Go installer's rewrite),
  # then --ns and --ovs-bridge.
  local staged=$WORK/antrea-agent.conf
  cp "$CONFIG_SRC" "$staged"
  if [[ -n $KUBECONFIG_SRC ]]; then
    set_yaml_key "$staged" clientConnection kubeconfig "$KUBECONFIG_DST"
    set_yaml_key "$staged" antreaClientConnection kubeconfig "$ANTREA_KUBECONFIG_DST"
  fi
  [[ -z $NS ]] || set_yaml_key "$staged" externalNode externalNodeNamespace "\"$NS\""
  [[ -z $BRIDGE ]] || set_yaml_key "$staged" "" ovsBridge "\"$BRIDGE\""

  # Validate before touching anything, with the binary being installed.
  local check
  if ! check=$(cd "$(dirname "$CONFIG_SRC")" && "$BIN_SRC" check-config --config "$staged" 2>&1); then
    echo "${check//"$staged"/"$CONFIG_SRC"}" >&2
    fail "the configuration is not valid for antrea-vm-agent (as it would be installed, after the rewrites above); nothing was changed"
  fi

  printf 'NODE_NAME=%s\n' "$NODE_NAME_ARG" >"$WORK/env"

  local restart=0
  ensure_dir "$ETC_DIR" 0755
  ensure_file "$staged" "$CONF" 0644
  restart=$((restart | LAST_CHANGED))
  if [[ -n $KUBECONFIG_SRC ]]; then
    ensure_file "$KUBECONFIG_SRC" "$KUBECONFIG_DST" 0600
    restart=$((restart | LAST_CHANGED))
    ensure_file "$ANTREA_KUBECONFIG_SRC" "$ANTREA_KUBECONFIG_DST" 0600
    restart=$((restart | LAST_CHANGED))
  fi
  ensure_file "$WORK/env" "$ENV_FILE" 0644
  restart=$((restart | LAST_CHANGED))
  ensure_dir /usr/sbin 0755
  ensure_file "$BIN_SRC" "$BIN_DST" 0755
  restart=$((restart | LAST_CHANGED))
  ensure_dir /etc/systemd/system 0755
  ensure_file "$UNIT_SRC" "$UNIT_DST" 0644
  local unit_changed=$LAST_CHANGED
  restart=$((restart | LAST_CHANGED))
  retire_logrotate
  # systemd creates these at start (LogsDirectory=, StateDirectory=); created here too for runs
  # without systemd.
  ensure_dir "$LOG_DIR" 0755
  ensure_dir "$DEFAULT_STATE_DIR" 0700
  write_manifest

  if [[ $NO_SYSTEMD == 1 ]]; then
    note "--no-systemd: start the agent with: $BIN_DST run --config=$CONF --logtostderr=false --log_file=$LOG_DIR/antrea-agent.log"
  else
    [[ $unit_changed == 0 ]] || systemd_do daemon-reload
    systemd_query is-enabled --quiet "$UNIT" || systemd_do enable "$UNIT"
    if systemd_query is-active --quiet "$UNIT"; then
      [[ $restart == 0 ]] || systemd_do restart --no-block "$UNIT"
    else
      systemd_do start --no-block "$UNIT"
    fi
  fi

  if [[ $CHANGES == 0 ]]; then
    note "antrea-vm-agent is already installed and up to date: nothing changed"
  elif [[ $DRY_RUN == 1 ]]; then
    note "dry run: $CHANGES action(s) would be taken"
  else
    note "done: $CHANGES change(s); see 'systemctl status $UNIT' and $LOG_DIR/antrea-agent.log"
  fi
}

# The logrotate file an earlier version installed rotated the agent's log too, daily, writing the
# same antrea-agent.log.1 as the agent: removed (or the host's own file put back, when there was
# one before), and forgotten by the manifest. Its directory stays listed if this script made it, so
# that --uninstall removes it once empty.
retire_logrotate() {
  local real
  real=$(r "$OLD_LOGROTATE_DST")
  if manifest_has "file $OLD_LOGROTATE_DST"; then
    if [[ -e $real ]]; then
      remove_path "remove $OLD_LOGROTATE_DST (the agent rotates its own log)" rm -f "$real"
    fi
    manifest_drop "file $OLD_LOGROTATE_DST"
  elif manifest_has "backup $OLD_LOGROTATE_DST"; then
    if [[ -e $real$BACKUP_SUFFIX ]]; then
      do_action "restore $OLD_LOGROTATE_DST from $OLD_LOGROTATE_DST$BACKUP_SUFFIX (the agent rotates its own log)" \
        mv -f "$real$BACKUP_SUFFIX" "$real"
    fi
    manifest_drop "backup $OLD_LOGROTATE_DST"
  fi
}

write_manifest() {
  local new=$WORK/manifest
  : >"$new"
  local line
  for line in "${MANIFEST_LINES[@]+"${MANIFEST_LINES[@]}"}"; do
    printf '%s\n' "$line" >>"$new"
  done
  if [[ -f $(r "$MANIFEST") ]] && cmp -s "$new" "$(r "$MANIFEST")"; then
    return 0
  fi
  if [[ $DRY_RUN == 1 ]]; then
    echo "would record the installed paths in $MANIFEST"
  else
    install_atomically "$new" "$(r "$MANIFEST")" 0644
    echo "recorded the installed paths in $MANIFEST"
  fi
}

# ---------------------------------------------------------------------------------------------
# Uninstall

# A top-level (or SECTION.KEY) scalar from the installed config, unquoted; empty when unset.
config_value() {
  local section=$1 key=$2
  awk -v sec="$section" -v key="$key" '
    /^[^ \t#]/ { cur = $0; sub(/:.*/, "", cur) }
    (sec == "" && $0 ~ ("^" key ":")) || (sec != "" && cur == sec && $0 ~ ("^[ \t]+" key ":")) {
      v = $0; sub(/^[^:]*:[ \t]*/, "", v); sub(/[ \t]+#.*$/, "", v); gsub(/^["\x27]|["\x27]$/, "", v)
      print v; exit
    }
  ' "$(r "$CONF")"
}

# Names of the interfaces the agent has attached (its records), one per line.
attached_interfaces() {
  local dir=$1 f
  for f in "$dir"/*.json; do
    [[ -e $f ]] || continue
    basename "$f" .json
  done
}

restore_interfaces() {
  local state_dir records attached
  state_dir=$(config_value "" stateDir)
  state_dir=${state_dir:-$DEFAULT_STATE_DIR}
  records=$(r "$state_dir")/interfaces
  attached=$(attached_interfaces "$records")
  [[ -n $attached ]] || return 0
  local names
  names=$(echo "$attached" | paste -sd, -)
  local agent
  agent=$(r "$BIN_DST")

  # An agent that can restore offline does it best: stop the service, then detach. Not under
  # --root: detach-all acts on this host's kernel, OVS and stateDir, not on the alternate root.
  if [[ -z $ROOT && -x $agent ]] && "$agent" --help 2>/dev/null | grep -Eq '^[[:space:]]+detach-all([[:space:]]|$)'; then
    if systemd_query is-active --quiet "$UNIT"; then systemd_do stop "$UNIT"; fi
    do_action "restore the attached interfaces ($names) with antrea-vm-agent detach-all" \
      "$agent" detach-all --config="$(r "$CONF")"
    return 0
  fi

  # Standalone: removing the ExternalNode file is the ExternalNode's deletion; the running agent
  # restores every interface and deletes their records.
  local en_file
  en_file=$(config_value standalone externalNodeFile)
  if [[ -n $en_file && -f $(r "$en_file") ]] && systemd_query is-active --quiet "$UNIT"; then
    do_action "move the ExternalNode file $en_file aside to $en_file.uninstalled (for the agent to restore $names)" \
      mv -f "$(r "$en_file")" "$(r "$en_file").uninstalled"
    if [[ $DRY_RUN == 1 ]]; then return 0; fi
    local waited=0
    while [[ -n $(attached_interfaces "$records") ]]; do
      if [[ $waited -ge $DETACH_TIMEOUT ]]; then
        mv -f "$(r "$en_file").uninstalled" "$(r "$en_file")"
        fail "the agent did not restore $(attached_interfaces "$records" | paste -sd, -) within ${DETACH_TIMEOUT}s (see $LOG_DIR/antrea-agent.log); the ExternalNode file was put back and nothing else was changed"
      fi
      sleep 1
      waited=$((waited + 1))
    done
    echo "the agent restored $names"
    return 0
  fi

  local how
  if [[ -n $en_file ]]; then
    how="start the agent (systemctl start $UNIT) so that it can restore them, then re-run --uninstall"
  else
    local ns node
    ns=$(config_value externalNode externalNodeNamespace)
    node=$(sed -n 's/^NODE_NAME=//p' "$(r "$ENV_FILE")" 2>/dev/null || true)
    how="delete the ExternalNode (kubectl -n ${ns:-default} delete externalnode ${node:-<name>}), wait until the agent has restored them, then re-run --uninstall"
  fi
  if [[ $FORCE == 1 ]]; then
    echo "$PROG: warning: interfaces still attached to OVS: $names; --force: uninstalling anyway, their records stay in $records" >&2
    return 0
  fi
  fail "interfaces still attached to OVS by the agent: $names (records in $records). To put them back: $how. Or pass --force to uninstall anyway (they stay attached)"
}

uninstall_agent() {
  if [[ ! -f $(r "$MANIFEST") ]]; then
    note "antrea-vm-agent is not installed here (no $MANIFEST): nothing to do"
    return 0
  fi
  check_systemctl
  restore_interfaces

  if [[ $NO_SYSTEMD == 0 ]]; then
    if systemd_query is-active --quiet "$UNIT"; then systemd_do stop "$UNIT"; fi
    if systemd_query is-enabled --quiet "$UNIT"; then systemd_do disable "$UNIT"; fi
  fi

  local i line kind path real unit_removed=0
  # Files first, newest first; then directories, deepest (latest created) first.
  for ((i = ${#MANIFEST_LINES[@]} - 1; i >= 0; i--)); do
    line=${MANIFEST_LINES[i]}
    kind=${line%% *}
    path=${line#* }
    real=$(r "$path")
    case $kind in
      file)
        if [[ -e $real ]]; then
          remove_path "remove $path" rm -f "$real"
          [[ $path != "$UNIT_DST" ]] || unit_removed=1
        fi
        ;;
      backup)
        if [[ -e $real$BACKUP_SUFFIX ]]; then
          do_action "restore $path from $path$BACKUP_SUFFIX" mv -f "$real$BACKUP_SUFFIX" "$real"
          [[ $path != "$UNIT_DST" ]] || unit_removed=1
        fi
        ;;
      dir) ;;
      *) echo "$PROG: warning: ignoring unknown manifest line: $line" >&2 ;;
    esac
  done
  remove_path "remove $MANIFEST" rm -f "$(r "$MANIFEST")"
  [[ $unit_removed == 0 ]] || systemd_do daemon-reload

  local state_dir records
  state_dir=$(config_value "" stateDir 2>/dev/null || true)
  records=$(r "${state_dir:-$DEFAULT_STATE_DIR}")/interfaces
  for ((i = ${#MANIFEST_LINES[@]} - 1; i >= 0; i--)); do
    line=${MANIFEST_LINES[i]}
    [[ ${line%% *} == dir ]] || continue
    path=${line#* }
    real=$(r "$path")
    [[ -d $real ]] || continue
    if ! is_empty_dir "$real"; then
      if [[ $PURGE == 1 && ($path == "$LOG_DIR" || $path == "$DEFAULT_STATE_DIR") ]]; then
        if [[ $path == "$DEFAULT_STATE_DIR" && -n $(attached_interfaces "$records") ]]; then
          echo "kept $path: it holds the records needed to restore attached interfaces"
          continue
        fi
        remove_path "purge $path" rm -rf "$real"
      else
        echo "kept $path (not empty)"
      fi
    else
      remove_path "remove directory $path" rmdir "$real"
    fi
  done
  if [[ $DRY_RUN == 1 ]]; then
    note "dry run: $CHANGES action(s) would be taken"
  else
    note "antrea-vm-agent is uninstalled"
  fi
}

if [[ $UNINSTALL == 1 ]]; then
  uninstall_agent
else
  install_agent
fi
