"""Lists, with the official bce-python-sdk, the BLB named argv[4], its listeners and backend
servers, the EIP and the security groups bound to it (with their rules, as the BLB and the BCC
API each list them); prints JSON (SDK attribute names, snake_case).

argv: endpoint access_key_id secret_access_key blb_name
"""
import json
import sys

from baidubce.auth.bce_credentials import BceCredentials
from baidubce.bce_client_configuration import BceClientConfiguration
from baidubce.services.bcc.bcc_client import BccClient
from baidubce.services.blb.blb_client import BlbClient
from baidubce.services.eip.eip_client import EipClient


def plain(value):
    if isinstance(value, list):
        return [plain(v) for v in value]
    if hasattr(value, "__dict__"):
        return {k: plain(v) for k, v in vars(value).items() if k != "metadata" and not k.startswith("_")}
    return value


def main():
    endpoint, ak, sk, name = sys.argv[1:5]
    config = BceClientConfiguration(credentials=BceCredentials(ak, sk), endpoint=endpoint)
    blb = BlbClient(config)
    blbs = blb.describe_loadbalancers(name=name, exactly_match=True).blb_list
    out = {"blbs": plain(blbs), "listeners": [], "backends": [], "eips": [],
           "blb_security_groups": [], "security_groups": []}
    if blbs:
        lb = blbs[0].blb_id
        out["listeners"] = plain(blb.describe_all_listeners(lb).listener_list)
        out["backends"] = plain(blb.describe_backend_servers(lb).backend_server_list)
        out["eips"] = plain(EipClient(config).list_eips(instance_type="BLB", instance_id=lb).eip_list)
        bound = blb.describe_security_groups(lb).blb_security_groups
        out["blb_security_groups"] = plain(bound)
        ids = {g.security_group_id for g in bound}
        listed = BccClient(config).list_security_groups(vpc_id=blbs[0].vpc_id).security_groups
        out["security_groups"] = [g for g in plain(listed) if g["id"] in ids]
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
