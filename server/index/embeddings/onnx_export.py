"""Export the packaged all-MiniLM-L6-v2 to ONNX, once, at install time: the only step that needs torch.

    python -m server.index.embeddings.onnx_export [TARGET]   # and its int8 quantisation beside it

The export is transformers' BertModel traced with dynamic batch and length (eager attention, so nothing about the
example's shape is baked in); its output is the last hidden state, pooled by `onnx_runtime`. onnxruntime's
transformer optimizer then fuses each layer's attention, GELU and layer norms (faster, and smaller buffers), and the
weights are saved beside the graph (`NAME.onnx.data`), which onnxruntime memory-maps instead of copying. The sha256
of the weights it was made from is stored in the graph's metadata, so a runtime refuses an export of other weights.

The int8 model (`MEMORY_LOCAL_MODEL=all-MiniLM-L6-v2-int8`, the default) is then made from that export, by
onnxruntime's dynamic quantisation as `INT8_RECIPE` says: the weights of the MatMul and Attention nodes it names
become int8, one scale per output channel (one per tensor lost 0.05 of cosine to the float32 vectors) and within
7 bits, so that every x86 CPU computes the same products; activations are quantised per call. It is deterministic
(the same bytes from the same export) and carries the same weights' sha256, and `precision` = int8.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from server.index.model_package import (
    FP32,
    INT8,
    RETIRED_ONNX_FILES,
    WEIGHTS_SHA256,
    onnx_model_path,
    packaged_model_dir,
    verify_weights,
)

WEIGHTS_KEY = "weights_sha256"
PRECISION_KEY = "precision"  # absent in the exports made before the int8 model: those are fp32
PARTS = ("qkv", "attn_out", "ffn_in", "ffn_out")  # the embedding tables (Gather) always stay float32
_LAYER_MATMUL = re.compile(r"/layer\.(\d+)/(attention/output|intermediate|output)/dense/MatMul$")
_MATMUL_PARTS = {"attention/output": "attn_out", "intermediate": "ffn_in", "output": "ffn_out"}
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


@dataclass(frozen=True)
class Recipe:
    """How the int8 model is made from the float32 export: which weight-bearing nodes are quantised (by part and
    layer) and with which scales. The parts of a BERT layer: "qkv" (the fused Attention node's input projections),
    "attn_out" (attention output projection), "ffn_in" and "ffn_out" (the feed-forward MatMuls)."""

    parts: tuple[str, ...] = PARTS
    float_layers: tuple[int, ...] = ()  # layers left wholly float32
    float_nodes: tuple[tuple[str, int], ...] = ()  # (part, layer) pairs left float32
    per_channel: bool = True
    reduce_range: bool = False  # 7-bit weights, for CPUs whose u8 x s8 products saturate (no VNNI)

    def nodes(self, graph: Any) -> list[str]:
        """The names of `graph`'s nodes this recipe quantises."""
        chosen = []
        for node in graph.node:
            where = node_part(node.name, node.op_type)
            if (
                where is not None
                and where[0] in self.parts
                and where[1] not in self.float_layers
                and where not in self.float_nodes
            ):
                chosen.append(node.name)
        return chosen


# The int8 model's (model_package.INT8; a change of it needs a new model id and file there). The feed-forward output
# MatMuls of the first three layers stay float32: their inputs (after GELU) have the widest ranges, and quantising
# them per call cost the most cosine (bench/explore_int8.py, bench/results/int8.md). Weights are 7-bit (|w| <= 64,
# `MAX_INT8_WEIGHT`) so that a CPU without VNNI computes what one with it does: there onnxruntime sums two u8 x s8
# products into an int16 (VPMADDUBSW), which 8-bit weights overflow; its saturation moved vectors to a cosine of
# 0.987 from the same text's on a VNNI CPU, and 7-bit weights keep them at 0.998 or more (bench/results/int8.md).
INT8_RECIPE = Recipe(float_nodes=(("ffn_out", 0), ("ffn_out", 1), ("ffn_out", 2)), reduce_range=True)
# The largest int8 weight whose products with two u8 activations still fit an int16: 2 x 255 x 64 = 32640 <= 32767.
MAX_INT8_WEIGHT = 64


def node_part(name: str, op_type: str) -> tuple[str, int] | None:
    """(part, layer) of a weight-bearing node of the fused export, None for any other node."""
    if op_type == "Attention":  # Attention_3: layer 3's
        return "qkv", int(name.rsplit("_", 1)[-1])
    found = _LAYER_MATMUL.search(name) if op_type == "MatMul" else None
    if found is None:
        return None
    return _MATMUL_PARTS[found.group(2)], int(found.group(1))


def quantise(source: Path, target: Path, weights_sha256: str, recipe: Recipe | None = None) -> Path:
    """Write the int8 quantisation of the float32 export at `source` to `target` (atomically) and return it."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    recipe = recipe or INT8_RECIPE
    graph = onnx.load(str(source), load_external_data=False)
    nodes = recipe.nodes(graph.graph)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".quantise-") as scratch:
        plain = Path(scratch) / "quantised.onnx"
        quantize_dynamic(
            str(source),
            str(plain),
            weight_type=QuantType.QInt8,
            per_channel=recipe.per_channel,
            reduce_range=recipe.reduce_range,
            nodes_to_quantize=nodes,
            extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},  # for tensors whose type it cannot infer
        )
        quantised = onnx.load(str(plain))
        if recipe.reduce_range:
            widest = widest_int8_weight(quantised)
            if widest > MAX_INT8_WEIGHT:  # a quantiser that no longer keeps 7 bits: refuse, never install it
                raise RuntimeError(f"the int8 model has a weight of magnitude {widest}, over {MAX_INT8_WEIGHT}")
        save(quantised, target, Path(scratch), {WEIGHTS_KEY: weights_sha256, PRECISION_KEY: INT8.precision})
    return target


def widest_int8_weight(model: Any) -> int:
    """The largest magnitude of any int8 weight of `model` (an onnx ModelProto), 0 when it has none."""
    import onnx
    from onnx import numpy_helper

    weights = [t for t in model.graph.initializer if t.data_type == onnx.TensorProto.INT8]
    return max((int(abs(numpy_helper.to_array(t).astype("int16")).max()) for t in weights), default=0)


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
    for retired in RETIRED_ONNX_FILES:  # an earlier recipe's int8 file: no model loads it any more
        for path in (fp32.with_name(retired), fp32.with_name(retired + DATA_SUFFIX)):
            path.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
