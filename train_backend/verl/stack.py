"""The GPU software stack verl 0.9.1 trains on: the one place its versions live.

`make setup-verl-gpu` installs `PINS` (what verl 0.9.1 was released against: its `[vllm]` and
`[fsdp]` extras) and `FLASH_ATTN`; the preflight (`preflight.py`) accepts the `SUPPORTED` ranges.
Standard library only, so the Makefile can print the pins before anything else is installed:

    python -m train_backend.verl.stack pins         the pinned requirements, one resolve
    python -m train_backend.verl.stack flash-attn   the flash-attn requirement (built against torch)
    python -m train_backend.verl.stack check        the preflight's stack rows on this machine
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from train_backend.verl.names import VERL_VERSION


@dataclass(frozen=True)
class Supported:
    """A package the preflight checks: the range it accepts and where that range comes from."""

    name: str  # distribution name
    specifier: str  # PEP 440
    source: str


# Installed together in one pip resolve (separate resolves have left versions Ray rejects).
PINS: dict[str, str] = {
    "torch": "2.11.0",
    "torchvision": "0.26.0",
    "torchaudio": "2.11.0",
    "transformers": "5.9.0",
    "vllm": "0.24.0",
}
# Built against the torch above, so installed after it, without build isolation.
FLASH_ATTN: tuple[str, str] = ("flash-attn", "2.8.3")  # verl's [flash-attn-cu130torch211] extra

SUPPORTED: dict[str, Supported] = {
    "torch": Supported("torch", ">=2.6,<2.12", "FSDP2 from 2.6 (verl/utils/fsdp_utils.py); 2.11"),
    "transformers": Supported(
        "transformers", ">=5.5.3,!=5.6.0,<5.11", f"verl {VERL_VERSION}'s own requirement"
    ),
    "vllm": Supported(
        "vllm", ">=0.18.0,<=0.24.0", "verl/third_party/vllm (0.18+) up to its [vllm] pin"
    ),
    "sglang": Supported(
        "sglang", ">=0.5.5,<=0.5.12", "verl's sglang server (0.5.5+) up to its [sglang] pin"
    ),
    "flash-attn": Supported("flash-attn", ">=2.3.3", "transformers' flash_attention_2 floor"),
}


def pin_requirements() -> list[str]:
    return [f"{name}=={version}" for name, version in PINS.items()]


def flash_attn_requirement() -> str:
    return f"{FLASH_ATTN[0]}=={FLASH_ATTN[1]}"


def main(argv: list[str]) -> int:
    command = argv[0] if argv else ""
    if command == "pins":
        print(" ".join(pin_requirements()))
        return 0
    if command == "flash-attn":
        print(flash_attn_requirement())
        return 0
    if command == "check":
        from core.errors import MarsError
        from train_backend.verl.preflight import check_installed_stack

        try:
            print(check_installed_stack())
        except MarsError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        return 0
    print("usage: python -m train_backend.verl.stack pins|flash-attn|check", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
