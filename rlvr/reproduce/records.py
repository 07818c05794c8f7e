"""What the records of a result folder must hold before anything reads them.

``rlvr reproduce --check``, ``--power`` and the report read ``<name>.meta.json`` files that a user
may have edited, truncated or replaced, and ``--compare`` reads any ``REPORT.md``. Each is read
through ``rlvr.files`` (a regular file, at most ``MAX_META_BYTES``, UTF-8, JSON) and checked here
field by field against what ``rlvr.reproduce.common.Output.finish`` writes, before any number is
used: a wrong type, a missing key, an absurd count or a label with a 5,000-digit seed is one
``RecordError`` line naming the file and the field, never a traceback deep in the statistics.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from rlvr.files import RecordError, read_json_object

#: A ``<name>.meta.json`` is tens of kilobytes; a ``REPORT.md`` about as much.
MAX_META_BYTES = 16 * 1024 * 1024
MAX_REPORT_BYTES = 16 * 1024 * 1024
#: The largest count a record may state (bases, seeds, items, draws): past any reproduction, and
#: small enough that the sizing arithmetic of ``--power`` stays finite.
MAX_COUNT = 10**9
#: ``<setting>/<method>/[base<b>/]seed<s>``: ASCII digits, at most nine (``\d`` would take any
#: Unicode digit, and ``int`` refuses more than 4,300).
LABEL = re.compile(
    r"(?P<setting>[A-Za-z0-9_-]{1,64})/(?P<what>[A-Za-z0-9_-]{1,64})/"
    r"(?:base(?P<base>[0-9]{1,9})/)?seed(?P<seed>[0-9]{1,9})"
)
#: Keys of a recorded machine that ``rlvr.repro.machine_line`` prints.
MACHINE_KEYS = (
    "cpu",
    "arch",
    "cores",
    "flags",
    "kernel_mode",
    "aten_cpu_capability",
    "torch_threads",
)
COMPONENTS = ("base", "seed", "item", "resid")


def parse_label(label: str) -> dict[str, Any] | None:
    """``{"setting", "what", "base", "seed"}`` of a run label, None when it is not one."""
    m = LABEL.fullmatch(label)
    if not m:
        return None
    return {
        "setting": m["setting"],
        "what": m["what"],
        "base": int(m["base"] or 0),
        "seed": int(m["seed"]),
    }


def _fail(where: str, problem: str) -> RecordError:
    return RecordError(f"{where}: {problem}; not a record rlvr wrote, refused")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _expect(obj: dict, key: str, kind: type | tuple, where: str, required: bool = False) -> Any:
    if key not in obj:
        if required:
            raise _fail(where, f"field {key!r} is missing")
        return None
    value = obj[key]
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise _fail(where, f"field {key!r} is a {type(value).__name__}, not a {names}")
    return value


def _number(obj: dict, key: str, where: str, *, count: bool = False) -> None:
    """An optional number (null allowed); a ``count`` must be finite and in [0, MAX_COUNT]."""
    value = obj.get(key)
    if value is None and not count:
        return
    if not _is_number(value):
        raise _fail(where, f"field {key!r} is not a number")
    if count and not (math.isfinite(value) and 0 <= value <= MAX_COUNT):
        raise _fail(where, f"field {key!r} = {value!r} is not a count in [0, {MAX_COUNT}]")


def check_run_records(records: Any, where: str) -> None:
    if not isinstance(records, dict):
        raise _fail(where, "'run_records' is not an object")
    for label, rec in records.items():
        at = f"{where}, run {label[:80]!r}"
        if not isinstance(rec, dict):
            raise _fail(at, "the record is not an object")
        _expect(rec, "key", str, at)
        _expect(rec, "weights_sha256", str, at)
        numbers = _expect(rec, "numbers", dict, at) or {}
        for metric, value in numbers.items():
            if not _is_number(value) or not math.isfinite(value) or abs(value) > MAX_COUNT:
                raise _fail(at, f"number {metric[:60]!r} = {str(value)[:40]} is not a finite value")


def check_claim(claim: Any, where: str) -> None:
    if not isinstance(claim, dict):
        raise _fail(where, "a claim is not an object")
    for key in ("claim", "setting", "verdict", "evidence"):
        _expect(claim, key, str, where, required=True)
    for key in ("diff_low", "diff_high", "diff_mean", "half_width", "se", "mde", "margin"):
        _number(claim, key, where)
    if "n" in claim:
        _number(claim, "n", where, count=True)
    components = _expect(claim, "components", dict, where)
    if components is not None:
        if set(components) != {*COMPONENTS, "note"}:
            raise _fail(where, f"'components' must hold {[*COMPONENTS, 'note']}")
        for key in COMPONENTS:
            _number(components, key, where)
        _expect(components, "note", str, where)
    design = _expect(claim, "design", dict, where)
    if design is not None or components is not None:
        if design is None:
            raise _fail(where, "a claim with 'components' has no 'design'")
        for key in ("bases", "seeds", "items"):
            _number(design, key, where, count=True)
            if design[key] < 1:
                raise _fail(where, f"design {key!r} = {design[key]!r} is below 1")


def check_meta(meta: dict[str, Any], where: str) -> None:
    """``RecordError`` unless ``meta`` has the shape ``Output.finish`` writes (module docstring)."""
    for key in ("name", "grid", "profile", "engine", "command"):
        _expect(meta, key, str, where)
    _expect(meta, "smoke", bool, where)
    _expect(meta, "key_schema", int, where)  # absent: written under schema 1 (rlvr.config)
    for key in ("seeds", "base_seeds"):
        values = _expect(meta, key, list, where)
        if values is not None and (not values or not all(_is_number(v) for v in values)):
            raise _fail(where, f"'{key}' is not a non-empty list of numbers")
    machine = _expect(meta, "machine", dict, where)
    if machine is not None:
        missing = [k for k in MACHINE_KEYS if k not in machine]
        if missing or not isinstance(machine.get("flags"), list):
            raise _fail(where, f"'machine' lacks {missing or ['a list of flags']}")
    check_run_records(meta.get("run_records", {}), where)
    bases = _expect(meta, "bases", dict, where) or {}
    for model, base in bases.items():
        if base and not isinstance(base, dict):
            raise _fail(where, f"base {model[:60]!r} is not an object")
        if base:
            _expect(base, "weights_sha256", str, f"{where}, base {model[:60]!r}")
    claims = _expect(meta, "claims", list, where) or []
    for i, claim in enumerate(claims, 1):
        check_claim(claim, f"{where}, claim {i}")


def load_meta(path: str | Path) -> dict[str, Any]:
    """A ``<name>.meta.json``, read and checked (``RecordError`` in one line otherwise)."""
    meta = read_json_object(path, MAX_META_BYTES)
    check_meta(meta, str(path))
    return meta


def load_records(folder: Path) -> tuple[dict[str, Any], dict[str, dict], dict[str, dict]]:
    """What ``rlvr reproduce --check`` reruns from: ``(meta of the first script, label -> run
    record, model -> base record)`` of ``folder``. Every meta file is read and checked first (a
    malformed or hostile one is one ``RecordError`` line), and a folder the check cannot rerun
    (none, verl-trained, no run records) is one ``SystemExit`` line; nothing here loads torch."""
    metas = [load_meta(p) for p in sorted(folder.glob("*.meta.json"))]
    if not metas:
        raise SystemExit(f"--check {folder}: no <name>.meta.json here (not a reproduction folder)")
    records: dict[str, dict] = {}
    bases: dict[str, dict] = {}
    for meta in metas:
        for label, rec in meta.get("run_records", {}).items():
            records.setdefault(label, {}).update(rec)
        bases.update({m: b for m, b in meta.get("bases", {}).items() if b})
    engine = metas[0].get("engine", "native")
    if engine != "native":
        raise SystemExit(
            f"--check {folder}: its runs were trained by {engine} (--from-verl); the check "
            "retrains natively and would compare two engines, so it applies to native results only"
        )
    if not records:
        raise SystemExit(
            f"--check {folder}: its meta.json files record no per-run numbers or "
            "hashes (written by an older rlvr); regenerate it with `rlvr reproduce "
            "... --out` first"
        )
    return metas[0], records, bases


__all__ = [
    "LABEL",
    "MAX_COUNT",
    "MAX_META_BYTES",
    "MAX_REPORT_BYTES",
    "check_claim",
    "check_meta",
    "check_run_records",
    "load_meta",
    "load_records",
    "parse_label",
]
