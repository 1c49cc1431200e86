"""Frozen dataclasses built from plain YAML data, with every value checked against its annotation.

Generic on purpose (it knows nothing of PPO): a schema is a tree of dataclasses whose fields are
bool, int, float, str, tuples, ``X | None`` and ``dict[str, ...]``; a wrong key or value is a
one-line :class:`ConfigError` naming the dotted key.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any

from jaxrl_dist.errors import ConfigError, nearest


def type_name(tp: Any) -> str:
    return getattr(tp, "__name__", str(tp)).replace("NoneType", "null")


def coerce(path: str, tp: Any, value: Any) -> Any:
    """Check ``value`` against the annotation ``tp``; returns the value in canonical form."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(tp)
        if value is None and type(None) in options:
            return None
        for option in options:
            if option is type(None):
                continue
            try:
                return coerce(path, option, value)
            except ConfigError:
                pass
        raise ConfigError(f"config key '{path}': expected {' or '.join(map(type_name, options))},"
                          f" got {value!r}")
    if origin is dict:
        key_tp, value_tp = typing.get_args(tp)
        if not isinstance(value, dict):
            raise ConfigError(f"config key '{path}': expected a mapping, got {value!r}")

        def flat(d: dict, prefix: str = "") -> dict:  # {ppo: {gamma: ..}} -> {"ppo.gamma": ..}
            out = {}
            for k, v in d.items():
                out.update(flat(v, f"{prefix}{k}.") if isinstance(v, dict) else
                           {f"{prefix}{k}": v})
            return out

        if dataclasses.is_dataclass(value_tp):   # {dotted key: a section of its own}
            return {coerce(path, key_tp, k): build(value_tp, v, f"{path}.{k}.")
                    for k, v in _sections(value).items()}
        value = flat(value)
        return {coerce(path, key_tp, k): coerce(f"{path}.{k}", value_tp, v)
                for k, v in value.items()}
    if origin is tuple:
        (item_tp, _) = typing.get_args(tp)
        if isinstance(value, int) and not isinstance(value, bool):
            value = [value]
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"config key '{path}': expected a list of {type_name(item_tp)},"
                              f" e.g. [64, 64], got {value!r}")
        return tuple(coerce(f"{path}[{i}]", item_tp, v) for i, v in enumerate(value))
    if tp in (int, float) and isinstance(value, str):
        try:  # YAML 1.1 reads 1e-3 (no dot) as a string; accept it as the number it means
            value = float(value)
        except ValueError:
            pass
    if tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
            return int(value)  # 1e6 in YAML is a float
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif tp is str:
        if isinstance(value, str):
            return value
    else:  # pragma: no cover - only the types above are used
        raise TypeError(tp)
    raise ConfigError(f"config key '{path}': expected {type_name(tp)}, got {value!r}")


def _sections(d: dict, prefix: str = "") -> dict:
    """``{ppo: {learning_rate: {low: ..}}}`` -> ``{"ppo.learning_rate": {low: ..}}``: nested
    mappings are descended while every value is a mapping (a key path), and the first mapping
    holding a non-mapping value is the section (``--set pbt.mutations.ppo.learning_rate.low=``
    nests it that way; a YAML file may write the dotted key)."""
    out = {}
    for k, v in d.items():
        if isinstance(v, dict) and v and all(isinstance(x, dict) for x in v.values()):
            out.update(_sections(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def keys(cls: type) -> list[str]:
    """Every dotted key of a schema: its sections, and their keys."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        if f.metadata.get("internal"):
            continue
        out.append(f.name)
        if dataclasses.is_dataclass(hints[f.name]):
            out += [f"{f.name}.{key}" for key in keys(hints[f.name])]
    return out


def closest(word: str, candidates: list[str], n: int = 3) -> list[str]:
    """The candidates nearest ``word``, each compared whole and by its last dotted part (a key
    given in the wrong section: ``learning_rate`` -> ``ppo.learning_rate``)."""
    forms: dict[str, list[str]] = {}
    for key in candidates:
        for form in dict.fromkeys((key, key.rsplit(".", 1)[-1])):
            forms.setdefault(form, []).append(key)
    out: list[str] = []
    for form in nearest(word, forms, n):
        out += [key for key in forms[form] if key not in out]
    return out[:n]


def unknown_key(key: Any, candidates: list[str], prefix: str = "") -> ConfigError:
    """One line for a key the schema lacks: the closest keys, not all of them."""
    key = str(key)
    close = closest(key, candidates)
    hint = (f"did you mean {', '.join(prefix + k for k in close)}?" if close else
            "--help-config lists every key")
    return ConfigError(f"unknown config key '{prefix}{key}'; {hint}")


def build(cls: type, data: dict[str, Any], prefix: str = "", also: tuple[str, ...] = ()) -> Any:
    """``cls`` from ``data``; ``also``: keys outside the schema that a misspelt key may have
    meant (the algorithm's section, beside the top level)."""
    if not isinstance(data, dict):
        raise ConfigError(f"config section '{prefix.rstrip('.') or '<root>'}' must be a mapping,"
                          f" got {data!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if not f.metadata.get("internal")}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise unknown_key(unknown[0], keys(cls) + list(also), prefix)
    missing = [name for name, f in fields.items() if name not in data
               and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    if missing:
        raise ConfigError(f"config section '{prefix.rstrip('.')}' needs "
                          f"{', '.join(prefix + name for name in missing)}")
    kwargs = {}
    for name, value in data.items():
        tp = hints[name]
        if dataclasses.is_dataclass(tp):
            kwargs[name] = build(tp, value, f"{prefix}{name}.")
        else:
            kwargs[name] = coerce(prefix + name, tp, value)
    return cls(**kwargs)


def doc(text: str, **kwargs: Any) -> Any:
    """A dataclass field with its ``--help-config`` text."""
    return dataclasses.field(metadata={"help": text}, **kwargs)
