"""The ONNX Runtime copies of the embedding model: the float32 export the CPU query and build
paths run on, and the int8 copy of it for queries (``embed_backend = "onnx-int8"``).

Each copy is made once in the cache folder, checked against the torch encoder on texts of
shapes other than the export's probe, and marked verified (so that the next start's queries
need no sentence-transformers, :mod:`spectrag.index.query_onnx`); a copy that is damaged, or
was made by other versions, is made again. :class:`OnnxCopies` is the part of
:class:`~spectrag.index.embed.Embedder` that does this.
"""

from __future__ import annotations

import os
import tempfile
import warnings
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch

from spectrag.errors import ConfigError
from spectrag.index.query_onnx import OnnxQueryEncoder, model_plan, session_for, write_verified
from spectrag.util.console import root_logger_quiet

# the int8 query model's least cosine to torch on the check's texts (measured on the four dev
# sets' 873 questions: 0.995 at worst, bench/results/query_int8_cpu.md)
INT8_MIN_COSINE = 0.98
# what an ONNX copy's vectors are checked against torch on: shapes other than the export's probe
_CHECK_TEXTS = ("a", "short text", "a longer text, to give this batch a different shape " * 6)
INT8_RECIPE = "int8-fp32down"  # in the cached copy's name: a copy made by another recipe is not reused


def onnx_export_path(folder: Path, fingerprint: str, dim: int, *, int8: bool = False) -> Path:
    """Where the ONNX export of the model with ``fingerprint`` lives in the cache ``folder``
    (``int8``: its partly quantized copy, :meth:`Embedder.int8_query_encoder`)."""
    return folder / f"{fingerprint}-{dim}{'-' + INT8_RECIPE if int8 else ''}.onnx"


def down_projections(export: Path) -> list[str]:
    """The MatMul nodes of an ONNX model whose constant weight ``[k, n]`` narrows (``k > n``):
    a transformer's feed-forward down-projections. Their inputs, after the activation function,
    hold the outlier values that one int8 scale per call represents worst: quantizing them moved
    MuSiQue's query vectors to a cosine of 0.991 and docs-dev R@5 by -1.2; keeping them in
    float32, 0.995 and +0.0 (bench/results/query_int8_cpu.md)."""
    import onnx

    model = onnx.load(str(export), load_external_data=False)
    shapes = {init.name: tuple(init.dims) for init in model.graph.initializer}
    return [node.name for node in model.graph.node if node.op_type == "MatMul" and len(node.input) == 2
            and len(shapes.get(node.input[1], ())) == 2 and shapes[node.input[1]][0] > shapes[node.input[1]][1]]


