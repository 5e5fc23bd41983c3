"""The local model without torch: onnxruntime runs the ONNX export of the packaged all-MiniLM-L6-v2 weights.

What sentence-transformers does around the model is redone here, step for step, so the vectors are the same to
float rounding: texts stripped of surrounding whitespace, WordPiece with [CLS]/[SEP] truncated to 256 tokens, mean
pooling over the real tokens, L2 normalisation. Texts are batched by length with a token budget, which bounds the
attention buffers (batch x heads x length x length) and so the memory an embedding call takes.

How the CPUs are used (bench/results/ingest.md): each model call runs on one thread, and as many calls as there are
CPUs run side by side, one batch each; onnxruntime's own threads split every matrix product and meet after each
operator, which cost about 15 % more CPU per chunk on this model. Idle threads sleep instead of spinning, which
burnt about 40 % more CPU per chunk, and the CPU of an idle server, for no speed.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from tokenizers import Tokenizer as HFTokenizer

from server.index.embeddings.base import Vectors, normalise
from server.index.embeddings.onnx_export import INPUTS, OUTPUT, PRECISION_KEY, WEIGHTS_KEY
from server.index.errors import EmbeddingUnavailableError
from server.index.model_package import FP32

SEQUENCE_LENGTH = 256  # sentence_bert_config.json's max_seq_length, [CLS] and [SEP] included
MAX_BATCH = 32  # texts in one call of the model
# Padded tokens in one call (two texts of 256 tokens): the peak memory of a call grows with it (measured in a
# process embedding notes: 512 -> 175 MB, 1024 -> 203 MB, 2048 -> 255 MB, 4096 -> 366 MB) and the speed does not.
MAX_BATCH_TOKENS = 512
MAX_THREADS = 4  # the server shares its machine; more threads gain little on a model this small
# An int8 model quantises its activations per call, with one scale over the call's whole tensor: a text batched with
# others came out at a cosine down to 0.991 from the same text alone. One text per call keeps every text's vector its
# own (the same in a rebuild, on another server, in the cache), at no measured cost (bench/bench_int8_batching.py).
BATCH_OF_QUANTISED = 1


@dataclass(frozen=True)
class OnnxTuning:
    """How the model's calls use the CPUs. The defaults are the measured best; bench_ingest also runs the old ones."""

    workers: int = 0  # model calls run side by side (0: one per CPU, at most MAX_THREADS)
    intra_op_threads: int = 1  # onnxruntime threads inside one call
    spinning: bool = False  # whether onnxruntime's idle threads busy-wait for work
    max_batch_tokens: int = MAX_BATCH_TOKENS


# What the runtime did before bench_ingest: one call at a time, split over every CPU by spinning threads.
SPLIT_CALLS = OnnxTuning(workers=1, intra_op_threads=0, spinning=True)


def thread_count() -> int:
    """The CPUs this process may run on, at most MAX_THREADS."""
    try:
        available = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        available = os.cpu_count() or 1
    return max(1, min(MAX_THREADS, available))


