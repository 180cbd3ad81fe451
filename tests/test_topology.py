"""fullpipe.cuda.topology: the parsers on nvidia-smi's real outputs (recorded on a 2x H200
machine, tests/data/multi_gpu/), the Link each kind of cell gives, and link_between through a
stand-in nvidia-smi on PATH (and with none at all)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from fullpipe.cuda import topology as T

DATA = Path(__file__).resolve().parent / "data" / "multi_gpu"
TOPO = (DATA / "topo.txt").read_text()
NVLINK = (DATA / "nvlink.txt").read_text()

# nvidia-smi topo -m of a PCIe machine with NICs (the layout of the 2x H200 one: tab-separated,
# NIC columns after the GPUs, a NIC legend after the matrix)
PCIE_TOPO = (
    "\tGPU0\tGPU1\tGPU2\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
    "GPU0\t X \tPIX\tSYS\tNODE\t0-15\t0\t\tN/A\n"
    "GPU1\tPIX\t X \tSYS\tNODE\t0-15\t0\t\tN/A\n"
    "GPU2\tSYS\tSYS\t X \tSYS\t16-31\t1\t\tN/A\n"
    "NIC0\tNODE\tNODE\tSYS\t X \t\t\t\t\n"
    "\nLegend:\n\n  X    = Self\n  SYS  = Connection traversing PCIe as well as the SMP interconnect\n"
    "\nNIC Legend:\n\n  NIC0: mlx5_0\n"
)


def test_topo_matrix_of_the_h200_pair():
    m = T.parse_topo_matrix(TOPO)
    assert m.gpus == (0, 1)
    assert m.links == {(0, 0): "X", (0, 1): "NV18", (1, 0): "NV18", (1, 1): "X"}


def test_topo_matrix_skips_nic_columns_and_reads_pcie_kinds():
    m = T.parse_topo_matrix(PCIE_TOPO)
    assert m.gpus == (0, 1, 2)
    assert m.kind(0, 1) == "PIX" and m.kind(2, 0) == "SYS" and m.kind(1, 1) == "X"
    assert all(isinstance(k, tuple) and v != "NODE" for k, v in m.links.items())  # NIC cells left out
    spaces = PCIE_TOPO.replace("\t", "   ")  # an nvidia-smi that aligns with spaces
    assert T.parse_topo_matrix(spaces).kind(0, 2) == "SYS"


@pytest.mark.parametrize("text", ["", "NVIDIA-SMI has failed because it couldn't communicate with the driver.\n",
                                  "No devices were found\n"])
def test_topo_matrix_of_no_matrix_is_empty(text):
    assert T.parse_topo_matrix(text).links == {}


def test_nvlink_status_of_the_h200_pair():
    s = T.parse_nvlink_status(NVLINK)
    assert sorted(s) == [0, 1]
    assert [sorted(s[g]) for g in (0, 1)] == [list(range(18))] * 2
    assert {r for g in s.values() for r in g.values()} == {26.562}


def test_nvlink_status_marks_inactive_links():
    text = NVLINK.replace("Link 17: 26.562 GB/s", "Link 17: <inactive>", 1)
    s = T.parse_nvlink_status(text)
    assert s[0][17] is None and s[1][17] == 26.562


def test_the_h200_link_is_18_nvlinks_478_gbps_each_way():
    link = T.link_from(T.parse_topo_matrix(TOPO).kind(0, 1), T.parse_nvlink_status(NVLINK)[0])
    assert (link.kind, link.nvlinks, link.per_link_gbps) == ("NV18", 18, 26.562)
    assert link.nominal_gbps_per_direction == pytest.approx(478.116)
    assert link.is_nvlink and link.known
    assert link.describe() == "NV18: 18 NVLinks x 26.562 GB/s = 478 GB/s per direction"


def test_a_link_with_inactive_nvlinks_counts_the_bond_at_the_active_rate():
    rates = {i: 26.562 for i in range(18)}
    rates[3] = None
    assert T.link_from("NV18", rates).nominal_gbps_per_direction == pytest.approx(18 * 26.562)
    assert T.link_from("NV18", {}).nominal_gbps_per_direction is None  # no rates: the kind alone


def test_pcie_links_take_the_slower_gpu():
    link = T.link_from("PIX", None, [(5, 16), (4, 16)])
    assert link.nvlinks == 0 and link.nominal_gbps_per_direction == pytest.approx(0.985 * 2 * 16)
    assert "PCIe" in link.describe()
    assert T.link_from("SYS").nominal_gbps_per_direction is None
    assert T.parse_pcie_links("0, 5, 16\n1, [N/A], [N/A]\n") == {0: (5, 16)}


def test_unknown_cells_say_unknown():
    assert T.link_from(None).kind == "unknown"
    assert T.link_from("XYZ").kind == "unknown" and "XYZ" in T.link_from("XYZ").source
    assert T.link_from("X").kind == "X"


def test_bus_ids_of_nvidia_smi_and_cuda_compare_equal():
    assert T.normalize_bus_id("00000000:18:00.0") == T.normalize_bus_id("0000:18:00.0") == "0000:18:00.0"
    assert T.parse_bus_ids("0, 00000000:18:00.0\n1, 00000000:2A:00.0\n") == {0: "0000:18:00.0", 1: "0000:2a:00.0"}
    with pytest.raises(ValueError):
        T.normalize_bus_id("GPU-193b2163")


def _fake_smi(tmp_path: Path, monkeypatch, topo: str, nvlink: str, bus: str = "", pcie: str = "") -> None:
    """An executable nvidia-smi on PATH that prints the given texts for each query."""
    for name, text in (("topo", topo), ("nvlink", nvlink), ("bus", bus), ("pcie", pcie)):
        (tmp_path / f"{name}.txt").write_text(text)
    exe = tmp_path / "nvidia-smi"
    exe.write_text(f"""#!/bin/sh
