"""Drives the mock with the official bce-python-sdk (BLB + EIP clients) and prints, as JSON,
what each step answered: values on success, the BCE error code on failure.

argv: endpoint access_key_id secret_access_key vpc_id subnet_id
"""
import http.client
import json
import sys
import time
import urllib.parse

from baidubce import utils
from baidubce.auth import bce_v1_signer
from baidubce.auth.bce_credentials import BceCredentials
from baidubce.bce_client_configuration import BceClientConfiguration
from baidubce.exception import BceHttpClientError, BceServerError
from baidubce.retry.retry_policy import NoRetryPolicy
from baidubce.services.bcc import bcc_model
from baidubce.services.bcc.bcc_client import BccClient
from baidubce.services.blb.blb_client import BlbClient
from baidubce.services.eip.eip_client import EipClient


def plain(value):
    """BceResponse / Expando trees to JSON-able values."""
    if isinstance(value, list):
        return [plain(v) for v in value]
    if hasattr(value, "__dict__"):
        return {k: plain(v) for k, v in vars(value).items() if k != "metadata" and not k.startswith("_")}
    if isinstance(value, bytes):
        return value.decode("utf-8")
    return value


def attempt(call):
    try:
        return {"ok": plain(call())}
    except BceServerError as e:
        return {"error": e.code, "status": e.status_code}
    except BceHttpClientError as e:
        # The SDK wraps the server's answer once its retry policy gives up.
        inner = e.last_error
        return {"error": getattr(inner, "code", repr(inner)), "status": getattr(inner, "status_code", None)}


def main():
    endpoint, ak, sk, vpc, subnet = sys.argv[1:6]
    out = {}
    config = BceClientConfiguration(
        credentials=BceCredentials(ak, sk), endpoint=endpoint, retry_policy=NoRetryPolicy()
    )
    blb = BlbClient(config)
    eip = EipClient(config)

    created = blb.create_loadbalancer(vpc, subnet, name="sdk-blb", desc="made by the SDK")
    lb = created.blb_id
    out["create"] = plain(created)
    out["status_after_create"] = blb.describe_loadbalancer_detail(lb).status
    out["listener_while_creating"] = attempt(
        lambda: blb.create_tcp_listener(lb, 80, 30080, "RoundRobin")
    )
    deadline = time.time() + 20
    while blb.describe_loadbalancer_detail(lb).status != "available" and time.time() < deadline:
        time.sleep(0.05)
    out["status_later"] = blb.describe_loadbalancer_detail(lb).status

    out["bad_scheduler"] = attempt(lambda: blb.create_tcp_listener(lb, 81, 30081, "Random"))
    out["tcp"] = attempt(
        lambda: blb.create_tcp_listener(lb, 80, 30080, "RoundRobin", health_check_interval=5)
    )
    out["udp_no_check_string"] = attempt(lambda: blb.create_udp_listener(lb, 53, 30053, "RoundRobin"))
    out["udp"] = attempt(
        lambda: blb.create_udp_listener(lb, 53, 30053, "RoundRobin", health_check_string="ping")
    )
    out["duplicate_port"] = attempt(lambda: blb.create_tcp_listener(lb, 80, 30080, "RoundRobin"))
    out["listeners"] = plain(blb.describe_all_listeners(lb).listener_list)
    out["add_backends"] = attempt(
        lambda: blb.add_backend_servers(lb, [{"instanceId": "i-node1", "weight": 100}, {"instanceId": "i-node2", "weight": 50}])
    )
    out["bad_backend"] = attempt(lambda: blb.add_backend_servers(lb, [{"instanceId": "node3", "weight": 100}]))
    out["remove_backend"] = attempt(lambda: blb.remove_backend_servers(lb, ["i-node2"]))
    out["backends"] = plain(blb.describe_backend_servers(lb).backend_server_list)
    out["delete_listener"] = attempt(lambda: blb.delete_listeners(lb, [53]))

    first = eip.create_eip(10, name="sdk-eip", billing=None)
    out["eip_create"] = plain(first)
    out["eip_quota"] = attempt(lambda: eip.create_eip(10, name="sdk-eip-2"))
    out["eip_bind"] = attempt(lambda: eip.bind_eip(first.eip, "BLB", lb))
    out["blb_public_ip"] = blb.describe_loadbalancer_detail(lb).public_ip
    out["eip_release_bound"] = attempt(lambda: eip.release_eip(first.eip))
    out["eips"] = plain(eip.list_eips().eip_list)
    out["eip_unbind"] = attempt(lambda: eip.unbind_eip(first.eip))
    out["eip_release"] = attempt(lambda: eip.release_eip(first.eip))
    out["faulted_describe"] = attempt(lambda: blb.describe_loadbalancers(name="sdk-blb"))
    out["by_name"] = [b.blb_id for b in blb.describe_loadbalancers(name="sdk-blb", exactly_match=True).blb_list]

    wrong = BceClientConfiguration(
        credentials=BceCredentials(ak, sk + "x"), endpoint=endpoint, retry_policy=NoRetryPolicy()
    )
    out["wrong_secret"] = attempt(lambda: BlbClient(wrong).describe_loadbalancers())
    unknown = BceClientConfiguration(
        credentials=BceCredentials("AKUNKNOWN", sk), endpoint=endpoint, retry_policy=NoRetryPolicy()
    )
    out["unknown_key"] = attempt(lambda: BlbClient(unknown).describe_loadbalancers())

    # A correctly signed request whose signing time lies an hour and a half in the past.
    host = urllib.parse.urlparse(endpoint).netloc
    stale = int(time.time()) - 5400
    headers = {b"Host": host.encode(), b"x-bce-date": utils.get_canonical_time(stale)}
    auth = bce_v1_signer.sign(BceCredentials(ak, sk), b"GET", b"/v1/blb", headers, {}, stale, 1800)
    conn = http.client.HTTPConnection(host)
    conn.request("GET", "/v1/blb", headers={"Host": host, "x-bce-date": headers[b"x-bce-date"].decode(), "Authorization": auth.decode()})
    answer = conn.getresponse()
    out["stale"] = {"status": answer.status, "body": json.loads(answer.read())}

    # Security groups (BCC v2) bound to the BLB.
    bcc = BccClient(config)
    rule = bcc_model.SecurityGroupRuleModel(
        remark="sdk", direction="ingress", ethertype="IPv4", portRange="80", protocol="tcp",
        sourceIp="143.231.0.0/16",
    )
    group = bcc.create_security_group("sdk-sg", [rule], vpc_id=vpc, desc="made by the SDK")
    group_id = group.security_group_id
    out["sg_create"] = plain(group)
    out["sg_duplicate_rule"] = attempt(lambda: bcc.authorize_security_group_rule(group_id, rule))
    out["sg_bind"] = attempt(lambda: blb.bind_security_groups(lb, [group_id]))
    out["sg_bound"] = plain(blb.describe_security_groups(lb).blb_security_groups)
    out["sg_delete_bound"] = attempt(lambda: bcc.delete_security_group(group_id))
    out["sg_listed"] = plain(bcc.list_security_groups(vpc_id=vpc).security_groups)

    out["delete_blb"] = attempt(lambda: blb.delete_loadbalancer(lb))
    out["blbs_after"] = plain(blb.describe_loadbalancers().blb_list)
    out["sg_delete_unbound"] = attempt(lambda: bcc.delete_security_group(group_id))
    out["sg_after"] = plain(bcc.list_security_groups(vpc_id=vpc).security_groups)
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
