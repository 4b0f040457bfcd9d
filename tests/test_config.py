"""Config dataclasses, presets and TOML files: good values load, bad ones name the key."""

from __future__ import annotations

import pytest

from spectrag.config import ChunkConfig, EmbedConfig, IndexConfig, load_config
from spectrag.errors import ConfigError


def test_defaults_and_presets():
    assert load_config().chunk == ChunkConfig(1200, 100, 32)
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
        ("[graph]\nk = 3\n", "unknown key(s) ['k'] in [graph]"),
        ("[graph.weights]\nsemantics = 0.5\n", "graph.weights has unknown signal(s) ['semantics']"),
        ("[graph]\ntau = 1.5\n", "graph.tau must be in [0, 1)"),
        ("[chunk]\nchunk_size = 100\noverlap = 100\n", "chunk.overlap must be in [0, chunk_size=100)"),
        ("[bm25]\nmethod = 'okapi'\n", "bm25.method must be one of"),
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
