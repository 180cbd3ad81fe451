"""How two GPUs of one host are linked, and how fast that link is on paper.

``link_between(i, j)`` reads ``nvidia-smi topo -m`` (the kind of link: ``NV18`` = a
bonded set of 18 NVLinks, ``PIX``/``PXB``/``PHB``/``NODE``/``SYS`` = PCIe paths of
growing length) and ``nvidia-smi nvlink -s`` (each NVLink's rate), and returns a
:class:`Link` whose ``nominal_gbps_per_direction`` is the bound a peer copy is measured
against: links x per-link rate for NVLink, the slower GPU's PCIe link for the rest.
Where nvidia-smi is missing or says nothing about the pair, the Link says "unknown"
and why; nothing here raises for that.

The parsers (:func:`parse_topo_matrix`, :func:`parse_nvlink_status`,
:func:`parse_bus_ids`, :func:`parse_pcie_links`) are pure functions of nvidia-smi's
text, tested on outputs recorded on a 2x H200 machine (tests/data/multi_gpu/).

Device numbers: ``link_between`` takes CUDA ordinals. nvidia-smi numbers GPUs in PCI bus
order, CUDA by default fastest first and after ``CUDA_VISIBLE_DEVICES``; the two are
matched by PCI bus id (cuDeviceGetPCIBusId vs ``nvidia-smi --query-gpu=pci.bus_id``).
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
from typing import Iterable

# PCIe payload rate per lane and direction, GB/s: gen3 8 GT/s with 128b/130b coding,
# doubling with each generation (the same rule as DeviceFacts.implications).
PCIE_GEN3_GBPS_PER_LANE = 0.985
SMI_TIMEOUT_S = 10.0
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_PCIE_KINDS = ("PIX", "PXB", "PHB", "NODE", "SYS")


@dataclasses.dataclass(frozen=True)
class Link:
    """The link between two GPUs as nvidia-smi describes it.

    ``kind``: ``"NV18"`` (18 bonded NVLinks), ``"PIX"``, ``"PXB"``, ``"PHB"``, ``"NODE"``,
    ``"SYS"``, ``"X"`` (the GPU itself) or ``"unknown"``. ``nvlinks``: NVLinks in the
    bond (0 for PCIe). ``per_link_gbps``: one NVLink's rate per direction (GB/s) from
    ``nvidia-smi nvlink -s``. ``nominal_gbps_per_direction``: the rate on paper one way
    (GB/s), None when it cannot be known. ``source`` says where it came from, or why it
    is unknown."""

    kind: str
    nvlinks: int = 0
    per_link_gbps: float | None = None
    nominal_gbps_per_direction: float | None = None
    source: str = ""

    @property
    def is_nvlink(self) -> bool:
        return self.nvlinks > 0

    @property
    def known(self) -> bool:
        return self.kind != "unknown"

    def describe(self) -> str:
        """One line for people: 'NV18: 18 NVLinks x 26.562 GB/s = 478 GB/s per direction'."""
        if not self.known:
            return f"unknown ({self.source})" if self.source else "unknown"
        if self.is_nvlink and self.per_link_gbps and self.nominal_gbps_per_direction:
            return (f"{self.kind}: {self.nvlinks} NVLinks x {self.per_link_gbps:.3f} GB/s = "
                    f"{self.nominal_gbps_per_direction:.0f} GB/s per direction")
        if self.nominal_gbps_per_direction:
            return f"{self.kind} ({_PCIE_MEANING.get(self.kind, 'PCIe')}): " \
                   f"{self.nominal_gbps_per_direction:.0f} GB/s per direction (PCIe)"
        return f"{self.kind} ({_PCIE_MEANING.get(self.kind, 'rate unknown')}), rate unknown"

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


_PCIE_MEANING = {
    "PIX": "at most one PCIe bridge",
    "PXB": "several PCIe bridges",
    "PHB": "through a PCIe host bridge",
    "NODE": "between PCIe host bridges of one NUMA node",
    "SYS": "across NUMA nodes",
}


# --------------------------------------------------------------------------- parsers
@dataclasses.dataclass(frozen=True)
class TopoMatrix:
    """``nvidia-smi topo -m`` between GPUs: ``links[(i, j)]`` is the cell of row GPU i,
    column GPU j (nvidia-smi's numbering)."""

    gpus: tuple[int, ...]
    links: dict[tuple[int, int], str]

    def kind(self, i: int, j: int) -> str | None:
        return self.links.get((i, j))


def _cells(line: str) -> list[str]:
    """A matrix line's cells: tab-separated (nvidia-smi's layout), else whitespace."""
    line = _ANSI.sub("", line.rstrip("\n"))
    return [c.strip() for c in line.split("\t")] if "\t" in line else line.split()


def _is_link_cell(cell: str) -> bool:
    return cell == "X" or cell in _PCIE_KINDS or re.fullmatch(r"NV\d+", cell) is not None


def _is_header(cells: list[str]) -> bool:
    """The matrix's header: its first named cell is GPU0 and the next is not a link (a
    row of the matrix, 'GPU0  X  NV18 ...', has a link there)."""
    named = [c for c in cells if c]
    return len(named) >= 2 and named[0] == "GPU0" and not _is_link_cell(named[1])


def parse_topo_matrix(text: str) -> TopoMatrix:
    """The GPU-to-GPU cells of ``nvidia-smi topo -m``. NIC rows and columns and the
    affinity columns are left out; the legend is ignored. Empty when the text holds no
    matrix (no GPU, an error message)."""
    lines = [l for l in text.splitlines() if l.strip()]
    header = next((l for l in lines if _is_header(_cells(l))), None)
    if header is None:
        return TopoMatrix((), {})
    cols = [c for c in _cells(header) if c]
    # the device columns come first: GPU0 .. GPUn, then NIC0 .. (kept to skip their cells)
    devices = []
    for c in cols:
        if re.fullmatch(r"(GPU|NIC)\d+", c):
            devices.append(c)
        else:
            break
    gpu_cols = {k: int(c[3:]) for k, c in enumerate(devices) if c.startswith("GPU")}
    links: dict[tuple[int, int], str] = {}
    gpus = []
    for line in lines[lines.index(header) + 1:]:
        cells = _cells(line)
        if not cells or not re.fullmatch(r"GPU\d+", cells[0]):
            if cells and cells[0].startswith("Legend"):
                break
            continue
        row = int(cells[0][3:])
        gpus.append(row)
        values = cells[1:1 + len(devices)]
        for k, value in enumerate(values):
            if k in gpu_cols:
                links[(row, gpu_cols[k])] = value
    return TopoMatrix(tuple(gpus), links)


def parse_nvlink_status(text: str) -> dict[int, dict[int, float | None]]:
    """``nvidia-smi nvlink -s``: {GPU: {link: GB/s per direction, None when inactive}}."""
    out: dict[int, dict[int, float | None]] = {}
    gpu = None
    for line in _ANSI.sub("", text).splitlines():
        m = re.match(r"\s*GPU\s+(\d+)\s*:", line)
        if m:
            gpu = int(m.group(1))
            out[gpu] = {}
            continue
        m = re.match(r"\s*Link\s+(\d+)\s*:\s*(.*)$", line)
        if m and gpu is not None:
            rate = re.match(r"([0-9.]+)\s*GB/s", m.group(2).strip())
            out[gpu][int(m.group(1))] = float(rate.group(1)) if rate else None
    return out


def parse_bus_ids(text: str) -> dict[int, str]:
    """``nvidia-smi --query-gpu=index,pci.bus_id --format=csv,noheader``: {index: bus id}
    (normalized with :func:`normalize_bus_id`)."""
    out = {}
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 2 and parts[0].isdigit():
            try:
                out[int(parts[0])] = normalize_bus_id(parts[1])
            except ValueError:
                continue
    return out


def normalize_bus_id(bus_id: str) -> str:
    """'00000000:18:00.0' (nvidia-smi) and '0000:18:00.0' (CUDA) -> '0000:18:00.0'."""
    m = re.fullmatch(r"\s*([0-9a-fA-F]+):([0-9a-fA-F]+):([0-9a-fA-F]+)\.([0-9a-fA-F]+)\s*", bus_id)
    if not m:
        raise ValueError(f"not a PCI bus id: {bus_id!r}")
    dom, bus, dev, fn = (int(g, 16) for g in m.groups())
    return f"{dom:04x}:{bus:02x}:{dev:02x}.{fn:x}"


def parse_pcie_links(text: str) -> dict[int, tuple[int, int]]:
    """``nvidia-smi --query-gpu=index,pcie.link.gen.max,pcie.link.width.max
    --format=csv,noheader``: {index: (generation, lanes)}; rows with '[N/A]' are left out."""
    out = {}
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 3 and all(p.isdigit() for p in parts[:3]):
            out[int(parts[0])] = (int(parts[1]), int(parts[2]))
    return out


def pcie_gbps(generation: int, lanes: int) -> float:
    """PCIe payload rate per direction on paper, GB/s."""
    return PCIE_GEN3_GBPS_PER_LANE * 2 ** (generation - 3) * lanes


# --------------------------------------------------------------------------- the link
def link_from(kind: str | None, nvlink_rates: dict[int, float | None] | None = None,
              pcie: Iterable[tuple[int, int]] = (), source: str = "nvidia-smi") -> Link:
    """The :class:`Link` for one topo cell ``kind``, given the first GPU's NVLink rates
    ({link: GB/s}) and the two GPUs' PCIe links [(generation, lanes), ...]."""
    if not kind:
        return Link("unknown", source=f"{source} names no link between these GPUs")
    m = re.fullmatch(r"NV(\d+)", kind)
    if m:
        n = int(m.group(1))
        active = sorted(r for r in (nvlink_rates or {}).values() if r)
        if not active:
            return Link(kind, n, None, None, f"{source}: topo -m (nvlink -s gave no link rates)")
        per_link = active[len(active) // 2]  # the median active link: all links of a GPU run at one rate
        return Link(kind, n, per_link, n * per_link, f"{source}: topo -m and nvlink -s")
    if kind in _PCIE_KINDS:
        rates = [pcie_gbps(g, w) for g, w in pcie]
        if not rates:
            return Link(kind, 0, None, None, f"{source}: topo -m (no PCIe link generation/width)")
        return Link(kind, 0, None, min(rates), f"{source}: topo -m and the slower GPU's PCIe link (max gen, width)")
    if kind == "X":
        return Link("X", 0, None, None, f"{source}: the same GPU")
    return Link("unknown", source=f"{source} topo -m says {kind!r}, which fullpipe does not know")


def _smi(*args: str) -> str | None:
    """nvidia-smi's output, or None when it is missing or fails."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        p = subprocess.run([exe, *args], capture_output=True, text=True, timeout=SMI_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return None
    return p.stdout if p.returncode == 0 and p.stdout.strip() else None


def _smi_index(ordinal: int, smi_bus_ids: dict[int, str]) -> tuple[int, str]:
    """(nvidia-smi index of CUDA ordinal ``ordinal``, how it was found)."""
    try:
        from . import driver as drv

        drv.call("cuInit", 0)
        dev = drv.call("cuDeviceGet", ordinal)
        raw = drv.call("cuDeviceGetPCIBusId", 32, dev)
        raw = raw.decode(errors="replace") if isinstance(raw, (bytes, bytearray)) else str(raw)
        bus = normalize_bus_id(raw.split("\x00")[0])
    except Exception:  # no driver (CPU machine) or no such device: nvidia-smi's numbering as is
        return ordinal, "CUDA ordinal taken as nvidia-smi index"
    for index, b in smi_bus_ids.items():
        if b == bus:
            return index, "matched by PCI bus id"
    return ordinal, "CUDA ordinal taken as nvidia-smi index (bus id not listed)"


def link_between(i: int, j: int) -> Link:
    """The link between CUDA devices ``i`` and ``j`` (see the module docstring). Never
    raises for a missing or silent nvidia-smi: the Link then says "unknown" and why."""
    for d in (i, j):
        if isinstance(d, bool) or not isinstance(d, int) or d < 0:
            raise ValueError(f"devices are CUDA ordinals (ints >= 0), got {d!r}")
    topo = _smi("topo", "-m")
    if topo is None:
        return Link("unknown", source="nvidia-smi is not installed or gave no topology (topo -m)")
    matrix = parse_topo_matrix(topo)
    bus_ids = parse_bus_ids(_smi("--query-gpu=index,pci.bus_id", "--format=csv,noheader") or "")
    (si, how), (sj, _) = _smi_index(i, bus_ids), _smi_index(j, bus_ids)
    kind = matrix.kind(si, sj)
    if kind is None:
        return Link("unknown", source=f"nvidia-smi topo -m has no cell for GPU{si} -> GPU{sj}")
    rates = parse_nvlink_status(_smi("nvlink", "-s") or "").get(si) if kind.startswith("NV") else None
    pcie = []
    if kind in _PCIE_KINDS:
        links = parse_pcie_links(_smi("--query-gpu=index,pcie.link.gen.max,pcie.link.width.max",
                                      "--format=csv,noheader") or "")
        pcie = [links[k] for k in (si, sj) if k in links]
    link = link_from(kind, rates, pcie)
    return dataclasses.replace(link, source=f"{link.source}; {how}")
