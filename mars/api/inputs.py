"""What a plan's text inputs mean: `--role`, `--role-sampling` and `--mas-option` values, as the
command line gives them and as a Python caller may. One-line MarsErrors for anything malformed."""

from __future__ import annotations

import json
from typing import Any

from core.errors import MarsError

ROLE_SAMPLING_KEYS = ("temperature", "top_p", "top_k", "max_tokens", "stop")


def parse_role_mapping(values: list[str]) -> dict[str, tuple[str, str]]:
    """`--role` values to {role: (base URL, model name)}.

    `ROLE=MODEL@URL` (e.g. `judge=Qwen3-4B@https://host/v1`) keeps the URL whole: the model is
    what comes before the first `@` that starts an http(s) URL, so model names with `@` and URLs
    with a user name both work. The older `ROLE=URL/v1/NAME` still works (the base URL ends at
    `/v1`, the name may hold slashes). Anything else (a URL with no model, or no `/v1/` to tell
    the base URL from the name) is refused in one line.
    """
    from core.errors import MarsError

    mapping: dict[str, tuple[str, str]] = {}
    for value in values:
        role, sep, target = value.partition("=")
        role, target = role.strip(), target.strip()
        if not sep or not role or not target:
            raise MarsError(
                f"--role expects ROLE=MODEL@URL (or the older ROLE=URL/NAME, URL ending in /v1), "
                f"got '{value}'"
            )
        model, at, url = target.partition("@http")
        if at and url.startswith(("://", "s://")):
            base_url = ("http" + url).rstrip("/")
            if not model.strip():
                raise MarsError(f"--role {value}: no model name before '@'")
        elif target.startswith(("http://", "https://")) and "/v1/" in target:
            base_url, _, model = target.partition("/v1/")
            base_url += "/v1"
            model = model.strip("/")
            if not model:
                raise MarsError(f"--role {value}: no model name after /v1/; write {role}=MODEL@URL")
        elif target.rstrip("/").endswith("/v1"):
            raise MarsError(f"--role {value}: no model name; write {role}=MODEL@{target}")
        elif target.startswith(("http://", "https://")):
            raise MarsError(
                f"--role {value}: cannot tell the base URL from the model name; "
                f"write {role}=MODEL@URL"
            )
        else:
            raise MarsError(f"--role {value}: no server URL; write {role}=MODEL@URL")
        if "://" not in base_url or not base_url.split("://", 1)[1]:
            raise MarsError(f"--role {value}: the URL names no host")
        if role in mapping:
            raise MarsError(f"--role gives the role {role!r} twice; give each role once")
        mapping[role] = (base_url, model.strip())
    return mapping


def parse_role_sampling(values: list[str]) -> dict[str, dict[str, Any]]:
    """`--role-sampling` values to {role: {setting: value}}; one line for anything malformed."""
    from core.names import unknown_name

    settings: dict[str, dict[str, Any]] = {}
    for value in values:
        role, sep, pairs = value.partition(":")
        role = role.strip()
        if not sep or not role or not pairs.strip():
            raise MarsError(f"--role-sampling expects ROLE:KEY=VALUE,..., got '{value}'")
        own = settings.setdefault(role, {})
        for pair in pairs.split(","):
            key, eq, raw = (part.strip() for part in pair.partition("="))
            if not eq or not raw:
                raise MarsError(f"--role-sampling {value}: expected KEY=VALUE, got '{pair}'")
            if key not in ROLE_SAMPLING_KEYS:
                raise MarsError(
                    f"--role-sampling: {unknown_name('setting', key, ROLE_SAMPLING_KEYS)}"
                )
            if key in own:
                raise MarsError(f"--role-sampling gives {role}'s {key} twice; give it once")
            own[key] = _sampling_value(key, raw, value)
    return settings


def _sampling_value(key: str, raw: str, value: str) -> Any:
    if key == "stop":
        return [stop for stop in raw.split("|") if stop]
    try:
        number = float(raw) if key in ("temperature", "top_p") else int(raw)
    except ValueError:
        raise MarsError(f"--role-sampling {value}: {key} must be a number, got '{raw}'") from None
    low_ok = number > 0 if key in ("top_p", "max_tokens") else number >= 0
    if not low_ok or (key == "top_p" and number > 1):
        raise MarsError(f"--role-sampling {value}: {key} {raw} is out of range")
    return number


def parse_mas_options(values: list[str]) -> dict[str, Any]:
    """`KEY=VALUE` pairs; values are read as JSON when they parse (2, true, 0.5), else as text."""
    config: dict[str, Any] = {}
    for value in values:
        key, sep, raw = value.partition("=")
        if not sep or not key.strip():
            raise MarsError(f"--mas-option expects KEY=VALUE, got '{value}'")
        try:
            config[key.strip()] = json.loads(raw)
        except json.JSONDecodeError:
            config[key.strip()] = raw
    return config


def checked_role_settings(role: str, own: dict[str, Any]) -> dict[str, Any]:
    """One role's generation settings given as a dict (the Python API's `role_sampling`),
    checked as `--role-sampling` checks them; `stop` is a string or a list of strings."""
    from core.names import unknown_name

    checked: dict[str, Any] = {}
    for key, value in own.items():
        if key not in ROLE_SAMPLING_KEYS:
            raise MarsError(f"--role-sampling: {unknown_name('setting', key, ROLE_SAMPLING_KEYS)}")
        if key == "stop":
            stops = [value] if isinstance(value, str) else list(value)
            checked[key] = [str(stop) for stop in stops if stop]
        else:
            checked[key] = _sampling_value(key, str(value), f"{role}:{key}={value}")
    return checked
