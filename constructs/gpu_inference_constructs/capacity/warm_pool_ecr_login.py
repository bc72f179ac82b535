"""ECR's GetAuthorizationToken with the instance role's credentials, in the standard library only: the warm pool's
user data (warm_pool.py) writes this file onto the instance and pipes its output into
``docker login --username AWS --password-stdin <registry>``. The ECS-optimized Amazon Linux 2023 AMIs are built
from AL2023 minimal and install no AWS CLI (aws/amazon-ecs-ami, variables.pkr.hcl ``packages_al2023``); python3 is
there (cloud-init runs on it), Python 3.9 on AL2023: this file keeps to 3.9's standard library (no ``datetime.UTC``).
Signature Version 4 as the AWS General Reference describes it; the tests sign the same request with botocore and
compare."""

import base64
import datetime
import hashlib
import hmac
import json
import sys
import urllib.request

IMDS = "http://169.254.169.254/latest"
TARGET = "AmazonEC2ContainerRegistry_V20150921.GetAuthorizationToken"


def _imds(path, token=None, method="GET"):
    headers = {"X-aws-ec2-metadata-token": token} if token else {"X-aws-ec2-metadata-token-ttl-seconds": "300"}
    with urllib.request.urlopen(urllib.request.Request(IMDS + path, method=method, headers=headers), timeout=5) as r:
        return r.read().decode()


def instance_credentials():
    """The instance role's temporary credentials from IMDSv2 (the launch template requires tokens)."""
    token = _imds("/api/token", method="PUT")
    role = _imds("/meta-data/iam/security-credentials/", token).split()[0]
    return json.loads(_imds("/meta-data/iam/security-credentials/" + role, token))


def _hmac(key, text):
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def signed_headers(host, region, service, target, body, credentials, now):
    """The headers of a signed POST of ``body`` to ``https://<host>/`` (JSON 1.1 protocol, ``X-Amz-Target``)."""
    stamp, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    headers = {"content-type": "application/x-amz-json-1.1", "host": host, "x-amz-date": stamp,
               "x-amz-target": target}
    if credentials.get("Token"):
        headers["x-amz-security-token"] = credentials["Token"]
    names = ";".join(sorted(headers))
    canonical = "\n".join(["POST", "/", "", *(f"{name}:{headers[name]}" for name in sorted(headers)), "", names,
                           hashlib.sha256(body).hexdigest()])
    scope = f"{day}/{region}/{service}/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", stamp, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key = _hmac(_hmac(_hmac(_hmac(("AWS4" + credentials["SecretAccessKey"]).encode(), day), region), service),
                "aws4_request")
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    headers["authorization"] = (f"AWS4-HMAC-SHA256 Credential={credentials['AccessKeyId']}/{scope}, "
                                f"SignedHeaders={names}, Signature={signature}")
    return headers


def login_password(region, credentials, now=None, post=None):
    """The password ``docker login --username AWS`` takes for the region's registries."""
    host = f"api.ecr.{region}.amazonaws.com"
    body = b"{}"
    headers = signed_headers(host, region, "ecr", TARGET, body, credentials,
                             now or datetime.datetime.now(datetime.timezone.utc))  # noqa: UP017 - Python 3.9
    if post is None:
        request = urllib.request.Request(f"https://{host}/", data=body, method="POST", headers=headers)
        with urllib.request.urlopen(request, timeout=10) as response:
            answer = json.loads(response.read())
    else:
        answer = post(f"https://{host}/", body, headers)
    token = base64.b64decode(answer["authorizationData"][0]["authorizationToken"]).decode()
    user, _, password = token.partition(":")
    if user != "AWS":
        raise SystemExit(f"unexpected ECR token user {user!r}")
    return password


if __name__ == "__main__":
    print(login_password(sys.argv[1], instance_credentials()))
