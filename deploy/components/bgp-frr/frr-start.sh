#!/bin/bash
# The frr container of kube-lb-proxy (deploy/components/bgp-frr): starts zebra, bgpd and bfdd
# under watchfrr (FRR's own frrinit.sh, which restarts a daemon that dies), waits until each
# answers on its VTY socket, then runs frr-reloader.sh, which applies what the proxy renders.
#
# /etc/frr and /var/run/frr are emptyDirs shared with the proxy; this ConfigMap is mounted at
# $FRR_KUBE_LB_DIR (default /etc/kube-lb-frr). A daemon that does not answer within
# $FRR_START_TIMEOUT seconds (default 30) fails the container, and the kubelet restarts it.
set -eu
src=${FRR_KUBE_LB_DIR:-/etc/kube-lb-frr}
conf_dir=${FRR_CONF_DIR:-/etc/frr}
timeout=${FRR_START_TIMEOUT:-30}
cp "$src/daemons" "$conf_dir/daemons"
cp "$src/vtysh.conf" "$conf_dir/vtysh.conf"
# After a container restart the emptyDir still holds the last configuration applied: the
# daemons come back with it, advertising what they did before, until the proxy's next
# hand-over (the reloader applies the current generation again at start).
if [ ! -s "$conf_dir/frr.conf" ]; then
  printf 'frr defaults datacenter\nhostname %s\nlog stdout informational\n!\n' \
    "${NODE_NAME:-kube-lb}" > "$conf_dir/frr.conf"
fi
# In the background: watchfrr -d returns only once every daemon is up, so a daemon that cannot
# start (a missing capability) would hang the container instead of failing it.
/usr/lib/frr/frrinit.sh start &
for daemon in zebra bgpd bfdd; do
  tries=0
  until vtysh -d "$daemon" -c 'show version' > /dev/null 2>&1; do
    tries=$((tries + 1))
    if [ "$tries" -ge $((timeout * 10)) ]; then
      echo "frr-start: $daemon did not come up in $timeout s" >&2
      exit 1
    fi
    sleep 0.1
  done
done
echo "frr-start: zebra, bgpd and bfdd are up"
exec /bin/sh "$src/frr-reloader.sh"
