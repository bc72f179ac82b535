"""What every model of an environment shares: GPU capacity, the load balancer, the model store, keys, the topic.

Each model is its own stack (stacks/model_stack.py) that builds on this one. The construct IDs here are the
ones the single-stack layout had, so these resources keep their logical IDs.
"""

from __future__ import annotations

from typing import cast

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sns as sns
from constructs import Construct

from gpu_inference_constructs import (
    GpuCapacity,
    GpuCapacityProps,
    InferenceEnvironment,
    InferenceLoadBalancer,
    InferenceMonitoring,
    InferenceNetwork,
    ModelStore,
    NeuronCapacity,
    NeuronCapacityProps,
    NotificationTopic,
    ResultCache,
    ResultCacheProps,
    api_keys_secret,
    grant_logs_service,
)

from .config import EnvironmentConfig


def load_balancer_id(number: int) -> str:
    return "LoadBalancer" if number == 1 else f"LoadBalancer{number}"


class InferenceStack(cdk.Stack):
    def __init__(
        self, scope: Construct, construct_id: str, *, config: EnvironmentConfig, network: InferenceNetwork, **kwargs
    ) -> None:
        super().__init__(
            scope,
            construct_id,
            description="GPU inference: shared capacity, load balancer, model store, keys and alarms topic",
            **kwargs,
        )
        retain = cdk.RemovalPolicy.RETAIN if config.model_store.retain_on_delete else cdk.RemovalPolicy.DESTROY
        self.notifications = NotificationTopic(self, "Notifications", emails=config.alarm_emails)
        # Before the capacity: a group with a warm pool encrypts its launch function's log group with it.
        self.logs_key = kms.Key(
            self, "LogsKey", description="Encrypts the model servers' log groups", enable_key_rotation=True
        )
        grant_logs_service(cast(kms.IKey, self.logs_key), self.region, self.account)
        # Who the environment's constructs belong to, given once to each (its models' too, from their stacks).
        self.inference_environment = InferenceEnvironment(
            name=config.name,
            topic=cast(sns.ITopic, self.notifications.topic),
            logs_key=cast(kms.IKey, self.logs_key),
            log_retention_days=config.log_retention_days,
        )
        self.capacity = GpuCapacity(
            self,
            "GpuCapacity",
            vpc=network.vpc,
            subnets=network.private_subnets,
            props=config.capacity,
            environment=self.inference_environment,
        )
        # Capacity of another shape (4-GPU instances for tensor-parallel models, Inferentia2): more providers of the
        # same cluster.
        self.capacity_groups: dict[str, GpuCapacity | NeuronCapacity] = {
            name: self._capacity_group(name, group.capacity, network) for name, group in config.capacity_groups.items()
        }
        self._placement = config.model_placement()
        self.model_store = ModelStore(self, "ModelStore", props=config.model_store)

        # Its own key, so only roles this account grants (the tasks' execution roles, through Secrets Manager) decrypt
        # it.
        self.api_keys_key = kms.Key(
            self,
            "ApiKeysKey",
            description="Encrypts the client API-key secret",
            enable_key_rotation=True,
            removal_policy=retain,
        )
        # A JSON object of key names to keys: one per client, so one can be revoked alone (docs/security.md).
        self.api_keys = api_keys_secret(
            self, "ApiKeys", encryption_key=cast(kms.IKey, self.api_keys_key), removal_policy=retain
        )

        # One load balancer per number models[].load_balancer names; the first keeps the single-balancer construct ID.
        self.load_balancers = {
            number: InferenceLoadBalancer(
                self,
                load_balancer_id(number),
                vpc=network.vpc,
                props=config.load_balancer,
                access_logs_bucket=self.model_store.access_logs_bucket,
                configured_load=config.configured_load_for(models),
                longest_request_seconds=max(config.server_of(m).longest_request_seconds for m in models),
            )
            for number, models in config.load_balancer_groups().items()
        }
        self.load_balancer = self.load_balancers[1]
        self._load_balancer_of = {model.name: config.server_config(model).load_balancer for model in config.models}
        for prewarm in config.scaling.capacity_prewarm:
            self.capacity.add_prewarm(prewarm)
        self.monitoring = InferenceMonitoring(
            self,
            "Monitoring",
            environment=self.inference_environment,
            model_names=[model.name for model in config.models],
            load_balancer=self.load_balancer,
            capacity=self.capacity,
            props=config.monitoring,
            more_capacity=list(self.capacity_groups.values()),
            more_load_balancers=[lb for number, lb in self.load_balancers.items() if number != 1],
        )
        self.result_cache = self._result_cache(config, network, config.cache) if config.cache is not None else None
        firelens = config.telemetry.firelens
        self.log_archive = (
            self._log_archive(config, retain)
            if firelens is not None and firelens.archive is not None and firelens.archive.s3
            else None
        )
        cdk.CfnOutput(self, "LoadBalancerDns", value=self.load_balancer.load_balancer.load_balancer_dns_name)
        for number, balancer in self.load_balancers.items():
            if number != 1:
                cdk.CfnOutput(
                    self,
                    f"LoadBalancerDns{number}",
                    value=balancer.load_balancer.load_balancer_dns_name,
                    description=f"Load balancer {number}: serves the models whose load_balancer is {number}",
                )
        cdk.CfnOutput(
            self,
            "ModelBucket",
            value=self.model_store.bucket.bucket_name,
            description="Publish models under models/<name>/<version>/",
        )

    def _log_archive(self, config: EnvironmentConfig, removal: cdk.RemovalPolicy) -> s3.Bucket:
        """The servers' archived logs (FireLens's S3 output): the logs key, TLS only, kept as long as the log groups."""
        days = cdk.Duration.days(config.log_retention_days)
        bucket = s3.Bucket(
            self,
            "LogArchive",
            encryption=s3.BucketEncryption.KMS,
            encryption_key=cast(kms.IKey, self.logs_key),
            bucket_key_enabled=True,
            enforce_ssl=True,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            versioned=True,
            lifecycle_rules=[s3.LifecycleRule(id="expire-logs", expiration=days, noncurrent_version_expiration=days)],
            removal_policy=removal,
        )
        # Access logging granted by bucket policy whatever the feature flags (an ACL fails on BucketOwnerEnforced), as
        # ModelStore does for the model bucket.
        access_logs, prefix = self.model_store.access_logs_bucket, "log-archive/"
        cast(s3.CfnBucket, bucket.node.default_child).logging_configuration = s3.CfnBucket.LoggingConfigurationProperty(
            destination_bucket_name=access_logs.bucket_name, log_file_prefix=prefix
        )
        access_logs.add_to_resource_policy(
            iam.PolicyStatement(
                principals=[cast(iam.IPrincipal, iam.ServicePrincipal("logging.s3.amazonaws.com"))],
                actions=["s3:PutObject"],
                resources=[access_logs.arn_for_objects(f"{prefix}*")],
                conditions={
                    "ArnLike": {"aws:SourceArn": bucket.bucket_arn},
                    "StringEquals": {"aws:SourceAccount": self.account},
                },
            )
        )
        return bucket

    def load_balancer_for(self, model_name: str) -> InferenceLoadBalancer:
        """The load balancer that serves a model (its ``load_balancer`` number)."""
        return self.load_balancers[self._load_balancer_of[model_name]]

    def _result_cache(
        self, config: EnvironmentConfig, network: InferenceNetwork, props: ResultCacheProps
    ) -> ResultCache:
        """The environment's shared result cache, its alarms on the topic and its cost on the dashboard."""
        cache = ResultCache(
            self,
            "ResultCache",
            vpc=network.vpc,
            subnets=network.private_subnets,
            props=props,
            environment=self.inference_environment,
        )
        cache.add_connection_failure_alarm(self)
        self.monitoring.dashboard.add_widgets(
            cdk.aws_cloudwatch.GraphWidget(
                title="Result cache cost (USD an hour) and hit rate",
                left=[cache.metric_cost_per_hour()],
                right=[cache.metric("CacheHitRate", "Average")],
                width=24,
            )
        )
        return cache

    def _capacity_group(
        self, name: str, props: GpuCapacityProps | NeuronCapacityProps, network: InferenceNetwork
    ) -> GpuCapacity | NeuronCapacity:
        """A capacity group, another provider of the environment's cluster: Inferentia2 (``NeuronCapacity-<name>``)
        where its props are Neuron's, else GPU (``GpuCapacity-<name>``)."""
        if isinstance(props, NeuronCapacityProps):
            return NeuronCapacity(
                self,
                f"NeuronCapacity-{name}",
                vpc=network.vpc,
                subnets=network.private_subnets,
                props=props,
                environment=self.inference_environment,
                cluster=self.capacity.cluster,
            )
        return GpuCapacity(
            self,
            f"GpuCapacity-{name}",
            vpc=network.vpc,
            subnets=network.private_subnets,
            props=props,
            environment=self.inference_environment,
            cluster=self.capacity.cluster,
        )

    def capacity_for(self, model_name: str) -> GpuCapacity | NeuronCapacity:
        """The capacity a model runs on: its capacity group's, else the environment's ``capacity``."""
        group = self._placement.get(model_name)
        return self.capacity_groups[group] if group else self.capacity
