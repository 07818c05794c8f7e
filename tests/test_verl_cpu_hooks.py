"""The import hooks of verl's CPU run (``rlvr.integrations.verl.cpu_hooks``) and its switch,
without verl: a patch that runs when a module is imported, and a distribution found under
another name. The run itself is checked in verl's CPU venv (``tests/integrations/
verl_cpu_check.py``)."""

from __future__ import annotations

import importlib
import importlib.metadata as metadata
import sys

import pytest

from rlvr.integrations.verl import cpu, cpu_hooks


@pytest.fixture
def on_path(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    yield tmp_path
    for name in [n for n in sys.modules if n.startswith("rlvrhooktest")]:
        del sys.modules[name]


def test_a_patch_runs_right_after_the_first_import(on_path):
    (on_path / "rlvrhooktest_a.py").write_text("VALUE = 1\ndef f():\n    return VALUE\n")
    seen = []

    def patch(module):
        seen.append(module.__name__)
        module.VALUE = 2

    cpu_hooks.when_imported("rlvrhooktest_a", patch)
    assert seen == []
    module = importlib.import_module("rlvrhooktest_a")
    assert seen == ["rlvrhooktest_a"] and module.f() == 2
    cpu_hooks.when_imported("rlvrhooktest_a", lambda m: seen.append("again"))  # imported: now
    assert seen == ["rlvrhooktest_a", "again"]


def write_dist(root, name: str, version: str) -> None:
    info = root / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def test_a_distribution_is_found_under_its_alias(on_path, monkeypatch):
    write_dist(on_path, "rlvrhooktest-cpu", "0.32.0")
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    with pytest.raises(metadata.PackageNotFoundError):
        metadata.version("rlvrhooktest")
    finder = cpu_hooks.alias_distribution("rlvrhooktest", "rlvrhooktest-cpu", "cpu")
    assert cpu_hooks.alias_distribution("rlvrhooktest", "rlvrhooktest-cpu", "cpu") is finder
    assert metadata.version("rlvrhooktest") == "0.32.0+cpu"
    assert metadata.metadata("rlvrhooktest")["Name"] == "rlvrhooktest"
    assert metadata.version("rlvrhooktest-cpu") == "0.32.0"  # the real one, unchanged
    names = [d.metadata["Name"] for d in metadata.distributions()]
    assert "rlvrhooktest" not in names  # listings are left alone


def test_a_real_distribution_of_the_alias_name_wins(on_path, monkeypatch):
    write_dist(on_path, "rlvrhooktest-cpu", "0.32.0")
    write_dist(on_path, "rlvrhooktest", "0.24.0")
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    cpu_hooks.alias_distribution("rlvrhooktest", "rlvrhooktest-cpu", "cpu")
    assert metadata.version("rlvrhooktest") == "0.24.0"


@pytest.mark.parametrize(
    "value, on", [("", False), ("0", False), ("false", False), ("1", True), ("yes", True)]
)
def test_the_switch(monkeypatch, value, on):
    monkeypatch.setenv(cpu.SWITCH, value)
    assert cpu.requested() is on


def test_never_active_unasked_or_with_cuda(monkeypatch):
    monkeypatch.setattr(cpu, "_ACTIVE", False)
    monkeypatch.setenv(cpu.SWITCH, "0")
    assert cpu.activate() is False and cpu.apply_config(object()) is False
    monkeypatch.setenv(cpu.SWITCH, "1")
    monkeypatch.setattr(cpu, "cuda_present", lambda: True)
    assert cpu.activate() is False  # a GPU node: the plugin leaves verl alone
    with pytest.raises(cpu.CpuSwitchError, match="this machine has CUDA GPUs"):
        cpu.apply_config(object())  # and the driver refuses in one line


def test_the_switch_without_vllm_is_one_line(monkeypatch):
    import importlib.util

    monkeypatch.setenv(cpu.SWITCH, "1")
    monkeypatch.setattr(cpu, "cuda_present", lambda: False)
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a)
    )
    with pytest.raises(cpu.CpuSwitchError, match="vLLM's CPU build is not installed"):
        cpu.apply_config(object())


def test_verls_entry_point_without_verl_is_one_line():
    import subprocess

    if importlib.util.find_spec("verl") is not None:
        pytest.skip("verl is installed here")
    out = subprocess.run(
        [sys.executable, "-m", "rlvr.integrations.verl.main"], capture_output=True, text=True
    )
    assert out.returncode == 1
    assert out.stderr.strip().splitlines() == [
        "error: verl is not installed; rlvr's verl entry point needs verl 0.9.1 in this "
        "environment (pip install verl==0.9.1 cachetools fastapi uvicorn; "
        "docs/integrations_verl.md)"
    ]


def test_worker_groups_take_master_ports_below_the_ephemeral_range(tmp_path, monkeypatch):
    """Work-around 11: verl's master port came from ``bind(("", 0))`` and was bound again
    seconds later, so an outgoing connection of another process could take it (EADDRINUSE in
    CI). A worker group gets its own 100 ports below the kernel's ephemeral range instead."""
    ephemeral = tmp_path / "ip_local_port_range"
    ephemeral.write_text("32768\t60999\n")
    monkeypatch.setattr(cpu, "EPHEMERAL", ephemeral)
    ranges = [cpu.master_port_range(i) for i in range(3)]
    assert ranges == [[31768, 31868], [31868, 31968], [31968, 32068]]
    ephemeral.write_text("not a range")
    assert cpu.master_port_range(0) == [31768, 31868]  # Linux's default

    class RayWorkerGroup:  # the signature verl 0.9.1's has (single_controller/ray/base.py)
        def __init__(self, resource_pool=None, ray_cls_with_init=None, **kwargs):
            self.kwargs = kwargs

    module = type(sys)("rlvrhooktest_ray_base")
    module.RayWorkerGroup = RayWorkerGroup
    ephemeral.write_text("40000 60999")
    cpu._ports_below_ephemeral(module)
    cpu._ports_below_ephemeral(module)  # once only
    low, high = module.RayWorkerGroup(resource_pool=None).kwargs["master_port_range"]
    assert 39000 <= low < high <= 40000 and high - low == 100
    other = module.RayWorkerGroup(resource_pool=None).kwargs["master_port_range"]
    assert other != [low, high]  # the next group of the process: other ports
    given = module.RayWorkerGroup(master_addr="10.0.0.1", master_port="29500").kwargs
    assert "master_port_range" not in given  # an address given by the caller is kept
    assert module.RayWorkerGroup(master_port_range=[5000, 5010]).kwargs["master_port_range"] == [
        5000,
        5010,
    ]
