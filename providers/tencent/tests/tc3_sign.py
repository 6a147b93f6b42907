"""Signs requests with the official SDK's own TC3 code path (tencentcloud-sdk-python-common
AbstractClient._get_tc3_signature) and prints one signature per input line.

stdin: JSON lines {"secret_key", "service", "host", "content_type", "body", "timestamp"}
"""
import json
import sys
from datetime import datetime, timezone

from tencentcloud.common.abstract_client import AbstractClient


class _Request:
    def __init__(self, host, content_type, body, timestamp):
        self.method = "POST"
        self.uri = "/"
        self.data = body
        self.header = {"Host": host, "Content-Type": content_type, "X-TC-Timestamp": str(timestamp)}


def main():
    client = AbstractClient.__new__(AbstractClient)
    for line in sys.stdin:
        case = json.loads(line)
        date = datetime.fromtimestamp(case["timestamp"], tz=timezone.utc).strftime("%Y-%m-%d")
        request = _Request(case["host"], case["content_type"], case["body"], case["timestamp"])
        print(client._get_tc3_signature({}, request, date, case["service"], case["secret_key"]))


if __name__ == "__main__":
    main()
