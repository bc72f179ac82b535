"""What the network promises, per environment."""

import pytest
from aws_cdk.assertions import Match

from gpu_inference_constructs.networking.network import DEFAULT_INTERFACE_ENDPOINTS


def test_subnets_are_public_for_the_load_balancer_and_private_for_the_fleet(network, synthesized):
    name, template = network
    zones = synthesized.stages[name].config.network.max_azs
    subnets = template.find_resources("AWS::EC2::Subnet")
    public = [s for s in subnets.values() if s["Properties"]["MapPublicIpOnLaunch"] is True]
    assert public == [], "no subnet hands out public IPs at launch"
    types = sorted(
        tag["Value"] for s in subnets.values() for tag in s["Properties"]["Tags"] if tag["Key"] == "aws-cdk:subnet-type"
    )
    assert types == ["Isolated"] * zones + ["Public"] * zones


def test_no_nat_gateway_by_default(network):
    _, template = network
    template.resource_count_is("AWS::EC2::NatGateway", 0)
    template.resource_count_is("AWS::EC2::EIP", 0)


def test_private_route_tables_have_no_route_to_the_internet(network):
    _, template = network
    routes = template.find_resources("AWS::EC2::Route")
    private_tables = {
        logical_id
        for logical_id, table in template.find_resources("AWS::EC2::RouteTable").items()
        if "private" in logical_id.lower()
    }
    for route in routes.values():
        assert route["Properties"]["RouteTableId"]["Ref"] not in private_tables


def test_s3_gateway_endpoint_serves_the_private_subnets(network):
    _, template = network
    template.has_resource_properties(
        "AWS::EC2::VPCEndpoint",
        {
            "VpcEndpointType": "Gateway",
            "ServiceName": {"Fn::Join": ["", ["com.amazonaws.", {"Ref": "AWS::Region"}, ".s3"]]},
            "RouteTableIds": Match.any_value(),
        },
    )


@pytest.mark.parametrize("service", DEFAULT_INTERFACE_ENDPOINTS)
def test_each_interface_endpoint_is_private_and_guarded(network, synthesized, service):
    name, template = network
    endpoints = [
        e["Properties"]
        for e in template.find_resources(
            "AWS::EC2::VPCEndpoint", {"Properties": {"VpcEndpointType": "Interface"}}
        ).values()
        if e["Properties"]["ServiceName"] == f"com.amazonaws.{synthesized.stages[name].config.region}.{service}"
    ]
    assert len(endpoints) == 1, f"one {service} endpoint"
    endpoint = endpoints[0]
    assert endpoint["PrivateDnsEnabled"] is True
    assert len(endpoint["SecurityGroupIds"]) == 1
    assert all("privateSubnet" in subnet["Ref"] for subnet in endpoint["SubnetIds"])


def test_endpoint_security_group_allows_only_https_from_the_vpc(network, synthesized):
    name, template = network
    cidr = synthesized.stages[name].config.network.vpc_cidr
    groups = template.find_resources(
        "AWS::EC2::SecurityGroup", {"Properties": {"GroupDescription": Match.string_like_regexp("endpoints")}}
    )
    (group,) = groups.values()
    assert group["Properties"]["SecurityGroupIngress"] == [
        {"CidrIp": cidr, "Description": "HTTPS from the VPC", "FromPort": 443, "IpProtocol": "tcp", "ToPort": 443}
    ]
    assert group["Properties"]["SecurityGroupEgress"][0]["CidrIp"] == "255.255.255.255/32", "no egress"


def test_flow_logs_capture_all_traffic_to_an_encrypted_log_group(network, synthesized):
    name, template = network
    retention = synthesized.stages[name].config.network.flow_log_retention_days
    template.has_resource_properties(
        "AWS::EC2::FlowLog", {"ResourceType": "VPC", "TrafficType": "ALL", "LogDestinationType": "cloud-watch-logs"}
    )
    template.has_resource_properties(
        "AWS::Logs::LogGroup", {"KmsKeyId": {"Fn::GetAtt": [Match.any_value(), "Arn"]}, "RetentionInDays": retention}
    )
    template.has_resource_properties("AWS::KMS::Key", {"EnableKeyRotation": True})


def test_default_security_group_is_restricted(network):
    _, template = network
    template.resource_count_is("Custom::VpcRestrictDefaultSG", 1)


def test_vpc_uses_the_configured_cidr(network, synthesized):
    name, template = network
    template.has_resource_properties("AWS::EC2::VPC", {"CidrBlock": synthesized.stages[name].config.network.vpc_cidr})
