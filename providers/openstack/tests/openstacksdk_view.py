"""Lists and shows what the mock holds through the official Python openstacksdk; prints JSON.

Usage: openstacksdk_view.py AUTH_URL USERNAME PASSWORD PROJECT [ADDRESS,...]

Everything goes through the SDK's normal path: Keystone password auth, the catalog, version
discovery of the load-balancer and network endpoints, then for every resource kind one list
call and one show call per listed item. The output maps each kind to the shown documents
(`to_dict(computed=False)`, so exactly what the SDK parsed from the wire), plus the ids the
list returned, so the caller can check that list and show agree with each other and with the
mock's own state. With ADDRESS,... also the ports the SDK lists with one `fixed_ips` filter per
address (`ports_by_fixed_ip`), as kube-lb looks up the nodes' ports to find the member subnet.
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
net_api = conn.network


def view(listed, show):
    """The ids a list returned and each item shown on its own."""
    listed = list(listed)
    return {
        "listed": [item.id for item in listed],
        "shown": [show(item).to_dict(computed=False) for item in listed],
    }


out = {
    "loadbalancers": view(lb_api.load_balancers(), lambda lb: lb_api.get_load_balancer(lb.id)),
    "listeners": view(lb_api.listeners(), lambda li: lb_api.get_listener(li.id)),
    "pools": view(lb_api.pools(), lambda pool: lb_api.get_pool(pool.id)),
    "healthmonitors": view(lb_api.health_monitors(), lambda hm: lb_api.get_health_monitor(hm.id)),
    "members": {"listed": [], "shown": []},
    "floatingips": view(net_api.ips(), lambda ip: net_api.get_ip(ip.id)),
    "ports": view(net_api.ports(), lambda port: net_api.get_port(port.id)),
    "networks": view(net_api.networks(), lambda net: net_api.get_network(net.id)),
    "subnets": view(net_api.subnets(), lambda subnet: net_api.get_subnet(subnet.id)),
    "security_groups": view(net_api.security_groups(), lambda sg: net_api.get_security_group(sg.id)),
    "security_group_rules": view(
        net_api.security_group_rules(), lambda rule: net_api.get_security_group_rule(rule.id)
    ),
}
for pool_id in out["pools"]["listed"]:
    members = view(lb_api.members(pool_id), lambda m, pool_id=pool_id: lb_api.get_member(m.id, pool_id))
    for shown in members["shown"]:
        shown["pool_id"] = pool_id
    out["members"]["listed"] += members["listed"]
    out["members"]["shown"] += members["shown"]

if len(sys.argv) > 5:
    wanted = [f"ip_address={address}" for address in sys.argv[5].split(",")]
    out["ports_by_fixed_ip"] = [port.id for port in net_api.ports(fixed_ips=wanted)]

project_id = conn.current_project_id
out["octavia_quota"] = lb_api.get_quota(project_id).to_dict(computed=False)
out["neutron_quota"] = net_api.get_quota(project_id).to_dict(computed=False)
print(json.dumps(out, default=str))
