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
        ("[expand]\nhops = -1\n", "expand.hops must be an integer >= 0, got -1"),
        ("[retriever]\nmode = 'magic'\n", "retriever.mode must be one of 'dense'"),
        ("[retriever]\nexpand = 3\n", "[expand] is a table of its own"),
        ("[bridge]\nlambda = 0.3\n", "unknown key(s) ['lambda'] in [bridge]"),
        ("[bm25]\nk1 = nan\n", "bm25.k1 must be a finite number > 0, got nan"),
        ("[chunk]\nchunk_size = 100.5\n", "chunk.chunk_size must be an integer >= 8, got 100.5"),
        ("[embed]\ndevice = 3\n", "embed.device must be a string, got 3"),
        ("[graph]\nmin_cos = nan\n", "graph.min_cos must be a finite number"),
        ("[graph]\nentity_top_k = -1\n", "graph.entity_top_k must be an integer >= 1, got -1"),
        ("[seed]\nrrf_k = nan\n", "seed.rrf_k must be an integer >= 0, got nan"),
        ("[activation]\ntau_a = nan\n", "activation.tau_a must be a finite number"),
        ("[graph.weights]\nentity = 'high'\n", "graph.weights.entity must be a number in [0, 1]"),
        ("[graph]\nk = 3\n", "unknown key(s) ['k'] in [graph]"),
        ("[graph.weights]\nsemantics = 0.5\n", "graph.weights has unknown signal(s) ['semantics']"),
        ("[graph]\ntau = 1.5\n", "graph.tau must be a finite number >= 0 and < 1, got 1.5"),
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
    with pytest.raises(ConfigError, match="propagate.alpha must be a finite number >= 0 and <= 1, got 2.0"):
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
    with pytest.raises(ConfigError, match=r"llm.concurrency must be an integer >= 1 and <= 1024, got 0"):
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
    ("[bm25]\nk1 = nan\n", "bm25.k1 must be a finite number > 0"),  # BM25 returned nothing
    ("[bm25]\nk1 = inf\n", "bm25.k1 must be a finite number"),
    ("[graph]\nmin_cos = nan\n", "graph.min_cos must be a finite number"),  # dropped every semantic edge
    ("[graph]\nentity_top_k = -1\n", "graph.entity_top_k must be an integer >= 1"),  # dropped every entity edge
    ("[graph.weights]\nentity = nan\n", "graph.weights.entity must be a number in [0, 1]"),
    ("[seed]\nrrf_k = nan\n", "seed.rrf_k must be an integer >= 0"),  # empty contexts
    ("[activation]\ntau_a = nan\n", "activation.tau_a must be a finite number"),  # NaN thresholds emptied the output
    ("[activation]\ntau_d = nan\n", "activation.tau_d must be a finite number"),
    ("[activation]\ntau_r = nan\n", "activation.tau_r must be a finite number"),
    ("[propagate]\nt = nan\n", "propagate.t must be a finite number > 0"),
    ("[propagate]\ntol = nan\n", "propagate.tol must be a finite number > 0"),
    ("[graph]\nlanczos_tol = nan\n", "graph.lanczos_tol must be a finite number > 0"),
    ("[chunk]\nchunk_size = 100.5\n", "chunk.chunk_size must be an integer >= 8"),
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
