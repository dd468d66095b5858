"""A checkpoint's identity: `folder@hash` over every byte of every file of its folder.

The response cache's model identity, a run's `model`, the base an adapter was trained on (checked
before it is served or merged) and a server's identity. Each file's hash comes from
`core.file_hashes`, which remembers it by (path, size, mtime_ns, ctime_ns, inode, device), so a
multi-GB model is read once. A fingerprint recorded by an older mars (names, sizes, the first and
last MiB of each weight file: `edge_fingerprint`) still matches an unchanged folder, with a note.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

from core.file_hashes import content_hashes

_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".gguf")


def model_fingerprint(model: str) -> str:
    """A checkpoint's identity, `folder@hash`: every file's name and every byte of its content
    (weights, config, tokenizer); a hub id (no local folder) is its own identity.

    The response cache's model identity, a run's `model`, the base an adapter was trained on
    (checked before it is served or merged) and a server's identity. A byte changed anywhere in a
    weight file is another model. Each file's hash is remembered by (path, size, mtime_ns,
    ctime_ns, inode, device), in this process and in the MARS cache (`core.file_hashes`), so a
    multi-GB model is read once: a second fingerprint of an unchanged folder reads no weights.
    """
    folder = Path(model).expanduser()
    if not folder.is_dir():
        return model
    files = [path for path in sorted(folder.iterdir()) if path.is_file()]
    hashes = content_hashes(files)
    digest = hashlib.sha256()
    for path in files:
        digest.update(f"{path.name}:{hashes[path]}\n".encode())
    return f"{folder.name}@{digest.hexdigest()[:16]}"


def edge_fingerprint(model: str) -> str:
    """The fingerprint mars recorded before whole-content identities: names, sizes and only the
    first and last MiB of each weight and json file. Kept to recognise the records of then
    (`recorded_weights_match`), never written any more."""
    folder = Path(model).expanduser()
    if not folder.is_dir():
        return model
    digest = hashlib.sha256()
    for path in sorted(folder.iterdir()):
        if not path.is_file():
            continue
        size = path.stat().st_size
        digest.update(f"{path.name}:{size}".encode())
        if path.suffix in _WEIGHT_SUFFIXES or path.name.endswith(".json"):
            with path.open("rb") as handle:
                digest.update(handle.read(1 << 20))
                if size > 2 << 20:
                    handle.seek(-(1 << 20), os.SEEK_END)
                    digest.update(handle.read())
    return f"{folder.name}@{digest.hexdigest()[:16]}"


def _hash_part(fingerprint: str) -> str:
    return fingerprint.rpartition("@")[2]


def recorded_weights_match(recorded: str, model: str) -> bool:
    """Whether `model` holds the weights a fingerprint taken earlier names, whatever the folder
    is called now. A record older than whole-content fingerprints (`edge_fingerprint`) is matched
    the old way, with a one-line note on stderr (once): its first and last MiB were recorded."""
    wanted = _hash_part(recorded)
    if _hash_part(model_fingerprint(model)) == wanted:
        return True
    if not Path(model).expanduser().is_dir() or _hash_part(edge_fingerprint(model)) != wanted:
        return False
    if (recorded, model) not in _NOTED_OLD_RECORDS:
        _NOTED_OLD_RECORDS.add((recorded, model))
        print(
            f"note: {recorded} was recorded by an older mars (the first and last MiB of each "
            f"weight file); {model} matches it there, the rest of its bytes could not be checked",
            file=sys.stderr,
        )
    return True


_NOTED_OLD_RECORDS: set[tuple[str, str]] = set()