case "$*" in
  "topo -m") cat {tmp_path}/topo.txt ;;
  "nvlink -s") cat {tmp_path}/nvlink.txt ;;
  *pci.bus_id*) cat {tmp_path}/bus.txt ;;
  *pcie.link*) cat {tmp_path}/pcie.txt ;;
  *) exit 3 ;;
esac
""")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")


def test_link_between_asks_nvidia_smi(tmp_path, monkeypatch):
    _fake_smi(tmp_path, monkeypatch, TOPO, NVLINK)
    link = T.link_between(1, 0)
    assert (link.kind, link.nvlinks) == ("NV18", 18)
    assert link.nominal_gbps_per_direction == pytest.approx(478.116)
    assert "topo -m and nvlink -s" in link.source


def test_link_between_pcie_gpus_reads_their_pcie_links(tmp_path, monkeypatch):
    _fake_smi(tmp_path, monkeypatch, PCIE_TOPO, "", pcie="0, 5, 16\n1, 5, 16\n2, 4, 16\n")
    assert T.link_between(0, 1).nominal_gbps_per_direction == pytest.approx(0.985 * 4 * 16)
    assert T.link_between(0, 2).nominal_gbps_per_direction == pytest.approx(0.985 * 2 * 16)


def test_link_between_without_nvidia_smi_is_unknown(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: no nvidia-smi
    link = T.link_between(0, 1)
    assert link.kind == "unknown" and not link.known and link.nominal_gbps_per_direction is None
    assert "nvidia-smi" in link.source and "unknown" in link.describe()


def test_link_between_gpus_nvidia_smi_does_not_list_is_unknown(tmp_path, monkeypatch):
    _fake_smi(tmp_path, monkeypatch, TOPO, NVLINK)
    link = T.link_between(0, 5)
    assert link.kind == "unknown" and "GPU5" in link.source
    with pytest.raises(ValueError):
        T.link_between(-1, 0)
