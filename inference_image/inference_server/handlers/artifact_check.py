"""What the publishing command checks before it uploads a torch.export artifact: the declaration parses, the
archive has no pickled entries, and the program takes and returns what model.json declares."""

from __future__ import annotations

from pathlib import Path

from .declaration import DeclarationError, read_declaration
from .export_program import ProgramError, check_program, load_program

EXPORT_TASKS = ("torch-export", "image-classification")


class ArtifactCheckError(ValueError):
    pass


def check_export_artifact(model_dir: Path, task: str) -> None:
    """Raise ArtifactCheckError saying what is wrong with a torch-export or image-classification artifact."""
    try:
        declaration = read_declaration(model_dir, image=task == "image-classification")
        check_program(load_program(model_dir / declaration.program), declaration, max_batch_size=1)
    except (DeclarationError, ProgramError) as exc:
        raise ArtifactCheckError(f"{model_dir} is not a valid {task} artifact: {exc}") from None
