#!/usr/bin/env bash
# TLS on the control plane (--tls-cert, --tls-key, --tls-ca), end to end on 127.0.0.1:
#  1. without TLS, a capture of the coordinator's control port (tcpdump on lo) holds the
#     token of a job a shell created, even with tcpdump held stopped meanwhile: the
#     check below can fail, and a capture is complete before it is read;
#  2. with TLS on the coordinator, a second rack-agg node and the shell, the same capture
#     holds neither the token nor any CAF message type name, and the node registered;
#  3. refusals: a shell without TLS, a shell whose certificate another CA signed, files
#     missing one of the three, a key others can read, a key that is not the
#     certificate's, each with its exit code and a message that says what to do.
# Every process started is stopped by PID; every wait is bounded.
#
#   bash tests/integration/tls_control.sh BUILD_DIR
set -euo pipefail
build=$(cd "${1:?usage: tls_control.sh BUILD_DIR}" && pwd)
node_bin=$build/apps/rw-node
shell_bin=$build/apps/rw-shell
tmp=$(mktemp -d)
pids=()
cleanup() {
  local p
  for p in ${pids[@]+"${pids[@]}"}; do kill -KILL "$p" 2>/dev/null || true; done
  for p in ${pids[@]+"${pids[@]}"}; do wait "$p" 2>/dev/null || true; done
  [[ -n ${RW_KEEP_TMP:-} ]] && echo "kept $tmp" || rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "tls_control: FAIL: $*" >&2; exit 1; }
step() { echo "tls_control: $*"; }
for tool in openssl tcpdump; do
  command -v "$tool" >/dev/null || fail "$tool is not installed (apps/scripts/setup.sh installs it)"
done

# A CA, certificates it signed for the nodes and the shell, and one from another CA.
certs=$tmp/certs
mkdir -p "$certs"
make_ca() { # NAME
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
    -subj "/CN=$1" -keyout "$certs/$1.key" -out "$certs/$1.pem" 2>/dev/null
}
make_cert() { # NAME CA
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$1" \
    -keyout "$certs/$1.key" -out "$certs/$1.csr" 2>/dev/null
  openssl x509 -req -in "$certs/$1.csr" -CA "$certs/$2.pem" -CAkey "$certs/$2.key" \
    -CAcreateserial -days 2 -out "$certs/$1.pem" 2>/dev/null
  chmod 600 "$certs/$1.key"
}
make_ca ca
make_ca other-ca
make_cert node ca
make_cert node2 ca
make_cert shell ca
make_cert stranger other-ca
tls_of() { echo --tls-cert "$certs/$1.pem" --tls-key "$certs/$1.key" --tls-ca "$certs/ca.pem"; }

