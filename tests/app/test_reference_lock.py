"""The committed references.lock.json records what `cdk synth` of cdk.json's environments consumes: a change to a
consumed resource's replacing properties that was not accepted (and committed) fails here as well as in synth."""

import json

from stacks.reference_guard import LOCK_FILE, check, consumed_fingerprints
from tests.conftest import ROOT


def test_the_committed_lock_records_every_consumed_resource_as_synthesized(app_synthesized):
    templates = {app_synthesized.stack_names[key]: template for key, template in app_synthesized.templates.items()}
    current = consumed_fingerprints(templates)
    lock = json.loads((ROOT / LOCK_FILE).read_text())
    assert len(current) > 10 and {v["type"] for v in current.values()} >= {
        "AWS::EC2::SecurityGroup",
        "AWS::ElasticLoadBalancingV2::Listener",
        "AWS::ECS::Cluster",
        "AWS::ECS::CapacityProvider",
        "AWS::KMS::Key",
    }
    assert check(lock, current) == []
    assert set(current) <= set(lock)
