"""The README's configuration block is the code's defaults, and its commands name real options."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

import spectrag
from spectrag.cli import main

README = Path(__file__).resolve().parents[1] / "README.md"


def _config_block(tmp_path: Path) -> Path:
    section = README.read_text(encoding="utf-8").split("\n## Configuration\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```toml\n(.*?)```", section, re.S)
    assert len(blocks) == 1, "the Configuration section holds one TOML block"
    path = tmp_path / "readme.toml"
    path.write_text(blocks[0], encoding="utf-8")
    return path


def test_readme_config_block_is_the_defaults(tmp_path):
    path = _config_block(tmp_path)
    assert spectrag.load_config(path) == spectrag.load_config()
    assert spectrag.load_retriever_config(path) == spectrag.RetrieverConfig()
    assert spectrag.load_llm_config(path) == spectrag.LLMConfig()


def test_readme_config_block_is_read(tmp_path):
    """A changed value in the block changes the loaded config (the equality above is not vacuous)."""
    path = _config_block(tmp_path)
    path.write_text(path.read_text(encoding="utf-8").replace("lam = 0.15", "lam = 0.25"), encoding="utf-8")
    assert spectrag.load_retriever_config(path).bridge.lam == 0.25


@pytest.mark.parametrize("command", ["index", "add", "delete", "update", "compact", "info", "retrieve", "serve", "view",
                                     "answer", "eval", "demo"])
def test_readme_synopsis_options_exist(command):
    """Every --option the README's command-line synopsis shows for a command is in its --help."""
    text = README.read_text(encoding="utf-8")
    synopsis = text.split("\n## Command line\n", 1)[1].split("```", 2)[1]
    lines, current = {}, None
    for line in synopsis.splitlines():
        m = re.match(r"spectrag (\w+)", line)
        if m:
            current = m.group(1)
        if current:
            lines.setdefault(current, []).append(line.split("#", 1)[0])
    shown = set(re.findall(r"(--[a-z][a-z0-9-]*)", " ".join(lines[command])))
    assert shown, command
    result = CliRunner().invoke(main, [command, "--help"], terminal_width=200)
    assert result.exit_code == 0, result.output
    helptext = result.output
    missing = {o for o in shown if o not in helptext}
    assert not missing, f"spectrag {command}: the README shows {sorted(missing)}, --help does not"


def test_readme_links_exist():
    """Every results file, doc and script the README points to is in the repository."""
    root = README.parent
    text = README.read_text(encoding="utf-8")
    paths = set(re.findall(r"((?:bench|docs)/[\w./-]+\.(?:md|py|sh|json|png))", text))
    assert len(paths) > 20
    missing = sorted(p for p in paths if not (root / p).exists())
    assert not missing, missing
