"""Query vectors from ONNX Runtime without sentence-transformers: tokenizer, transformer, pooling.

Ours because importing sentence-transformers (it pulls in transformers and scikit-learn) takes
about 3 s on a 2-core machine, while a query needs only the model's ``tokenizer.json`` (read by
``tokenizers``, the library under transformers' fast tokenizers), the transformer exported once
to ONNX (:meth:`spectrag.index.onnx_copies.OnnxCopies._onnx_session`) and the mean or CLS pooling its
``1_Pooling/config.json`` names. Models of any other shape, and exports not yet verified
against torch, go through :class:`spectrag.index.embed.Embedder`; the vectors are the same bits
either way (tests/index/test_query_onnx.py holds this).

Each text runs at its own length (no padding), so its vector is a function of its text alone:
texts of the same token length run stacked in one call (``[n, L]``), every other text in calls
of its own. A row of ONNX Runtime's float32 products and of the pooling does not depend on the
rows stacked with it, so a text gets the same bits alone and stacked (tests/index/
test_query_onnx.py holds this), and the bits at one input shape do not move with the thread
count; a stacked call runs larger matrix products, closer to the CPU's peak (0.55-0.62x the time of
each text alone for 256 questions, bench/results/embed_runtime_cpu_xeon_b256.md). The int8 copy runs
each text alone: its dynamic quantization scales a call's activations by the whole call's range.
``lanes`` calls run at a time, each on one thread: ONNX Runtime's intra-op threads split one
short text's small products poorly. Texts are never padded to a shared width: nothing in ONNX
Runtime promises that a padded row keeps its bits (its softmax and product blocking could group
it otherwise on another CPU), and the padding is work.
"""

from __future__ import annotations

import json
import math
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch

_SUPPORTED_POOLING = ("pooling_mode_mean_tokens", "pooling_mode_cls_token")
# the most tokens one stacked call holds: its attention scores take n L^2 x heads floats, so 256
# texts of 256 tokens in one call would take 0.8 GB with 12 heads (at 2,048 tokens, 25 MB)
MAX_CALL_TOKENS = 2048
_PIECE_MARGIN = 4  # as Embedder._PIECE_MARGIN: a text longer than a window less this is pooled in pieces


def verified_marker(onnx_path: Path) -> Path:
    """The file an export's successful check against torch writes beside it."""
    return onnx_path.with_name(onnx_path.name + ".verified.json")


