"""An outsider's view of a CLB endpoint through the official Tencent Cloud Python SDK
(tencentcloud-sdk-python-clb): every CLB with its listeners and their targets, and the security
groups bound to it with their policies (read through the SDK's CommonClient for VPC API
2017-03-12, which tencentcloud-sdk-python-common ships), as JSON.

usage: tencentcloud_view.py ENDPOINT_URL SECRET_ID SECRET_KEY REGION
"""
import json
import sys
from urllib.parse import urlparse

from tencentcloud.clb.v20180317 import clb_client, models
from tencentcloud.common import credential
from tencentcloud.common.common_client import CommonClient
from tencentcloud.common.profile.client_profile import ClientProfile
from tencentcloud.common.profile.http_profile import HttpProfile


def main():
    url, secret_id, secret_key, region = sys.argv[1:5]
    parsed = urlparse(url)
    http = HttpProfile(protocol=parsed.scheme, endpoint=parsed.netloc)
    client = clb_client.ClbClient(
        credential.Credential(secret_id, secret_key), region, ClientProfile(httpProfile=http)
    )
    vpc = CommonClient("vpc", "2017-03-12", credential.Credential(secret_id, secret_key), region,
                       profile=ClientProfile(httpProfile=http))

    def groups(ids):
        found = []
        for group_id in ids or []:
            group = vpc.call_json("DescribeSecurityGroups", {"SecurityGroupIds": [group_id]})
            policies = vpc.call_json("DescribeSecurityGroupPolicies", {"SecurityGroupId": group_id})
            described = group["Response"]["SecurityGroupSet"][0]
            found.append({
                "id": group_id,
                "name": described["SecurityGroupName"],
                "tags": {t["Key"]: t["Value"] for t in described.get("TagSet") or []},
                "ingress": [
                    {"protocol": p["Protocol"], "port": p["Port"], "action": p["Action"],
                     "cidr": p.get("CidrBlock") or p.get("Ipv6CidrBlock")}
                    for p in policies["Response"]["SecurityGroupPolicySet"]["Ingress"]
                ],
            })
        return found

    balancers = []
    offset = 0
    while True:
        request = models.DescribeLoadBalancersRequest()
        request.from_json_string(json.dumps({"Offset": offset, "Limit": 100}))
        page = client.DescribeLoadBalancers(request)
        for lb in page.LoadBalancerSet or []:
            listeners = models.DescribeListenersRequest()
            listeners.LoadBalancerId = lb.LoadBalancerId
            found = client.DescribeListeners(listeners).Listeners or []
            targets = {}
            if found:
                request = models.DescribeTargetsRequest()
                request.LoadBalancerId = lb.LoadBalancerId
                for listener in client.DescribeTargets(request).Listeners or []:
                    targets[listener.ListenerId] = sorted(
                        "%s:%d" % ((t.PrivateIpAddresses or [""])[0] if t.Type == "ENI" else t.InstanceId, t.Port) for t in listener.Targets or []
                    )
            balancers.append({
                "id": lb.LoadBalancerId,
                "name": lb.LoadBalancerName,
                "type": lb.LoadBalancerType,
                "subnet": lb.SubnetId,
                "vips": lb.LoadBalancerVips,
                "status": lb.Status,
                "tags": {t.TagKey: t.TagValue for t in lb.Tags or []},
                "charge": lb.NetworkAttributes.InternetChargeType if lb.NetworkAttributes else None,
                "bandwidth": lb.NetworkAttributes.InternetMaxBandwidthOut if lb.NetworkAttributes else None,
                "security_groups": groups(lb.SecureGroups),
                "listeners": [
                    {"id": l.ListenerId, "name": l.ListenerName, "protocol": l.Protocol,
                     "port": l.Port, "targets": targets.get(l.ListenerId, [])}
                    for l in found
                ],
            })
        offset += len(page.LoadBalancerSet or [])
        if not page.LoadBalancerSet or offset >= page.TotalCount:
            break
    print(json.dumps(balancers, sort_keys=True))


if __name__ == "__main__":
    main()
