"""tensoracle.convert: PyTorch checkpoints to safetensors without PyTorch and without running pickle code
(docs/convert.md)."""

from __future__ import annotations

import json
import os
from typing import Any, Dict, Mapping, Optional, Union

from . import _tensoracle

PathLike = Union[str, "os.PathLike[str]"]


def convert(
    checkpoint: PathLike,
    output: PathLike,
    *,
    key: Optional[str] = None,
    dtype: Optional[str] = None,
    metadata: Optional[Mapping[str, str]] = None,
    max_shard_size: Optional[Union[str, int]] = None,
    no_duplicates: bool = False,
) -> Dict[str, Any]:
    """Converts a torch.save checkpoint (zip or legacy format) to safetensors, as `tensoracle convert` does.

    key: dotted path of the entry to convert (default: the checkpoint itself when it is a flat mapping of tensors,
    else its state_dict, model or module entry). dtype: "f16", "bf16" or "f32" casts floating tensors. metadata:
    the header's __metadata__. max_shard_size: "5GiB", "500MB" or bytes; shards and an index as Hugging Face writes
    them. no_duplicates: refuse tensors that share a storage instead of copying them. Nothing is written unless
    everything succeeds. Returns {"tensors": [{name, dtype, shape, bytes, file}], "skipped": [{name, type}], "files":
    [paths], "total_bytes": n}. Raises FormatError for damaged files or pickles that hold code, IoError,
    UnsupportedError, InvalidArgumentError, NotFoundError (an unknown key).
    """
    size = None if max_shard_size is None else str(max_shard_size)
    return _tensoracle.convert_checkpoint(
        os.fspath(checkpoint), os.fspath(output), key or "", dtype,
        None if metadata is None else {str(k): str(v) for k, v in metadata.items()}, size, bool(no_duplicates))


def list_checkpoint(checkpoint: PathLike) -> Dict[str, Any]:
    """The checkpoint's object tree, as `tensoracle convert --list` prints it (format, byteorder, default_key,
    tree: every entry's type; tensors with dtype, shape and bytes). Reads only the pickle; runs nothing."""
    return json.loads(_tensoracle.list_checkpoint(os.fspath(checkpoint)))