def write_verified(onnx_path: Path, cosine: float) -> None:
    """Record that ``onnx_path`` matched torch (min cosine ``cosine``) under this ONNX Runtime."""
    import onnxruntime

    marker = verified_marker(onnx_path)
    tmp = marker.with_name(f"{marker.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"onnxruntime": onnxruntime.__version__, "min_cosine": cosine}))
    os.replace(tmp, marker)


def model_plan(model_path: Path) -> dict | None:
    """What :class:`OnnxQueryEncoder` needs from a sentence-transformers folder, or None when
    the model is of another shape (then the full encoder runs it): a text transformer at the
    folder's root with a ``tokenizer.json``, then one mean or CLS pooling, then at most a
    normalization."""
    try:
        modules = json.loads((model_path / "modules.json").read_text())
        kinds = [m["type"].rsplit(".", 1)[-1] for m in modules]
        if kinds not in (["Transformer", "Pooling"], ["Transformer", "Pooling", "Normalize"]) or modules[0]["path"]:
            return None
        pooling = json.loads((model_path / modules[1]["path"] / "config.json").read_text())
        modes = [k for k, v in pooling.items() if k.startswith("pooling_mode_") and v]
        config = json.loads((model_path / "sentence_bert_config.json").read_text())
        tokenizer_config = json.loads((model_path / "tokenizer_config.json").read_text())
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return None
    if len(modes) != 1 or modes[0] not in _SUPPORTED_POOLING or config.get("do_lower_case"):
        return None
    if not (model_path / "tokenizer.json").is_file() or tokenizer_config.get("padding_side", "right") != "right":
        return None
    limit = int(config.get("max_seq_length") or 0)
    model_max = tokenizer_config.get("model_max_length")
    if isinstance(model_max, int) and 0 < model_max < 1_000_000:
        limit = min(limit, model_max) if limit else model_max
    if limit <= 0:
        return None
    return {"pooling": modes[0], "max_tokens": limit, "dim": int(pooling["word_embedding_dimension"]),
            "normalize": len(kinds) == 3}


class OnnxQueryEncoder:
    """``encode(texts: [B] str) -> float32 [B, dim]``, rows L2-normalized, each row a function
    of its text alone. ``long``: positions of texts longer than one window of the model (the
    caller embeds those with the full encoder when ``long_texts = "pool"``). ``lanes``: calls
    run at once, each on a thread of its own (``session`` then has one intra-op thread).
    ``stack``: texts of one token length share a call (module docstring; False for a model
    whose rows depend on their call, as the int8 copy's do)."""

    def __init__(self, model_path: Path, session, plan: dict, lanes: int = 1, *, stack: bool = True) -> None:
        from tokenizers import Tokenizer

        self.session = session
        self.stack = stack
        self.inputs = [i.name for i in session.get_inputs()]
        self.dim = plan["dim"]
        self.max_tokens = plan["max_tokens"]
        self.mean = plan["pooling"] == "pooling_mode_mean_tokens"
        self.normalize = plan["normalize"]
        self.lanes = max(1, int(lanes))
        self._pool: ThreadPoolExecutor | None = None
        self._pool_pid = 0  # the process that made the pool: a forked child makes its own
        self.tokenizer = Tokenizer.from_file(str(model_path / "tokenizer.json"))
        self.tokenizer.no_padding()  # each text runs at its own length
        self.tokenizer.enable_truncation(self.max_tokens)
        self.special = self.tokenizer.num_special_tokens_to_add(False)  # [CLS] and [SEP]
        self.room = self.max_tokens - self.special - _PIECE_MARGIN

    @classmethod
    def open(cls, model_path: Path, onnx_path: Path, threads: int, *, stack: bool = True) -> OnnxQueryEncoder | None:
        """The encoder on a verified export (None when there is none yet, it was verified under
        another ONNX Runtime, ONNX Runtime cannot open it, or the model is of a shape only the
        full encoder runs)."""
        plan = model_plan(model_path)
        if plan is None or not onnx_path.is_file():
            return None
        try:
            import onnxruntime as ort

            marker = json.loads(verified_marker(onnx_path).read_text())
        except (ImportError, OSError, ValueError):
            return None
        if marker.get("onnxruntime") != ort.__version__:
            return None
        try:
            session = session_for(onnx_path, 1)
        except Exception:  # damaged since it was verified (ONNX Runtime's own exception types)
            return None
        return cls(model_path, session, plan, lanes=threads, stack=stack)

    def encode(self, texts: list[str]) -> tuple[np.ndarray, list[int]]:
        """``[B]`` texts -> (float32 ``[B, dim]``, positions of the long texts: their rows hold
        the first window's vector)."""
        # sentence-transformers strips each text before tokenizing; tokenized here, in the calling
        # thread (a fast tokenizer must not be shared between threads)
        encodings = self.tokenizer.encode_batch([str(t).strip() for t in texts])
        long = [i for i, e in enumerate(encodings) if e.overflowing or len(e.ids) - self.special > self.room]
        calls = self.calls([len(e.ids) for e in encodings])
        if self.lanes > 1 and len(calls) > 1:
            if self._pool is None or self._pool_pid != os.getpid():  # a fork copies no threads
                self._pool, self._pool_pid = ThreadPoolExecutor(self.lanes, thread_name_prefix="spectrag-query"), os.getpid()
            # largest first, each lane taking the next when it is free: the lanes finish together
            # (8 MuSiQue questions, 2 lanes: 17.4 against 19.2 ms in submission order)
            vectors = list(self._pool.map(lambda rows: self._run([encodings[i] for i in rows]), calls))
        else:
            vectors = [self._run([encodings[i] for i in rows]) for rows in calls]
        out = np.empty((len(encodings), self.dim), dtype=np.float32)
        for rows, got in zip(calls, vectors):
            out[rows] = got
        return out, long

    def calls(self, lengths: list[int]) -> list[list[int]]:
        """The model calls that embed texts of these token ``lengths``: positions of texts of one
        length (each text alone without ``stack``), a length's texts cut into as many calls as
        the lanes need to share the tokens evenly and as :data:`MAX_CALL_TOKENS` allows; the
        largest calls first."""
        if not self.stack:
            return sorted(([i] for i in range(len(lengths))), key=lambda rows: -lengths[rows[0]])
        same: dict[int, list[int]] = {}
        for i, n in enumerate(lengths):
            same.setdefault(n, []).append(i)
        share = sum(lengths) / self.lanes
        calls = []
        for n, rows in same.items():
            parts = max(1, math.ceil(n * len(rows) / share)) if self.lanes > 1 else 1
            parts = max(parts, math.ceil(len(rows) / max(1, MAX_CALL_TOKENS // n)))
            if parts > 1:  # a length cut in parts is cut for every lane alike
                parts = math.ceil(parts / self.lanes) * self.lanes
            parts = min(len(rows), parts)
            calls += [rows[k * len(rows) // parts:(k + 1) * len(rows) // parts] for k in range(parts)]
        return sorted(calls, key=lambda rows: -lengths[rows[0]] * len(rows))

    def _run(self, encodings: list) -> np.ndarray:
        """Texts of one token length in one call, each row its text's alone. -> float32 ``[n, dim]``."""
        ids = np.asarray([e.ids for e in encodings], dtype=np.int64)
        mask = np.asarray([e.attention_mask for e in encodings], dtype=np.int64)
        feed = {"input_ids": ids, "attention_mask": mask,
                "token_type_ids": np.asarray([e.type_ids for e in encodings], dtype=np.int64)}
        hidden = self.session.run(None, {name: feed[name] for name in self.inputs})[0]
        return self.pool(hidden, mask)

    def close(self) -> None:
        if self._pool is not None and self._pool_pid == os.getpid():
            self._pool.shutdown(wait=True)
        self._pool = None

    def pool(self, hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """sentence-transformers' pooling and normalization, the same torch operations (so the
        same bits): ``hidden [n, w, dim]``, ``mask [n, w]`` -> float32 ``[n, dim]``."""
        tokens = torch.from_numpy(hidden)
        with torch.inference_mode():
            if self.mean:
                weights = torch.from_numpy(mask).unsqueeze(-1).expand(tokens.size()).to(tokens.dtype)
                summed = torch.sum(tokens * weights, 1)
                pooled = summed / torch.clamp(weights.sum(1), min=1e-9)
            else:
                pooled = tokens[:, 0]
            if self.normalize:  # the model's Normalize module
                pooled = torch.nn.functional.normalize(pooled, p=2, dim=1)
            return torch.nn.functional.normalize(pooled.float(), p=2, dim=1).numpy()


def session_for(onnx_path: Path, threads: int):
    """An ONNX Runtime CPU session on ``threads`` intra-op threads that sleep rather than spin
    (they keep their speed when other processes share the cores)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(onnx_path), options, providers=["CPUExecutionProvider"])


class LightQueryEmbedder:
    """What :meth:`spectrag.store.Index.query_embedder` gives for ``backend = "onnx"`` once the
    export is verified: :meth:`encode_queries` as :class:`spectrag.index.embed.Embedder`'s
    (the same bits), without loading sentence-transformers unless a text is longer than the
    model reads (``long_texts = "pool"``) or :meth:`encode` is called."""

    def __init__(self, encoder: OnnxQueryEncoder, fingerprint: str, pool_long: bool, full) -> None:
        """``pool_long``: texts longer than the model reads are pooled over windows by the full
        encoder; ``full``: makes that :class:`~spectrag.index.embed.Embedder` when one is needed."""
        self.encoder, self.fingerprint, self.dim = encoder, fingerprint, encoder.dim
        self._pool_long, self._make_full, self._full = pool_long, full, None

    def full(self):
        if self._full is None:
            self._full = self._make_full()
        return self._full

    def encode_queries(self, texts) -> np.ndarray:
        """``[B]`` strings -> float32 ``[B, dim]``, each row the same alone and in any batch."""
        texts = list(texts)
        out, long = self.encoder.encode(texts)
        if long and self._pool_long:
            out[long] = self.full().encode([texts[i] for i in long])
        return out

    def encode(self, texts, **kwargs) -> np.ndarray:
        """Document vectors: the full encoder's (:meth:`Embedder.encode`)."""
        return self.full().encode(texts, **kwargs)

    def close(self) -> None:
        self.encoder.close()
        if self._full is not None:
            self._full.close()
