"""Signs requests with the official bce-python-sdk signer (baidubce.auth.bce_v1_signer).

Reads a JSON list of cases on stdin; each case has access_key_id, secret_access_key, method,
path, query (list of [key, value]), headers (list of [name, value]), timestamp (Unix seconds),
expiration and headers_to_sign (list of lower-case names, or null for the default set).
Prints a JSON list of Authorization header values, one per case.
"""
import json
import sys

from baidubce.auth import bce_v1_signer
from baidubce.auth.bce_credentials import BceCredentials


def b(text):
    return text.encode("utf-8")


def main():
    out = []
    for case in json.load(sys.stdin):
        credentials = BceCredentials(case["access_key_id"], case["secret_access_key"])
        headers = {b(k): b(v) for k, v in case["headers"]}
        params = {b(k): b(v) for k, v in case["query"]}
        to_sign = case["headers_to_sign"]
        if to_sign is not None:
            to_sign = [b(h) for h in to_sign]
        auth = bce_v1_signer.sign(
            credentials,
            b(case["method"]),
            b(case["path"]),
            headers,
            params,
            case["timestamp"],
            case["expiration"],
            to_sign,
        )
        out.append(auth.decode("utf-8"))
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
