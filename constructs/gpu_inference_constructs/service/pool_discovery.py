"""How a pool's tasks find each other for model affinity: a Cloud Map private DNS namespace of the pool's own, in
which ECS registers every running task of the pool's service (one A record per task's awsvpc address, TTL
DISCOVERY_TTL_SECONDS), and a rule that lets the tasks reach each other on the server's port. The server looks the
name up every few seconds (POOL_PEER_DNS_NAME) and forwards a request to the task that owns its model.

One namespace per pool rather than per environment: the pool's stack owns all of its discovery (no cross-stack
reference, deleted with the pool), and its name, ``<pool>.<environment>.<name_prefix>.internal``, is unique per VPC
as Route 53 requires of private hosted zones with overlapping names. Queries go to the VPC's Route 53 Resolver, which
answers for the private hosted zone Cloud Map creates: no VPC endpoint and no egress beyond the VPC."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_servicediscovery as servicediscovery
from constructs import Construct

# Route 53 resolvers cache a task's record this long; a server re-reads the name more often than that
# (POOL_PEER_REFRESH_SECONDS, 5 s) and leaves out a task that fails a hop at once, so a stopped task costs at most one
# failed-over request per peer.
DISCOVERY_TTL_SECONDS = 10
DISCOVERY_SERVICE_NAME = "tasks"


def discovery_namespace_name(pool_name: str, environment_name: str, name_prefix: str) -> str:
    return f"{pool_name}.{environment_name}.{name_prefix}.internal"


class PoolDiscovery(Construct):
    """Registers ``service``'s tasks in a private DNS namespace of their own and admits the tasks' group to itself on
    ``port``. Attributes: ``namespace`` (the PrivateDnsNamespace), ``cloud_map_service``, ``dns_name`` (the name
    whose A records are the pool's running tasks: ``tasks.<namespace>``)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        service: ecs.Ec2Service,
        vpc: ec2.IVpc,
        security_group: ec2.SecurityGroup,
        port: int,
        pool_name: str,
        environment_name: str,
        name_prefix: str,
    ) -> None:
        super().__init__(scope, construct_id)
        namespace_name = discovery_namespace_name(pool_name, environment_name, name_prefix)
        self.namespace = servicediscovery.PrivateDnsNamespace(
            self,
            "Namespace",
            name=namespace_name,
            vpc=vpc,
            description=f"the {pool_name} pool's tasks ({environment_name}), for model affinity between them",
        )
        self.cloud_map_service = service.enable_cloud_map(
            cloud_map_namespace=self.namespace,
            name=DISCOVERY_SERVICE_NAME,
            dns_record_type=servicediscovery.DnsRecordType.A,
            dns_ttl=cdk.Duration.seconds(DISCOVERY_TTL_SECONDS),
        )
        self.dns_name = f"{DISCOVERY_SERVICE_NAME}.{namespace_name}"
        security_group.connections.allow_internally(
            ec2.Port.tcp(port), "pool peers: requests forwarded to a model's owner"
        )
