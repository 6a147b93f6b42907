#!/bin/sh
# Applies the FRR configuration kube-lb proxy renders (see dataplane/src/bgp/daemon.rs).
#
# The proxy writes $FRR_CONF_DIR/kube-lb.conf, then a generation number to
# $FRR_CONF_DIR/kube-lb.reload. For each new generation this loop runs FRR's frr-reload.py,
# which changes only what differs from the running configuration (no BGP session is reset for
# a prefix or route-map change), keeps the file as frr.conf for daemon restarts, and answers
# "<generation> <exit code>" plus the tool's last lines in $FRR_CONF_DIR/kube-lb.status.
#
# Environment:
#   FRR_CONF_DIR      the directory shared with the proxy (default /etc/frr)
#   FRR_PATHSPACE     FRR's -N pathspace, when the daemons run with one (default: none)
#   FRR_RELOAD        frr-reload.py (default /usr/lib/frr/frr-reload.py)
#   FRR_RELOAD_POLL   seconds between looks at the request file (default 0.05)
set -u
conf_dir=${FRR_CONF_DIR:-/etc/frr}
pathspace=${FRR_PATHSPACE:-}
reload=${FRR_RELOAD:-/usr/lib/frr/frr-reload.py}
poll=${FRR_RELOAD_POLL:-0.05}
last=""
echo "frr-reloader: watching $conf_dir/kube-lb.reload"
while :; do
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
