"""Lists what the mock holds through the official Python openstacksdk and prints it as JSON.

Usage: openstacksdk_view.py AUTH_URL USERNAME PASSWORD PROJECT
Everything goes through the SDK's normal path: Keystone password auth, catalog, version
discovery of the load-balancer and network endpoints, then list and show calls.
"""
import json
import sys

import openstack

auth_url, username, password, project = sys.argv[1:5]
conn = openstack.connect(
    auth_url=auth_url,
    username=username,
    password=password,
    project_name=project,
    user_domain_name="Default",
    project_domain_name="Default",
    region_name="RegionOne",
)
lb_api = conn.load_balancer
out = {"loadbalancers": [], "listeners": [], "pools": [], "healthmonitors": [], "floatingips": []}
for lb in lb_api.load_balancers():
    shown = lb_api.get_load_balancer(lb.id)
    out["loadbalancers"].append({
        "id": shown.id, "name": shown.name, "provisioning_status": shown.provisioning_status,
        "vip_address": shown.vip_address, "vip_port_id": shown.vip_port_id, "tags": shown.tags,
        "description": shown.description,
    })
for listener in lb_api.listeners():
    out["listeners"].append({
        "name": listener.name, "protocol": listener.protocol, "protocol_port": listener.protocol_port,
        "default_pool_id": listener.default_pool_id,
        "load_balancer_ids": [ref["id"] for ref in listener.load_balancers],
    })
for pool in lb_api.pools():
    members = [
        {"name": m.name, "address": m.address, "protocol_port": m.protocol_port}
        for m in lb_api.members(pool.id)
    ]
    out["pools"].append({
        "id": pool.id, "name": pool.name, "protocol": pool.protocol, "lb_algorithm": pool.lb_algorithm,
        "members": sorted(members, key=lambda m: m["name"]),
    })
for monitor in lb_api.health_monitors():
    out["healthmonitors"].append({"name": monitor.name, "type": monitor.type})
for ip in conn.network.ips():
    shown = conn.network.get_ip(ip.id)
    out["floatingips"].append({
        "floating_ip_address": shown.floating_ip_address, "port_id": shown.port_id,
        "description": shown.description,
    })
print(json.dumps(out))
