"""Issue 53: NeuronServer(image=, fetcher_image=) and NeuronServerProps(image=, fetcher_image=) both gave the Neuron
images, and the preset's silently won. Each image is given once (the props' ECR mirror, or the preset's own
ContainerImage): both is a ConfigError naming the key and the two forms; either alone still works."""

from __future__ import annotations

import pytest
from aws_cdk import aws_ecs as ecs

from gpu_inference_constructs import (
    ConfigError,
    EcrImage,
    NeuronEcrImage,
    NeuronServer,
    NeuronServerProps,
    SglangProps,
    SglangServer,
    VllmProps,
    VllmServer,
)
from gpu_inference_constructs.servers.neuron_props import NEURON_DLC_TAG

OWN_BUILD = ecs.ContainerImage.from_registry("123456789012.dkr.ecr.eu-west-1.amazonaws.com/team/own:1")
NEURON_MIRROR = NeuronEcrImage("mirror/neuron-dlc", NEURON_DLC_TAG)
MIRROR = EcrImage("mirror/image", "1.0")


@pytest.mark.parametrize(
    "make, key",
    [
        (lambda: NeuronServer(NeuronServerProps(image=NEURON_MIRROR), image=OWN_BUILD), "image"),
        (lambda: NeuronServer(NeuronServerProps(fetcher_image=MIRROR), fetcher_image=OWN_BUILD), "fetcher_image"),
        (lambda: VllmServer(VllmProps(image=MIRROR), image=OWN_BUILD), "image"),
        (lambda: VllmServer(VllmProps(collector_image=MIRROR), collector_image=OWN_BUILD), "collector_image"),
        (lambda: SglangServer(SglangProps(fetcher_image=MIRROR), fetcher_image=OWN_BUILD), "fetcher_image"),
    ],
)
def test_an_image_given_on_the_preset_and_in_its_props_is_refused(make, key):
    with pytest.raises(ConfigError, match=rf"^server\.{key}: is given twice.*ECR mirror.*ContainerImage"):
        make()


@pytest.mark.parametrize(
    "make",
    [
        lambda: NeuronServer(NeuronServerProps(image=NEURON_MIRROR, fetcher_image=MIRROR)),
        lambda: NeuronServer(image=OWN_BUILD, fetcher_image=OWN_BUILD),
        lambda: NeuronServer(NeuronServerProps(image=NEURON_MIRROR), fetcher_image=OWN_BUILD),
        lambda: VllmServer(VllmProps(image=MIRROR), fetcher_image=OWN_BUILD),
        lambda: VllmServer(image=OWN_BUILD),
    ],
)
def test_each_image_given_once_is_taken(make):
    make()
