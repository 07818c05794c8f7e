"""Typed configuration: dataclasses, YAML profiles, and ``key=value`` overrides.

A config is a (possibly nested) dataclass. ``load_config(Cls, files, overrides)`` starts from the
dataclass defaults, applies YAML files in order (a training profile's layers, an evaluation's
``--config``), then ``key=value`` strings from the command line, where nested fields use dots
(``optim.lr=1e-6``). Values are parsed as YAML scalars and checked against the
field's type, so a typo or a wrong type is an error naming the key, not a silent default.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import math
import types
import typing
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TypeVar

import yaml

from rlvr.errors import UserError
from rlvr.files import write_text_atomic

T = TypeVar("T")


class ConfigError(UserError, ValueError):
    """A configuration key or value that does not fit the dataclass."""


def did_you_mean(value: Any, choices: Iterable[Any], prefix: str = "") -> str:
    """`` (did you mean 'grpo_sg'?)`` for the choice closest to ``value`` (``difflib``, with ``-``
    and ``_`` read alike; ``prefix`` before it, as ``optim.``), or ``""`` when none is close:
    what every "not one of" and "unknown key" error appends."""
    fold = {str(c).replace("-", "_").lower(): str(c) for c in choices}
    key = str(value).replace("-", "_").lower()
    close = [key] if key in fold else difflib.get_close_matches(key, list(fold), n=1, cutoff=0.75)
    return f" (did you mean {prefix + fold[close[0]]!r}?)" if close else ""


def _field_types(cls) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def _coerce(value: Any, tp: Any, key: str) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, key)
            except ConfigError:
                continue
        raise ConfigError(f"{key}: {value!r} fits none of {tp}")
    if origin is typing.Literal:
        if value not in args:
            raise ConfigError(
                f"{key}: {value!r} is not one of {list(args)}{did_you_mean(value, args)}"
            )
        return value
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping for {tp.__name__}, got {value!r}")
        return _build(tp, value, prefix=f"{key}.")
    if origin in (list, tuple):
        if isinstance(value, str):
            value = [yaml.safe_load(v) for v in value.split(",") if v.strip() != ""]
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: expected a list, got {value!r}")
        inner = args[0] if args else Any
        out = [_coerce(v, inner, f"{key}[]") for v in value]
        return tuple(out) if origin is tuple else out
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {value!r}")
        return dict(value)
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{key}: expected true/false, got {value!r}")
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                return int(value)
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, str):
            # PyYAML (YAML 1.1) reads "1e-6" (no dot) as a string: accept numeric strings here.
            try:
                value = float(value)
            except ValueError:
                raise ConfigError(f"{key}: expected a number, got {value!r}") from None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key}: expected a number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise ConfigError(f"{key}: expected a string, got {value!r}")
        return str(value)
    return value


def _build(cls, values: dict[str, Any], prefix: str = ""):
    types_ = _field_types(cls)
    unknown = sorted(set(values) - set(types_))
    if unknown:
        raise ConfigError(
            f"unknown key(s) {[prefix + k for k in unknown]}"
            f"{did_you_mean(unknown[0], types_, prefix)}; {cls.__name__} has {sorted(types_)}"
        )
    kwargs = {k: _coerce(v, types_[k], prefix + k) for k, v in values.items()}
    return cls(**kwargs)


def to_dict(cfg) -> dict[str, Any]:
    """A config as plain data (for YAML/JSON dumps and hashing)."""
    return dataclasses.asdict(cfg)


def merge(cfg: T, values: dict[str, Any], prefix: str = "") -> T:
    """A copy of ``cfg`` with the (nested) mapping ``values`` applied."""
    types_ = _field_types(type(cfg))
    changes = {}
    for k, v in values.items():
        if k not in types_:
            raise ConfigError(
                f"unknown key {prefix + k!r}{did_you_mean(k, types_, prefix)}; "
                f"{type(cfg).__name__} has {sorted(types_)}"
            )
        current = getattr(cfg, k)
        if dataclasses.is_dataclass(current) and isinstance(v, dict):
            changes[k] = merge(current, v, prefix=f"{prefix}{k}.")
        else:
            changes[k] = _coerce(v, types_[k], prefix + k)
    return dataclasses.replace(cfg, **changes)


def nest(flat: dict[str, Any]) -> dict[str, Any]:
    """``{"a.b": 1, "c": "x"}`` -> ``{"a": {"b": 1}, "c": "x"}`` (dotted keys into mappings)."""
    out: dict[str, Any] = {}
    for key, value in flat.items():
        node = out
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {key!r} conflicts with an earlier one")
        node[parts[-1]] = value
    return out


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """``["a.b=1", "c=x"]`` -> ``{"a": {"b": 1}, "c": "x"}`` (values parsed as YAML scalars)."""
    flat: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise ConfigError(f"override {item!r} is not key=value")
        key, raw = item.split("=", 1)
        key = key.strip()
        if not key:
            raise ConfigError(f"override {item!r} has an empty key")
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError:
            value = raw
        flat[key] = value
    return nest(flat)


def deep_merge(base: dict, extra: dict) -> dict:
    """``extra`` over ``base``, recursing into mappings (profile layers, then overrides)."""
    out = dict(base)
    for k, v in extra.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = v
    return out


def load_yaml(path: str | Path) -> dict[str, Any]:
    with open(path) as f:
        data = yaml.safe_load(f) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a profile must be a YAML mapping")
    return data


def layered(
    files: str | Path | Iterable[str | Path] | None = None,
    overrides: list[str] | dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The values of YAML ``files`` merged in order, then ``overrides`` (``key=value`` strings or
    a nested mapping): mappings merge key by key, everything else replaces."""
    if isinstance(files, (str, Path)):
        files = [files]
    values: dict[str, Any] = {}
    for path in files or ():
        if not Path(path).is_file():
            raise ConfigError(f"{path}: no such configuration file")
        values = deep_merge(values, load_yaml(path))
    ov = parse_overrides(overrides) if isinstance(overrides, list) else dict(overrides or {})
    return deep_merge(values, ov)


