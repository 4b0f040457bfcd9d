"""Config dataclasses, presets and TOML files: good values load, bad ones name the key."""

from __future__ import annotations

import re

import pytest

from spectrag.config import ChunkConfig, EmbedConfig, IndexConfig, load_config
from spectrag.errors import ConfigError


def test_defaults_and_presets():
    assert load_config().chunk == ChunkConfig(256, 32, 32) == ChunkConfig()
    fine = load_config(preset="fine").chunk
    assert (fine.chunk_size, fine.overlap) == (256, 64)


def test_toml_overrides_preset(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('[chunk]\noverlap = 32\n[embed]\nbatch_size = 8\n[bm25]\nstemmer = ""\n')
    config = load_config(path, preset="fine")
    assert (config.chunk.chunk_size, config.chunk.overlap) == (256, 32)
    assert config.embed.batch_size == 8 and config.bm25.stemmer == ""


def test_graph_weights_merge_with_defaults(tmp_path):
    path = tmp_path / "g.toml"
    path.write_text("[graph.weights]\ncitation = 0.5\n")
    weights = load_config(path).graph.signal_weights()
    assert weights["citation"] == 0.5 and weights["semantic"] == 0.3


def test_round_trip_through_dict():
    config = IndexConfig(embed=EmbedConfig(cache_dir=""))
    assert IndexConfig.from_dict(config.to_dict()) == config


@pytest.mark.parametrize(
    "toml, message",
    [
        ("[chunk]\nsize = 3\n", "unknown key(s) ['size'] in [chunk]"),
        ("[retrieval]\nk = 3\n", "unknown section(s) ['retrieval']"),
        ("[expand]\nhops = -1\n", "expand.hops must be an integer in [0, 100], got -1"),
        ("[retriever]\nmode = 'magic'\n", "retriever.mode must be one of 'dense'"),
        ("[retriever]\nexpand = 3\n", "[expand] is a table of its own"),
        ("[bridge]\nlambda = 0.3\n", "unknown key(s) ['lambda'] in [bridge]"),
        ("[bm25]\nk1 = nan\n", "bm25.k1 must be a finite number in (0, 100], got nan"),
        ("[chunk]\nchunk_size = 100.5\n", "chunk.chunk_size must be an integer in [8, 65,536], got 100.5"),
        ("[embed]\ndevice = 3\n", "embed.device must be a string, got 3"),
        ("[graph]\nmin_cos = nan\n", "graph.min_cos must be a finite number"),
        ("[graph]\nentity_top_k = -1\n", "graph.entity_top_k must be an integer in [1, 10,000], got -1"),
        ("[seed]\nrrf_k = nan\n", "seed.rrf_k must be an integer in [1, 1,000,000], got nan"),
        ("[activation]\ntau_a = nan\n", "activation.tau_a must be a finite number"),
        ("[graph.weights]\nentity = 'high'\n", "graph.weights.entity must be a number in [0, 1]"),
        ("[graph]\nk = 3\n", "unknown key(s) ['k'] in [graph]"),
        ("[graph.weights]\nsemantics = 0.5\n", "graph.weights has unknown signal(s) ['semantics']"),
        ("[graph]\ntau = 1.5\n", "graph.tau must be a finite number in [0, 1), got 1.5"),
        ("[chunk]\nchunk_size = 100\noverlap = 100\n", "chunk.overlap must be in [0, chunk_size=100)"),
        ("[bm25]\nmethod = 'okapi'\n", "bm25.method must be one of 'lucene'"),
        ("[embed]\ndevice = 'tpu'\n", "embed.device must be auto, cpu or cuda"),
        ("[chunk\n", "is not valid TOML"),
    ],
)
def test_bad_config_files(tmp_path, toml, message):
    path = tmp_path / "bad.toml"
    path.write_text(toml)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert message in str(err.value)


def test_missing_config_and_unknown_preset(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "none.toml")
    with pytest.raises(ConfigError, match="unknown preset 'huge'"):
        load_config(preset="huge")


def test_online_tables_load_and_keep_the_offline_ones(tmp_path):
    from spectrag.config import load_retriever_config

    path = tmp_path / "both.toml"
    path.write_text("[chunk]\nchunk_size = 256\noverlap = 64\n[retriever]\nmode = 'ppr'\nbudget = 4000\n"
                    "[expand]\nmax_candidates = 300\n[bridge]\nlam = 0.25\n[select]\ncore_size = 2\n")
    online = load_retriever_config(path)
    assert (online.mode, online.budget, online.expand.max_candidates, online.bridge.lam) == ("ppr", 4000, 300, 0.25)
    assert online.select.core_size == 2 and online.expand.hops == 2  # untouched fields keep their defaults
    assert load_config(path).chunk.chunk_size == 256  # the same file builds the index
    assert load_retriever_config(path, mode="dense", expand__hops=0).get("expand.hops") == 0


def test_replace_names_the_bad_table_and_key():
    from spectrag.config import RetrieverConfig

    config = RetrieverConfig()
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['lambda'\] in \[bridge\]"):
        config.replace(bridge__lambda=0.5)
    with pytest.raises(ConfigError, match="no stage table 'bridges'"):
        config.replace(bridges__lam=0.5)
    with pytest.raises(ConfigError, match=re.escape("propagate.alpha must be a finite number in [0, 1], got 2.0")):
        config.replace(propagate__alpha=2.0)
    assert config.replace(**{"expand.hops": 1}).expand.hops == 1 and config.expand.hops == 2


def test_baselines_select_with_their_own_explicit_table():
    from spectrag.config import RetrieverConfig

    base = RetrieverConfig().baseline_select
    assert (base.core_size, base.b, base.c, base.d, base.lam, base.precision_floor) == (0, 0.0, 0.0, 0.0, 0.0, 0.0)
    assert RetrieverConfig().select.core_size == 5 and RetrieverConfig().select.backfill_floor == 0.5


def test_llm_table(tmp_path):
    from spectrag.config import LLMConfig, load_config, load_llm_config

    cfg = tmp_path / "c.toml"
    cfg.write_text('[llm]\nbase_url = "http://localhost:8000/v1"\nmodel = "m"\nconcurrency = 4\n[chunk]\nchunk_size = 300\n')
    assert load_llm_config(cfg) == LLMConfig(base_url="http://localhost:8000/v1", model="m", concurrency=4)
    assert load_llm_config(cfg, model="other", max_tokens=None).model == "other"  # None: a flag not given
    assert load_config(cfg).chunk.chunk_size == 300  # the [llm] table is not an index table
    cfg.write_text('[llm]\nconcurrency = 0\n')
    with pytest.raises(ConfigError, match=re.escape("llm.concurrency must be an integer in [1, 1,024], got 0")):
        load_llm_config(cfg)
    with pytest.raises(ConfigError, match=r"llm.concurrency"):
        load_config(cfg)  # checked by the index loader too
    cfg.write_text('[llm]\ntemprature = 0\n')
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['temprature'\] in \[llm\]"):
        load_llm_config(cfg)
    with pytest.raises(ConfigError, match="llm.base_url must start with http"):
        LLMConfig(base_url="localhost:8000")


def test_utility_questions_settings():
    from spectrag.config import GraphConfig, IndexConfig, with_llm_stages

    with pytest.raises(ConfigError, match="graph.utility_questions and graph.questions_file are both set"):
        GraphConfig(utility_questions=True, questions_file="q.json")
    with pytest.raises(ConfigError, match="graph.questions_per_chunk"):
        GraphConfig(questions_per_chunk=0)
    config = with_llm_stages(IndexConfig(), utility_questions=True, kg_source="llm")
    assert config.graph.utility_questions and config.kg.enabled and config.kg.source == "llm"
    assert "hyde" in __import__("spectrag.config", fromlist=["MODES"]).MODES


# --- values that once built or ran and silently broke the results (issue 16, item 4) ---------

SILENT = [
    ("[bm25]\nk1 = nan\n", "bm25.k1 must be a finite number in (0, 100]"),  # BM25 returned nothing
    ("[bm25]\nk1 = inf\n", "bm25.k1 must be a finite number"),
    ("[graph]\nmin_cos = nan\n", "graph.min_cos must be a finite number"),  # dropped every semantic edge
    ("[graph]\nentity_top_k = -1\n", "graph.entity_top_k must be an integer in [1, 10,000]"),  # dropped every entity edge
    ("[graph.weights]\nentity = nan\n", "graph.weights.entity must be a number in [0, 1]"),
    ("[seed]\nrrf_k = nan\n", "seed.rrf_k must be an integer in [1, 1,000,000]"),  # empty contexts
    ("[activation]\ntau_a = nan\n", "activation.tau_a must be a finite number"),  # NaN thresholds emptied the output
    ("[activation]\ntau_d = nan\n", "activation.tau_d must be a finite number"),
    ("[activation]\ntau_r = nan\n", "activation.tau_r must be a finite number"),
    ("[propagate]\nt = nan\n", "propagate.t must be a finite number in (0, 100]"),
    ("[propagate]\ntol = nan\n", "propagate.tol must be a finite number in (0, 1]"),
    ("[graph]\nlanczos_tol = nan\n", "graph.lanczos_tol must be a finite number in (0, 1]"),
    ("[chunk]\nchunk_size = 100.5\n", "chunk.chunk_size must be an integer in [8, 65,536]"),
    ("[embed]\ndevice = 3\n", "embed.device must be a string"),
    ("[retriever]\nbudget = 1e400\n", "retriever.budget must be an integer"),
]


@pytest.mark.parametrize("toml, message", SILENT, ids=[t.strip().replace("\n", " ") for t, _ in SILENT])
def test_values_that_silently_broke_results_are_refused(tmp_path, toml, message):
    from spectrag.config import load_retriever_config

    path = tmp_path / "c.toml"
    path.write_text(toml)
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(path)  # the index tables, and the online ones checked on the way
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(path) if toml.startswith(("[bm25]", "[graph", "[chunk]", "[embed]")) else load_retriever_config(path)


def test_python_api_refuses_the_same_values():
    from spectrag.config import ActivationConfig, BM25Config, GraphConfig, RetrieverConfig

    for make in (lambda: BM25Config(k1=float("nan")), lambda: GraphConfig(min_cos=float("nan")),
                 lambda: GraphConfig(entity_top_k=-1), lambda: ActivationConfig(tau_d=float("nan")),
                 lambda: RetrieverConfig().replace(seed__rrf_k=float("nan")),
                 lambda: RetrieverConfig().replace(activation__tau_a=float("nan"))):
        with pytest.raises(ConfigError):
            make()


# --- every numeric setting has a stated range, checked through the TOML path (issue 25) ---------


def _numeric_settings():
    from spectrag.config import config_classes, numeric_fields

    return [(cls, name, kind, meta) for cls in config_classes() for name, kind, meta in numeric_fields(cls)]


def _toml_number(value, kind):
    return str(int(value)) if kind == "int" else repr(float(value))


def _load_setting(path, cls, name):
    """The value of ``cls``'s field ``name`` after loading the TOML file ``path`` the way the
    CLI does for that table."""
    from spectrag.config import load_llm_config, load_retriever_config

    if cls.SECTION == "llm":
        return getattr(load_llm_config(path), name)
    if cls.SECTION in ("corpus", "chunk", "embed", "bm25", "graph", "kg"):
        return getattr(getattr(load_config(path), cls.SECTION), name)
    config = load_retriever_config(path)
    return config.get(name if cls.SECTION == "retriever" else f"{cls.SECTION}.{name}")


NUMERIC = _numeric_settings()


@pytest.mark.parametrize("cls, name, kind, meta", NUMERIC, ids=[f"{c.SECTION}.{n}" for c, n, _, _ in NUMERIC])
def test_every_numeric_setting_is_bounded_on_both_sides(tmp_path, cls, name, kind, meta):
    """Each int / float field of every config class (new ones included) has a lower and an
    upper bound; a value past either end, an extreme finite number and a huge integer are each one
    ConfigError naming table.field, the range and the value (briefly); the ends of the range load."""
    from spectrag.config import ranges

    lo, hi = meta["lo"], meta["hi"]
    assert lo is not None and hi is not None, f"{cls.SECTION}.{name} needs both bounds: opt(lo=..., hi=...)"
    step = 1 if kind == "int" else max(abs(hi) * 1e-3, 1e-9)
    above = hi if meta["hi_open"] else hi + step
    below = lo if meta["lo_open"] else lo - step
    path = tmp_path / "c.toml"
    allowed = dict(ranges())[f"{cls.SECTION}.{name}"]
    for text in (_toml_number(above, kind), _toml_number(below, kind), "1e308", "-1e308", str(2**62), str(-(2**63)),
                 "9" * 400):
        path.write_text(f"[{cls.SECTION}]\n{name} = {text}\n")
        with pytest.raises(ConfigError) as err:
            _load_setting(path, cls, name)
        message = str(err.value)
        assert f"{cls.SECTION}.{name} must be {allowed}, got " in message and len(message) < 300, message
    # chunk.overlap and min_tokens are bounded by chunk_size too: the other two set out of the way
    others = {"chunk_size": "overlap = 0\nmin_tokens = 0\n"}.get(name, "chunk_size = 65536\n") if cls.SECTION == "chunk" else ""
    for value, is_open in ((lo, meta["lo_open"]), (hi, meta["hi_open"])):
        if is_open:
            continue
        path.write_text(f"[{cls.SECTION}]\n{name} = {_toml_number(value, kind)}\n{others}")
        assert _load_setting(path, cls, name) == value


def test_ranges_are_listed_in_the_hardening_page():
    """docs/hardening.md lists every numeric setting's range (the table is ranges(), verbatim)."""
    from pathlib import Path

    from spectrag.config import ranges

    page = (Path(__file__).resolve().parents[1] / "docs" / "hardening.md").read_text(encoding="utf-8")
    missing = [f"| `{name}` | {allowed} |" for name, allowed in ranges() if f"| `{name}` | {allowed} |" not in page]
    assert not missing, "docs/hardening.md lacks these rows (python -c 'from spectrag.config import ranges; ...'):\n" + \
        "\n".join(missing)


def test_long_values_are_echoed_briefly(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text("[chunk]\nchunk_size = [" + ", ".join(map(str, range(100_000))) + "]\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value).endswith("got [0, 1, 2, 3, 4, ... (100,000 items)]") and len(str(err.value)) < 200
    path.write_text("[retriever]\n" + "".join(f"x{i} = 1\n" for i in range(5000)))
    from spectrag.config import load_retriever_config

    with pytest.raises(ConfigError, match=re.escape("(5,000 items)")) as err:
        load_retriever_config(path)
    assert len(str(err.value)) < 400
    path.write_text("[embed]\ndevice = '" + "x" * 100_000 + "'\n")
    with pytest.raises(ConfigError, match=re.escape("... (100,000 characters)")):
        load_config(path)


def test_all_errors_of_a_config_file_come_together(tmp_path):
    from spectrag.config import load_config

    path = tmp_path / "c.toml"
    path.write_text('[chunk]\nchunk_size = -5\noverlap = "x"\nbogus = 1\n[retriever]\nbudget = 0\n'
                    '[expand]\nmax_candidates = "many"\n[corpus]\nexclude = "drafts/"\n', encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert message.startswith(f"{path}: 6 problems: (1) ")
    for part in ("retriever.budget must be", "expand.max_candidates must be", "unknown key(s) ['bogus'] in [chunk]",
                 "chunk.chunk_size must be", "chunk.overlap must be", "corpus.exclude must be a list"):
        assert message.count(part) == 1, part
    assert message.count(str(path)) == 1  # the file named once
    path.write_text("[chunk]\nchunk_size = -5\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r": chunk.chunk_size must be an integer in \[8, 65,536\], got -5$"):
        load_config(path)  # one problem: no count
