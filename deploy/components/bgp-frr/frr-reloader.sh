#!/bin/sh
# Applies the FRR configuration kube-lb proxy renders (see dataplane/src/bgp/daemon.rs).
#
# The proxy writes $FRR_CONF_DIR/kube-lb.conf, then a generation number to
# $FRR_CONF_DIR/kube-lb.reload. For each new generation this loop runs FRR's frr-reload.py,
# which changes only what differs from the running configuration (no BGP session is reset for
# a prefix or route-map change), keeps the file as frr.conf for daemon restarts, and answers
# "<generation> <exit code>" plus the tool's last lines in $FRR_CONF_DIR/kube-lb.status.
#
# It is also the proxy's dead man's switch: the proxy bumps a counter in
# $FRR_CONF_DIR/kube-lb.heartbeat every 100 ms and keeps in $FRR_CONF_DIR/kube-lb.deadman the
# vtysh commands that withdraw every prefix it may have announced. When the counter has not
# moved for FRR_HEARTBEAT_TIMEOUT_POLLS looks (10 x 0.05 s = 0.5 s), the proxy is dead or hung
# and its node must stop attracting traffic: the commands run once (sessions and BFD stay up),
# and $FRR_CONF_DIR/kube-lb.deadman.fired counts it so the proxy re-applies when it is back.
#
# Environment:
#   FRR_CONF_DIR      the directory shared with the proxy (default /etc/frr)
#   FRR_PATHSPACE     FRR's -N pathspace, when the daemons run with one (default: none)
#   FRR_RELOAD        frr-reload.py (default /usr/lib/frr/frr-reload.py)
#   FRR_RELOAD_POLL   seconds between looks at the request file (default 0.05)
#   FRR_HEARTBEAT_TIMEOUT_POLLS  looks without a new heartbeat before the switch fires (10)
set -u
conf_dir=${FRR_CONF_DIR:-/etc/frr}
pathspace=${FRR_PATHSPACE:-}
reload=${FRR_RELOAD:-/usr/lib/frr/frr-reload.py}
poll=${FRR_RELOAD_POLL:-0.05}
timeout_polls=${FRR_HEARTBEAT_TIMEOUT_POLLS:-10}
last=""
beat_seen=""
stale=0
fired_for=""
fired=$(cat "$conf_dir/kube-lb.deadman.fired" 2>/dev/null || echo 0)
vtysh_args=""
[ -n "$pathspace" ] && vtysh_args="-N $pathspace"
echo "frr-reloader: watching $conf_dir/kube-lb.reload"
while :; do
  beat=$(cat "$conf_dir/kube-lb.heartbeat" 2>/dev/null || true)
  if [ -n "$beat" ] && [ "$beat" != "$beat_seen" ]; then
    beat_seen=$beat
    stale=0
  elif [ -n "$beat_seen" ]; then
    stale=$((stale + 1))
  fi
  if [ -n "$beat_seen" ] && [ "$stale" -ge "$timeout_polls" ] && [ "$fired_for" != "$beat_seen" ]; then
    echo "frr-reloader: no heartbeat from the proxy for $stale looks: withdrawing its prefixes"
    # shellcheck disable=SC2086 # vtysh_args is empty or two words on purpose
    vtysh $vtysh_args -f "$conf_dir/kube-lb.deadman" >/dev/null 2>&1
    fired=$((fired + 1))
    echo "$fired" > "$conf_dir/kube-lb.deadman.fired.tmp"
    mv "$conf_dir/kube-lb.deadman.fired.tmp" "$conf_dir/kube-lb.deadman.fired"
    fired_for=$beat_seen
  fi
  generation=$(cat "$conf_dir/kube-lb.reload" 2>/dev/null || true)
  if [ -n "$generation" ] && [ "$generation" != "$last" ]; then
    # Apply a copy: the proxy may write the next generation meanwhile, and it will be applied
    # on the next turn.
    cp "$conf_dir/kube-lb.conf" "$conf_dir/kube-lb.applying"
    if [ -n "$pathspace" ]; then
      output=$(python3 "$reload" --pathspace "$pathspace" --reload --stdout \
        "$conf_dir/kube-lb.applying" 2>&1)
    else
      output=$(python3 "$reload" --reload --stdout "$conf_dir/kube-lb.applying" 2>&1)
    fi
    code=$?
    if [ "$code" -eq 0 ]; then
      cp "$conf_dir/kube-lb.applying" "$conf_dir/frr.conf"
      echo "frr-reloader: applied generation $generation"
    else
      echo "frr-reloader: generation $generation failed ($code):"
      echo "$output" | tail -20
    fi
    printf '%s %s\n%s\n' "$generation" "$code" "$(echo "$output" | tail -20)" \
      > "$conf_dir/kube-lb.status.tmp"
    mv "$conf_dir/kube-lb.status.tmp" "$conf_dir/kube-lb.status"
    last=$generation
  fi
  sleep "$poll"
done
