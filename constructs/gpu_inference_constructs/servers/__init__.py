"""The server presets, each turning its props and the ``ModelProps`` into a ``ServerContract``: the bundled server (and
its image with a team's handler), vLLM, SGLang, Triton, TGI, Neuron. Importable without aws_cdk (the sizing advisor
reads them). Imported on first use, like the package root's names."""

from typing import TYPE_CHECKING

from ..core.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from .bundled import BundledServer, BundledServerProps, bundled_stop
    from .bundled_signals import BundledScalingProps
    from .handler_image import bundled_server_image
    from .neuron import NeuronServer
    from .neuron_props import NeuronEcrImage, NeuronServerProps
    from .pool import PoolServer
    from .sglang import SglangProps, SglangServer
    from .tgi_triton import TgiProps, TgiServer, TritonProps, TritonServer, tgi_stop, triton_stop
    from .vllm import VllmProps, VllmServer, vllm_stop

__all__ = [
    "BundledScalingProps",
    "BundledServer",
    "BundledServerProps",
    "NeuronEcrImage",
    "NeuronServer",
    "NeuronServerProps",
    "PoolServer",
    "SglangProps",
    "SglangServer",
    "TgiProps",
    "TgiServer",
    "TritonProps",
    "TritonServer",
    "VllmProps",
    "VllmServer",
    "bundled_server_image",
    "bundled_stop",
    "tgi_stop",
    "triton_stop",
    "vllm_stop",
]

_MODULE_OF = {
    "BundledScalingProps": "bundled_signals",
    "BundledServer": "bundled",
    "BundledServerProps": "bundled",
    "NeuronEcrImage": "neuron_props",
    "NeuronServer": "neuron",
    "NeuronServerProps": "neuron_props",
    "PoolServer": "pool",
    "SglangProps": "sglang",
    "SglangServer": "sglang",
    "TgiProps": "tgi_triton",
    "TgiServer": "tgi_triton",
    "TritonProps": "tgi_triton",
    "TritonServer": "tgi_triton",
    "VllmProps": "vllm_props",
    "VllmServer": "vllm",
    "bundled_server_image": "handler_image",
    "bundled_stop": "bundled",
    "tgi_stop": "tgi_triton",
    "triton_stop": "tgi_triton",
    "vllm_stop": "vllm_stop",
}


__getattr__, __dir__ = lazy_exports(__name__, _MODULE_OF)
