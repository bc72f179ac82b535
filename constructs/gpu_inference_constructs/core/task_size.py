"""What a task reserves beside its server: each sidecar by name, and their (CPU units, MiB) total, so that a task
that does not fit can say the value to write and what each sidecar takes."""

from __future__ import annotations

SidecarPart = tuple[str, int, int]  # (what it is, CPU units, MiB)


class SidecarReservation(tuple[int, int]):
    """(CPU units, MiB) of the containers beside the server, unpacked as before (``cpu, memory = reservation``), and
    ``parts``: each of them."""

    parts: tuple[SidecarPart, ...]

    def __new__(cls, parts: tuple[SidecarPart, ...] = ()) -> SidecarReservation:
        made = super().__new__(cls, (sum(part[1] for part in parts), sum(part[2] for part in parts)))
        made.parts = tuple(parts)
        return made

    def plus(self, name: str, cpu: int, memory_mib: int) -> SidecarReservation:
        """This reservation and one more sidecar (none when it reserves nothing)."""
        return self if (cpu, memory_mib) == (0, 0) else SidecarReservation((*self.parts, (name, cpu, memory_mib)))

    def described(self, index: int) -> str:
        """Each part's share of the CPU units (``index`` 1) or MiB (2): 'model fetcher and scratch owner 256, ...'."""
        return ", ".join(f"{part[0]} {part[index]}" for part in self.parts if part[index])


def reservation_of(sidecars: tuple[int, int]) -> SidecarReservation:
    """``sidecars`` with its parts; a bare (CPU units, MiB) total is one part, 'sidecars'."""
    if isinstance(sidecars, SidecarReservation):
        return sidecars
    return SidecarReservation((("sidecars", sidecars[0], sidecars[1]),))