def load_config(
    cls: type[T],
    files: str | Path | Iterable[str | Path] | None = None,
    overrides: list[str] | dict[str, Any] | None = None,
) -> T:
    """The one loader: defaults of ``cls`` <- YAML ``files`` <- ``overrides`` (``layered``).
    ``rlvr train`` reads its profile layers with it (``rlvr.training.train_config``), ``rlvr eval``
    its ``--config`` file, and the reproduction grids their YAML (``rlvr.reproduce.grid``)."""
    return merge(cls(), layered(files, overrides))


def in_interval(value: Any, interval: str) -> bool:
    """Whether a real number (not bool, not NaN) lies in ``interval`` written ``[a, b)``, with
    ``inf`` for an unbounded end."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        return False
    lo, hi = (float(x) for x in interval[1:-1].split(","))
    above = value >= lo if interval[0] == "[" else value > lo
    below = value <= hi if interval[-1] == "]" else value < hi
    return above and below


def check_interval(key: str, value: Any, interval: str) -> None:
    """The one range check of every configuration value: ``ConfigError`` naming ``key`` when
    ``value`` lies outside ``interval`` (``in_interval``)."""
    if not in_interval(value, interval):
        raise ConfigError(f"{key}: must be in {interval}, got {value!r}")


#: The layout of every key (run, evaluation, base build): 2 hashes the effective configuration
#: (``effective``); 1, before it, hashed whole configurations. Bump it when a default changes
#: what a configuration computes (``tests/test_tiny_keys.py`` pins the defaults): every key moves.
KEY_SCHEMA = 2
#: ``dataclasses.field`` metadata of a field that changes nothing a configuration computes (an
#: output folder, a progress bar): left out of every key.
UNKEYED = {"keyed": False}


def unkeyed(default: Any) -> Any:
    """A field with ``default`` that no key covers (``UNKEYED``)."""
    return dataclasses.field(default=default, metadata=UNKEYED)


_SAME = object()


def plain_data(value: Any) -> Any:
    """``value`` as the JSON a key hashes (tuples as lists, other objects as strings)."""
    data = to_dict(value) if dataclasses.is_dataclass(value) else value
    return json.loads(json.dumps(data, sort_keys=True, default=str))


def _difference(value: Any, default: Any) -> Any:
    """``value`` where it differs from ``default`` (a nested dataclass field by field), else
    ``_SAME``."""
    if (
        dataclasses.is_dataclass(value)
        and not isinstance(value, type)
        and type(value) is type(default)
    ):
        out = {}
        for f in dataclasses.fields(value):
            if f.metadata.get("keyed", True):
                d = _difference(getattr(value, f.name), getattr(default, f.name))
                if d is not _SAME:
                    out[f.name] = d
        return out or _SAME
    plain = plain_data(value)
    return _SAME if plain == plain_data(default) else plain


def effective(cfg) -> dict[str, Any]:
    """The fields of the dataclass ``cfg`` that differ from its class's defaults (nested dataclasses
    field by field), as plain data, without the ``unkeyed`` fields: what a key covers, so that a
    field added later, whose default computes what was computed before, moves no key."""
    d = _difference(cfg, type(cfg)())
    return {} if d is _SAME else d


def data_hash(data: Any, length: int = 12) -> str:
    """A stable short hash of plain data (keys sorted)."""
    blob = json.dumps(data, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:length]


def config_key(cfg, length: int = 12, **extra: Any) -> str:
    """The key of a configuration: the hash of ``KEY_SCHEMA``, its ``effective`` fields and
    ``extra`` (what else identifies it: a method's resolved parameters, a data fingerprint)."""
    return data_hash({"schema": KEY_SCHEMA, "config": effective(cfg), **extra}, length)


def dump_yaml(cfg, path: str | Path) -> None:
    write_text_atomic(path, yaml.safe_dump(to_dict(cfg), sort_keys=False))