class OnnxCopies:
    """The ONNX Runtime part of :class:`~spectrag.index.embed.Embedder` (a mixin: it uses the
    embedder's model, its torch encoding ``_encode_uncached`` and its ``_ort`` session slot)."""

    def _onnx_session(self):
        """ONNX Runtime session on the model's transformer, exported once and verified."""

        try:
            import onnxruntime  # noqa: F401  (present, or the error below)
        except ImportError:
            raise self.BackendUnavailable(
                "embed.backend = 'onnx' needs ONNX Runtime (and onnx to export the model): "
                "pip install onnxruntime onnx"
            ) from None
        first = self.model[0]
        if not self._fast or not hasattr(first, "auto_model"):
            raise ConfigError(
                f"embed.backend = 'onnx' supports text transformer models; {self.config.model!r} "
                "is not one: use backend = 'torch'"
            )
        self._token_output = getattr(first, "module_output_name", None) or "token_embeddings"
        probe = self._preprocess(["probe text", "a second, somewhat longer probe text for export"])
        self._ort_inputs = [
            k for k in ("input_ids", "attention_mask", "token_type_ids") if isinstance(probe.get(k), torch.Tensor)
        ]
        folder = Path(self._cache_dir) / "onnx" if self._cache_dir else None
        if folder is not None:
            try:
                folder.mkdir(parents=True, exist_ok=True)
            except OSError:  # the vectors' cache folder is checked above; this one may only be read-only
                folder = None
        if folder is None:

            self._tmp_dir = tempfile.mkdtemp(prefix="spectrag-onnx-")
            folder = Path(self._tmp_dir)
        path = onnx_export_path(folder, self.fingerprint, self.dim)
        threads = self.config.num_threads or torch.get_num_threads()

        def open_export(copy: Path):
            session = session_for(copy, threads)
            with self._running_on(session):
                return session, self._encode_uncached(list(_CHECK_TEXTS), False)

        self._ort = self._checked_copy(
            path, lambda copy: self._export_onnx(first.auto_model, probe, copy), open_export, 0.9999,
            lambda cosine: f"the ONNX export of {self.config.model!r} disagrees with torch (min cosine "
                           f"{cosine:.6f}); use embed.backend = 'torch'")
        plan = model_plan(self.model_path)
        if self._int8:  # the queries on the int8 copy; long texts and encode() on this export
            self._light = self.int8_query_encoder(path, plan, threads)
        else:
            self._light = OnnxQueryEncoder(self.model_path, self._ort, plan) if plan else None
        return self._ort

    def _checked_copy(self, path: Path, make, open_copy, min_cosine: float, refused):
        """What ``open_copy(path)`` opens, ``(it, vectors of _CHECK_TEXTS)``, once those vectors
        are within ``min_cosine`` of torch's; then ``path`` is marked verified for the next
        start. A copy already at ``path`` that does not open (damaged) or does not pass (made by
        other versions) is made again by ``make(path)``, once; a new copy that fails raises
        ``RuntimeError(refused(cosine))``."""
        want = self._reference_vectors()
        fresh = not path.exists()
        while True:
            if fresh:
                make(path)
            try:
                opened, got = open_copy(path)
                cosine = float((want * got).sum(axis=1).min())
            except Exception:  # ONNX Runtime refuses a damaged copy (its own exception types)
                if fresh:
                    raise
                opened, cosine = None, -1.0
            if cosine >= min_cosine:
                try:
                    write_verified(path, cosine)  # the next start's queries need no sentence-transformers
                except OSError:
                    pass  # a read-only cache folder: every start checks again
                return opened
            if hasattr(opened, "close"):
                opened.close()
            path.unlink(missing_ok=True)
            if fresh:
                raise RuntimeError(refused(cosine))
            fresh = True  # damaged, or made by other versions of torch / transformers / ONNX Runtime

    def _export_onnx(self, model, probe: dict, path: Path) -> None:


        try:
            import onnx  # noqa: F401  (torch's exporter writes through it)
        except ImportError:
            raise self.BackendUnavailable(
                "embed.backend = 'onnx' exports the model with onnx: pip install onnxruntime onnx"
            ) from None
        names = self._ort_inputs

        class _Hidden(torch.nn.Module):
            def __init__(self, inner: torch.nn.Module) -> None:
                super().__init__()
                self.inner = inner

            def forward(self, *args: torch.Tensor) -> torch.Tensor:
                return self.inner(**dict(zip(names, args))).last_hidden_state

        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.stem}.{os.getpid()}.tmp")
        axes = {name: {0: "batch", 1: "sequence"} for name in [*names, "token_embeddings"]}
        try:
            with warnings.catch_warnings(), torch.no_grad():
                warnings.simplefilter("ignore")  # tracer and deprecation chatter
                torch.onnx.export(
                    _Hidden(model).eval(),
                    tuple(probe[name] for name in names),
                    str(tmp),
                    input_names=names,
                    output_names=["token_embeddings"],
                    dynamic_axes=axes,
                    opset_version=17,
                    dynamo=False,
                )
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)

    def int8_query_encoder(self, export: Path, plan: dict | None, threads: int) -> OnnxQueryEncoder:
        """The queries' encoder on the int8 copy of the verified float32 ``export``: ONNX
        Runtime's dynamic quantization of every MatMul but the feed-forward down-projections
        (:func:`down_projections`; int8 weights per output channel, each MatMul's input scaled
        per call), written once beside the export and checked against torch (min cosine
        :data:`INT8_MIN_COSINE`). Each query runs alone (the float32 export stacks texts of one
        length), so the per-call scale is its own and its vector does not depend on its batch; texts longer than
        the model reads are pooled on the float32 export (:meth:`encode_queries`). About 0.6x
        the float32 export's time, R@5 within 0.1 on the four dev sets
        (bench/results/query_int8_cpu.md)."""
        if plan is None:
            raise ConfigError(f"int8 query vectors need a text transformer with mean or CLS pooling; "
                              f"{self.config.model!r} is of another shape: use embed_backend = 'onnx'")
        try:
            from onnxruntime.quantization import QuantType, quantize_dynamic
        except ImportError as exc:
            raise self.BackendUnavailable(f"int8 query vectors need onnxruntime.quantization ({exc})") from None

        def quantize(copy: Path) -> None:
            tmp = copy.with_name(f"{copy.stem}.{os.getpid()}.tmp.onnx")
            try:
                with warnings.catch_warnings(), root_logger_quiet():
                    warnings.simplefilter("ignore")  # the quantizer's advice to pre-process the model
                    quantize_dynamic(str(export), str(tmp), weight_type=QuantType.QInt8, per_channel=True,
                                     op_types_to_quantize=["MatMul"], nodes_to_exclude=down_projections(export))
                os.replace(tmp, copy)
            finally:
                tmp.unlink(missing_ok=True)

        def open_copy(copy: Path):
            encoder = OnnxQueryEncoder(self.model_path, session_for(copy, threads), plan, stack=False)
            return encoder, encoder.encode(list(_CHECK_TEXTS))[0]

        return self._checked_copy(
            onnx_export_path(export.parent, self.fingerprint, self.dim, int8=True), quantize, open_copy,
            INT8_MIN_COSINE, lambda cosine: f"the int8 copy of {self.config.model!r}'s ONNX export is too far from "
                                            f"torch (min cosine {cosine:.4f} < {INT8_MIN_COSINE}); use embed_backend = 'onnx'")

    def _reference_vectors(self) -> np.ndarray:
        """The torch encoder's vectors of :data:`_CHECK_TEXTS` (what a copy is checked against),
        computed once. ``[3, dim]``."""
        if self._reference is None:
            with self._running_on(None):
                self._reference = self._encode_uncached(list(_CHECK_TEXTS), False)
        return self._reference

    @contextmanager
    def _running_on(self, session):
        """The embedder's forward passes on ``session`` (None: torch) inside the block, its own
        runtime after. Only while the embedder is being made, so no other thread encodes on it."""
        own, self._ort = self._ort, session
        try:
            yield
        finally:
            self._ort = own
