"""A zone cut off from the others: one nftables table on the host that drops forwarded traffic
between the zone's podman bridge and every other zone's bridge, both ways. Deleting the table
heals it. Traffic between the host and the pods (the gateway's published port, the emulated
Kubernetes API) is not forwarded between bridges and keeps flowing, as a client outside the
cluster and the API server would still reach a zone whose links to the other zones broke."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping


def nft(script: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        ["nft", "-f", "-"], input=script, capture_output=True, text=True, timeout=30, check=False
    )
    if check and proc.returncode != 0:
        raise RuntimeError(f"nft: {proc.stderr.strip()}\n{script}")
    return proc


def nft_missing() -> str | None:
    """Why a zone cannot be cut here, or None."""
    if shutil.which("nft") is None:
        return "nft is not installed (scripts/install-deps.sh installs nftables)"
    proc = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True, check=False)
    return None if proc.returncode == 0 else f"nft cannot run here: {proc.stderr.strip()[:200]}"


class ZoneCut:
    """``cut(zone)`` / ``heal()`` over the bridges of a simulation (zone -> interface)."""

    def __init__(self, table: str, bridges: Mapping[str, str]) -> None:
        self.table = table
        self.bridges = dict(bridges)
        self.zone: str | None = None

    def cut(self, zone: str) -> None:
        inside = f'"{self.bridges[zone]}"'
        others = ", ".join(f'"{b}"' for z, b in sorted(self.bridges.items()) if z != zone)
        nft(
            f"table inet {self.table} {{\n"
            "  chain forward {\n"
            "    type filter hook forward priority filter - 10; policy accept;\n"
            f"    iifname {inside} oifname {{ {others} }} drop\n"
            f"    iifname {{ {others} }} oifname {inside} drop\n"
            "  }\n"
            "}\n"
        )
        self.zone = zone

    def heal(self) -> None:
        """Delete the table (no error when there is none: safe in a teardown)."""
        nft(f"delete table inet {self.table}\n", check=False)
        self.zone = None

    def active(self) -> bool:
        proc = subprocess.run(
            ["nft", "list", "table", "inet", self.table], capture_output=True, check=False
        )
        return proc.returncode == 0
