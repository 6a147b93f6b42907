"""An outsider's view of a CLB endpoint through the official Tencent Cloud Python SDK
(tencentcloud-sdk-python-clb): every CLB with its listeners and their targets, as JSON.

usage: tencentcloud_view.py ENDPOINT_URL SECRET_ID SECRET_KEY REGION
"""
import json
import sys
from urllib.parse import urlparse

from tencentcloud.clb.v20180317 import clb_client, models
from tencentcloud.common import credential
from tencentcloud.common.profile.client_profile import ClientProfile
from tencentcloud.common.profile.http_profile import HttpProfile


def main():
    url, secret_id, secret_key, region = sys.argv[1:5]
    parsed = urlparse(url)
    http = HttpProfile(protocol=parsed.scheme, endpoint=parsed.netloc)
    client = clb_client.ClbClient(
        credential.Credential(secret_id, secret_key), region, ClientProfile(httpProfile=http)
    )
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
