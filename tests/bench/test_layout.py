"""Where the bench puts each process: the layout is the machine's, not the cores the bench process (the load
generator) is pinned to once the run starts."""

import os

import pytest

from bench.config import BARE, BASELINE, NULL, OURS, OURS_2W, PEER, BenchConfig
from bench.systems import cpu_layout, launch

pytestmark = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="pinning needs two cores")


@pytest.fixture
def pinned_like_the_run():
    """The configuration made first, then this process pinned to the generator's cores, as run_benchmark does."""
    cfg = BenchConfig()
    before = os.sched_getaffinity(0)
    _, generator = cpu_layout(cfg)
    assert generator is not None  # the default configuration pins the model path
    os.sched_setaffinity(0, generator)
    yield cfg, before
    os.sched_setaffinity(0, before)


def test_the_layout_survives_the_generator_pinning_itself(pinned_like_the_run):
    cfg, before = pinned_like_the_run
    model, rest = cpu_layout(cfg)
    assert model == {0} and rest == before - {0}


@pytest.mark.parametrize(
    ("server", "model", "cpus", "model_cpus"),
    [
        (OURS, "minilm", "rest", "model"),  # HTTP worker beside the generator, the model process on the model core
        (PEER, "minilm", "rest", None),  # the peer pins its inference worker itself (BENCH_MODEL_CPUS)
        (BASELINE, "minilm", "model", None),
        (OURS, NULL, "model", None),
        (OURS_2W, NULL, "all", None),
        (BARE, NULL, "model", None),
    ],
)
def test_each_system_gets_its_cores(pinned_like_the_run, tmp_path, server, model, cpus, model_cpus):
    cfg, before = pinned_like_the_run
    cores = {"model": {0}, "rest": before - {0}, "all": before}
    how = launch(server, NULL if model == NULL else str(tmp_path), 1234, cfg, tmp_path)
    assert how.cpus == cores[cpus]
    assert how.model_cpus == (cores[model_cpus] if model_cpus else None)
    if server == PEER:
        assert how.env["BENCH_MODEL_CPUS"] == "0"
