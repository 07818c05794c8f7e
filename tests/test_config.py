"""rlvr.config: typed dataclass configs with YAML profiles and key=value overrides."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import pytest

from rlvr.config import (
    ConfigError,
    config_key,
    effective,
    load_config,
    merge,
    parse_overrides,
    unkeyed,
)


@dataclass
class Optim:
    lr: float = 1e-3
    steps: int = 10


@dataclass
class Cfg:
    name: str = "x"
    mode: Literal["a", "b"] = "a"
    flag: bool = False
    sizes: list[int] = field(default_factory=lambda: [1, 2])
    optim: Optim = field(default_factory=Optim)
    note: str | None = None


def test_overrides_nested_and_typed():
    cfg = load_config(
        Cfg,
        overrides=[
            "optim.lr=1e-6",
            "optim.steps=3",
            "mode=b",
            "flag=true",
            "sizes=[3,4]",
            "note=hi",
        ],
    )
    assert cfg.optim.lr == 1e-6 and cfg.optim.steps == 3
    assert cfg.mode == "b" and cfg.flag is True and cfg.sizes == [3, 4] and cfg.note == "hi"


def test_comma_list_and_none():
    cfg = load_config(Cfg, overrides=["sizes=5,6", "note=null"])
    assert cfg.sizes == [5, 6] and cfg.note is None


@pytest.mark.parametrize(
    "item, key",
    [
        ("optim.lrr=1", "optim.lrr"),
        ("mode=c", "mode"),
        ("optim.steps=1.5", "optim.steps"),
        ("flag=maybe", "flag"),
        ("optim.lr=fast", "optim.lr"),
    ],
)
def test_bad_overrides_name_the_key(item, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_config(Cfg, overrides=[item])


def test_not_key_value():
    with pytest.raises(ConfigError, match="key=value"):
        parse_overrides(["lr"])


def test_profile_then_overrides(tmp_path):
    prof = tmp_path / "p.yaml"
    prof.write_text("name: prof\noptim:\n  lr: 0.5\n")
    cfg = load_config(Cfg, prof, ["optim.steps=7"])
    assert (cfg.name, cfg.optim.lr, cfg.optim.steps) == ("prof", 0.5, 7)
    with pytest.raises(ConfigError, match="no such configuration file"):
        load_config(Cfg, tmp_path / "nope.yaml")


def test_a_key_covers_what_differs_from_the_defaults():
    a, b = Cfg(), Cfg()
    assert config_key(a) == config_key(b) and effective(a) == {}
    lr = merge(a, {"optim": {"lr": 2e-3}, "sizes": [3]})
    assert effective(lr) == {"optim": {"lr": 2e-3}, "sizes": [3]}
    assert config_key(lr) != config_key(a)
    assert config_key(a, data="x") != config_key(a)

    @dataclass
    class Later(Cfg):  # a field added later, whose default computes what was computed before
        width: int = 4
        out: str = unkeyed("")  # changes nothing computed

    assert config_key(Later(optim=Optim(lr=2e-3), sizes=[3])) == config_key(lr)
    assert config_key(Later(out="elsewhere")) == config_key(a)
    assert config_key(Later(width=5)) != config_key(a)