def batches(lengths: Sequence[int], max_batch: int = MAX_BATCH, max_tokens: int = MAX_BATCH_TOKENS) -> list[list[int]]:
    """Indexes of texts grouped for the model: longest first, each group's padded size within `max_tokens`."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    groups: list[list[int]] = []
    for index in order:
        if groups:
            group = groups[-1]
            longest = lengths[group[0]]  # sorted: the first is the longest
            if len(group) < max_batch and (len(group) + 1) * longest <= max_tokens:
                group.append(index)
                continue
        groups.append([index])
    return groups


def mean_pool(hidden: npt.NDArray[np.float32], mask: npt.NDArray[np.int64]) -> Vectors:
    """The mean of each row's real-token states (sentence-transformers' mean pooling), L2-normalised."""
    weights = mask[:, :, None].astype(np.float32)
    summed = (hidden * weights).sum(axis=1)
    counts = np.maximum(weights.sum(axis=1), np.float32(1e-9))
    return normalise(summed / counts)


class OnnxEncoder:
    """One onnxruntime session over the export, shared by all threads (a session's `run` is thread-safe)."""

    runtime = "onnx"

    def __init__(
        self,
        model_dir: Path,
        onnx_path: Path,
        weights_sha256: str,
        tuning: OnnxTuning | None = None,
        precision: str = FP32.precision,
    ) -> None:
        if not onnx_path.is_file():
            other = (
                "MEMORY_EMBEDDING_RUNTIME=torch" if precision == FP32.precision else f"MEMORY_LOCAL_MODEL={FP32.name}"
            )
            raise EmbeddingUnavailableError(
                f"no {precision} ONNX export of the model at {onnx_path}; run "
                f"`python -m server.index.embeddings.onnx_export` (scripts/install.sh does) or set {other}"
            )
        import onnxruntime

        self.tuning = tuning = tuning or OnnxTuning()
        self.max_batch = MAX_BATCH if precision == FP32.precision else BATCH_OF_QUANTISED
        self.workers = tuning.workers or thread_count()
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = tuning.intra_op_threads or thread_count()
        options.inter_op_num_threads = 1
        options.log_severity_level = 3  # errors only
        options.add_session_config_entry("session.intra_op.allow_spinning", "1" if tuning.spinning else "0")
        # Prepacking keeps a second, repacked copy of every weight matrix: 40 MB for no speed measured here.
        options.add_session_config_entry("session.disable_prepacking", "1")
        try:
            self.session: Any = onnxruntime.InferenceSession(
                str(onnx_path), options, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:  # a damaged or foreign file: onnxruntime's own error classes
            raise EmbeddingUnavailableError(f"cannot load the ONNX model at {onnx_path}: {exc}") from exc
        metadata = self.session.get_modelmeta().custom_metadata_map
        if metadata.get(WEIGHTS_KEY) != weights_sha256:
            raise EmbeddingUnavailableError(
                f"the ONNX model at {onnx_path} was not exported from the packaged weights; export it again"
            )
        found = metadata.get(PRECISION_KEY, FP32.precision)  # the exports made before int8 existed do not say
        if found != precision:
            raise EmbeddingUnavailableError(
                f"the ONNX model at {onnx_path} is the {found} export, expected {precision}; export it again"
            )
        self.detail = (
            f"onnxruntime {onnxruntime.__version__}, {self.workers} x {options.intra_op_num_threads} threads, "
            f"{onnx_path}"
        )
        tokenizer = HFTokenizer.from_file(str(model_dir / "tokenizer.json"))
        tokenizer.no_padding()  # the file pads to 128: padding is done here, per batch
        tokenizer.enable_truncation(SEQUENCE_LENGTH)
        self.tokenizer = tokenizer
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()

    def encode(self, texts: Sequence[str]) -> Vectors:
        encodings = self.tokenizer.encode_batch([text.strip() for text in texts])
        lengths = [len(encoding.ids) for encoding in encodings]
        groups = batches(lengths, max_batch=self.max_batch, max_tokens=self.tuning.max_batch_tokens)
        vectors = np.zeros((len(texts), 0), dtype=np.float32)

        def run(group: list[int]) -> tuple[list[int], Vectors]:
            length = len(encodings[group[0]].ids)
            ids = np.zeros((len(group), length), dtype=np.int64)
            mask = np.zeros((len(group), length), dtype=np.int64)
            for row, index in enumerate(group):
                tokens = encodings[index].ids
                ids[row, : len(tokens)] = tokens
                mask[row, : len(tokens)] = 1
            (hidden,) = self.session.run([OUTPUT], dict(zip(INPUTS, (ids, mask), strict=True)))
            return group, mean_pool(hidden, mask)

        # session.run releases the GIL: the batches of one call (and of calls from other threads) run side by side
        done = map(run, groups) if len(groups) == 1 or self.workers == 1 else self._workers().map(run, groups)
        for group, pooled in done:
            if vectors.shape[1] == 0:
                vectors = np.zeros((len(texts), pooled.shape[1]), dtype=np.float32)
            vectors[group] = pooled
        return vectors

    def _workers(self) -> ThreadPoolExecutor:
        """The threads that run model calls, started on first use and kept for the process's life."""
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="onnx-encode")
            return self._pool
