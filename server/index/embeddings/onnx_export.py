"""Export the packaged all-MiniLM-L6-v2 to ONNX, once, at install time: the only step that needs torch.

    python -m server.index.embeddings.onnx_export [TARGET]   # and its int8 quantisation beside it

The export is transformers' BertModel traced with dynamic batch and length (eager attention, so nothing about the
example's shape is baked in); its output is the last hidden state, pooled by `onnx_runtime`. onnxruntime's
transformer optimizer then fuses each layer's attention, GELU and layer norms (faster, and smaller buffers), and the
weights are saved beside the graph (`NAME.onnx.data`), which onnxruntime memory-maps instead of copying. The sha256
of the weights it was made from is stored in the graph's metadata, so a runtime refuses an export of other weights.

The int8 model (`MEMORY_LOCAL_MODEL=all-MiniLM-L6-v2-int8`) is then made from that export, by onnxruntime's
dynamic quantisation: the weights of every MatMul and Attention node become int8, one scale per output channel
(one per tensor lost 0.05 of cosine to the float32 vectors); activations are quantised per call. It is
deterministic (the same bytes from the same export) and carries the same weights' sha256, and `precision` = int8.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from server.index.model_package import (
    FP32,
    INT8,
    WEIGHTS_SHA256,
    onnx_model_path,
    packaged_model_dir,
    verify_weights,
)

WEIGHTS_KEY = "weights_sha256"
PRECISION_KEY = "precision"  # absent in the exports made before the int8 model: those are fp32
QUANTISED_OPS = ("MatMul", "Attention")  # the embedding tables (Gather) stay float32
OPSET = 17
INPUTS = ("input_ids", "attention_mask")
OUTPUT = "last_hidden_state"
DATA_SUFFIX = ".data"  # the weights file beside the graph


def export(model_dir: Path, target: Path, weights_sha256: str) -> Path:
    """Write the ONNX graph of the BERT model under `model_dir` to `target` (atomically) and return it."""
    import torch
    from onnxruntime.transformers.optimizer import optimize_model
    from transformers import AutoModel
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    model = AutoModel.from_pretrained(str(model_dir), attn_implementation="eager", local_files_only=True).eval()

    class LastHiddenState(torch.nn.Module):
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            return self.inner(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    example = torch.ones((2, 8), dtype=torch.long)
    axes = {0: "batch", 1: "length"}
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".export-") as scratch:
        traced = Path(scratch) / "traced.onnx"
        torch.onnx.export(
            LastHiddenState(model),
            (example, torch.ones_like(example)),
            str(traced),
            dynamo=False,
            input_names=list(INPUTS),
            output_names=[OUTPUT],
            dynamic_axes={name: axes for name in (*INPUTS, OUTPUT)},
            opset_version=OPSET,
        )
        config = model.config
        fused = optimize_model(
            str(traced), model_type="bert", num_heads=config.num_attention_heads, hidden_size=config.hidden_size
        ).model
        save(fused, target, Path(scratch), {WEIGHTS_KEY: weights_sha256, PRECISION_KEY: FP32.precision})
    return target


def quantise(source: Path, target: Path, weights_sha256: str) -> Path:
    """Write the int8 quantisation of the float32 export at `source` to `target` (atomically) and return it."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    graph = onnx.load(str(source), load_external_data=False)
    nodes = [node.name for node in graph.graph.node if node.op_type in QUANTISED_OPS]
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".quantise-") as scratch:
        plain = Path(scratch) / "quantised.onnx"
        quantize_dynamic(
            str(source),
            str(plain),
            weight_type=QuantType.QInt8,
            per_channel=True,
            nodes_to_quantize=nodes,
            extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},  # for tensors whose type it cannot infer
        )
        quantised = onnx.load(str(plain))
        save(quantised, target, Path(scratch), {WEIGHTS_KEY: weights_sha256, PRECISION_KEY: INT8.precision})
    return target


def save(model: Any, target: Path, scratch: Path, props: dict[str, str]) -> None:
    """Save `model` with `props` as `target` and its weights beside it, written in `scratch` and moved in place."""
    import onnx

    onnx.helper.set_model_props(model, props)
    data = target.name + DATA_SUFFIX
    graph = scratch / target.name
    onnx.save(model, str(graph), save_as_external_data=True, all_tensors_to_one_file=True, location=data)
    # the weights first, the graph that names them last: a reader never finds a graph without its weights
    for written in (scratch / data, graph):
        written.chmod(0o644)  # onnx writes 0600; the server may run as another user (the image's)
    shutil.move(scratch / data, target.parent / data)
    os.replace(graph, target)


def exported_from(target: Path, precision: str = FP32.precision) -> str | None:
    """The sha256 of the weights the export at `target` was made from; None when there is no readable export, or
    when it is of another precision."""
    import onnx

    if not (target.is_file() and (target.parent / (target.name + DATA_SUFFIX)).is_file()):
        return None
    try:
        graph = onnx.load(str(target), load_external_data=False)
    except Exception:  # a damaged file: export it again
        return None
    props = {prop.key: prop.value for prop in graph.metadata_props}
    if props.get(PRECISION_KEY, FP32.precision) != precision:
        return None
    return props.get(WEIGHTS_KEY)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="onnx_export", description=__doc__.splitlines()[0])
    parser.add_argument("target", nargs="?", type=Path, default=onnx_model_path())
    parser.add_argument("--force", action="store_true", help="export again even if an export of these weights exists")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    logging.basicConfig(level=logging.ERROR)  # the quantiser's advice to pre-process: the export is optimised already
    model_dir = packaged_model_dir()
    verify_weights(model_dir)
    fp32 = args.target
    int8 = fp32.with_name(INT8.onnx_file)
    fresh = args.force or exported_from(fp32) != WEIGHTS_SHA256
    if fresh:
        export(model_dir, fp32, WEIGHTS_SHA256)
        print(f"exported {model_dir.name} to {fp32}", file=sys.stderr)
    else:
        print(f"{fp32} is up to date", file=sys.stderr)
    if fresh or exported_from(int8, INT8.precision) != WEIGHTS_SHA256:
        quantise(fp32, int8, WEIGHTS_SHA256)
        print(f"quantised {fp32.name} to {int8}", file=sys.stderr)
    else:
        print(f"{int8} is up to date", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