# Starts a rack-agg node; its PID in $REPLY. NAME LOG [ARG...]
start_node() {
  local name=$1 log=$2; shift 2
  "$node_bin" --name "$name" --listen 127.0.0.1:0 --port-file "$tmp/$name.port" \
    --control 127.0.0.1:0 --no-pin "$@" 2>"$log" &
  REPLY=$!
  pids+=("$REPLY")
  local i
  for ((i = 0; i < 200; i++)); do
    [[ -s $tmp/$name.port ]] && return 0
    kill -0 "$REPLY" 2>/dev/null || { cat "$log" >&2; fail "node $name exited at start"; }
    sleep 0.05
  done
  cat "$log" >&2
  fail "node $name did not listen within 10 s"
}
control_port_of() { # LOG: the coordinator's control port, from its start line
  sed -n 's/.*cluster coordinator up: control=[^ ]*:\([0-9]*\).*/\1/p' "$1" | sed -n 1p
}
# Captures the control port into FILE; the tcpdump PID in $REPLY. PORT FILE
# The kernel hands tcpdump packets through a ring that drops what does not fit while
# tcpdump is behind. In immediate mode each slot is as large as the snapshot length
# (-s 0: 256 KiB), so the default 2 MiB ring held only 8 packets, and under load the
# plain capture once lost the shell's (FAIL: "misses the token"). Whole loopback
# packets (-s 65600) in a 64 MiB ring (-B, KiB) hold about 1,000; stop_capture fails
# if any was dropped, so the TLS check below never passes on a capture with holes.
start_capture() {
  tcpdump -i lo --immediate-mode -U -n -s 65600 -B 65536 -w "$2" "tcp port $1" \
    2>"$2.log" &
  REPLY=$!
  pids+=("$REPLY")
  local i
  for ((i = 0; i < 100; i++)); do
    grep -q "listening on" "$2.log" 2>/dev/null && return 0
    sleep 0.05
  done
  cat "$2.log" >&2
  fail "tcpdump did not start within 5 s"
}
# Stops a capture once it has read everything sent before: tcpdump exits on SIGINT
# without reading the packets the kernel still holds for it. A marker sent to the
# port afterwards and found in the file (-U writes each packet as it is read) proves
# the packets before it were read. The node gets the marker as a stranger's bytes.
# Fails unless tcpdump reports that the kernel dropped none. PID PORT FILE
stop_capture() {
  local pid=$1 port=$2 file=$3 marker="rw-capture-marker-$RANDOM$RANDOM" i
  (exec 3<>"/dev/tcp/127.0.0.1/$port" && printf '%s' "$marker" >&3) 2>/dev/null ||
    fail "could not send the capture's marker to port $port"
  for ((i = 0; i < 200; i++)); do
    grep -aqF "$marker" "$file" && break
    sleep 0.05
  done
  grep -aqF "$marker" "$file" || fail "the capture of port $port did not catch up within 10 s"
  kill -INT "$pid" 2>/dev/null || true
  for ((i = 0; i < 100; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  kill -0 "$pid" 2>/dev/null && fail "tcpdump did not stop within 5 s of SIGINT"
  grep -q "^0 packets dropped by kernel" "$file.log" ||
    { cat "$file.log" >&2; fail "the capture of port $port has holes: the kernel dropped packets"; }
}

shell() { timeout -k 5 60 "$shell_bin" --timeout 5000 "$@"; }
create_job='local j = rw.job_create{name = "tls-job", workers = 2}; print(j.token)'

step "1. without TLS the token crosses the control port in clear"
start_node plain "$tmp/plain.log"
plain_pid=$REPLY
port=$(control_port_of "$tmp/plain.log")
[[ -n $port ]] || fail "no control port in the plain node's log"
start_capture "$port" "$tmp/plain.pcap"
capture=$REPLY
# tcpdump reads nothing while the shell runs (the worst case under load): its packets
# wait in the kernel, and stop_capture must still find them.
kill -STOP "$capture"
token=$(shell --connect "$(<"$tmp/plain.port")" -c "$create_job")
kill -CONT "$capture"
stop_capture "$capture" "$port" "$tmp/plain.pcap"
[[ $token == rwt1_* ]] || fail "the plain shell printed no token: $token"
grep -aqF "$token" "$tmp/plain.pcap" ||
  fail "the capture of a plain control port misses the token: the check cannot fail"
kill -TERM "$plain_pid"

step "2. with TLS neither the token nor a CAF type name crosses in clear"
start_node tls "$tmp/tls.log" $(tls_of node)
address=$(<"$tmp/tls.port")
port=$(control_port_of "$tmp/tls.log")
grep -q "tls=required" "$tmp/tls.log" || fail "the coordinator does not say tls=required"
start_capture "$port" "$tmp/tls.pcap"
capture=$REPLY
start_node tls2 "$tmp/tls2.log" --coordinator "$address" $(tls_of node2)
# Both nodes register, each through its own link: the first (which hosts the
# coordinator) does too, and under load after the second (once seen: "the coordinator
# lists 1 nodes").
for log in "$tmp/tls.log" "$tmp/tls2.log"; do
  for ((i = 0; i < 200; i++)); do
    grep -q "registered with the coordinator" "$log" && break
    sleep 0.05
  done
  grep -q "registered with the coordinator" "$log" ||
    { cat "$log" >&2; fail "node $(basename "$log" .log) did not register over TLS"; }
done
token=$(shell --connect "$address" $(tls_of shell) -c "$create_job")
[[ $token == rwt1_* ]] || fail "the TLS shell printed no token: $token"
# Both nodes listed, within 15 s. Known bug (issue 38): under load the second node's
# TLS connection to the coordinator sometimes closes about a second after it registered,
# as shells connect (seen with this session's build and the one before it); the node
# registers again at once. What this test checks (no clear text on a TLS control port)
# holds either way; a vanished node is reported, and a node that does not come back
# fails the test.
for ((i = 0; i < 30; i++)); do
  nodes=$(shell --connect "$address" $(tls_of shell) -c 'print(#rw.nodes())')
  [[ $nodes == 2 ]] && break
  sleep 0.5
done
if grep -q "node left the cluster" "$tmp/tls.log" || [[ $nodes != 2 ]]; then
  grep -hE "node (joined|left|refused)|registered with|lost the coordinator" \
    "$tmp/tls.log" "$tmp/tls2.log" >&2
  echo "tls_control: note: a node's TLS connection to the coordinator closed (issue 38)" >&2
fi
[[ $nodes == 2 ]] || fail "the coordinator lists $nodes nodes, not 2, after 15 s"
stop_capture "$capture" "$port" "$tmp/tls.pcap"
bytes=$(stat -c %s "$tmp/tls.pcap")
((bytes > 4096)) || fail "the TLS capture holds only $bytes bytes: nothing was captured"
! grep -aqF "$token" "$tmp/tls.pcap" || fail "the job's token crossed the TLS control port in clear"
! grep -aqF "rw::job_grant" "$tmp/tls.pcap" || fail "CAF messages crossed the TLS control port in clear"
! grep -aqF "rw::node_info" "$tmp/tls.pcap" || fail "CAF messages crossed the TLS control port in clear"
step "   capture: $bytes bytes, no token, no type name"

step "3. refusals"
expect() { # RC PATTERN COMMAND...: runs it, checks its exit code and stderr
  local rc=$1 pattern=$2; shift 2
  local got=0
  "$@" >"$tmp/out" 2>"$tmp/err" || got=$?
  [[ $got == "$rc" ]] || { cat "$tmp/err" >&2; fail "$* exited $got, not $rc"; }
  grep -qE "$pattern" "$tmp/err" || { cat "$tmp/err" >&2; fail "$*: no '$pattern' in its errors"; }
}
expect 3 "if it uses TLS files, give --tls-cert" shell --connect "$address" -c 'print(1)'
expect 3 "cannot reach the cluster" \
  shell --connect "$address" --tls-cert "$certs/stranger.pem" --tls-key "$certs/stranger.key" \
  --tls-ca "$certs/other-ca.pem" -c 'print(1)'
expect 2 "missing: --tls-key, --tls-ca" shell --connect "$address" --tls-cert "$certs/shell.pem" -c 'print(1)'
expect 2 "not signed by the CA" shell --connect "$address" --tls-cert "$certs/stranger.pem" \
  --tls-key "$certs/stranger.key" --tls-ca "$certs/ca.pem" -c 'print(1)'
chmod 644 "$certs/node2.key"
expect 2 "chmod 600" timeout -k 5 30 "$node_bin" --listen 127.0.0.1:0 $(tls_of node2)
chmod 600 "$certs/node2.key"
expect 2 "is not the certificate" timeout -k 5 30 "$node_bin" --listen 127.0.0.1:0 \
  --tls-cert "$certs/node.pem" --tls-key "$certs/node2.key" --tls-ca "$certs/ca.pem"
step "ok"
