"""examples/: the "bring your own docs" walk-through runs as a user runs it (a fresh process),
finds the page that answers each question, and prints nothing on stderr; the command-line steps
of examples/README.md run too."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


def test_walkthrough_script(tmp_path, embed_cache):
    env = {**os.environ, "SPECTRAG_CACHE_DIR": embed_cache}
    done = subprocess.run([sys.executable, str(EXAMPLES / "bring_your_own_docs.py"), "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stderr == "", done.stderr[-3000:]
    out = done.stdout
    assert "indexed 4 documents" in out
    blocks = out.split("\n\n")
    first = next(b for b in blocks if b.startswith("How do I rotate"))
    assert "1. " in first and "Security [Rotating a key without downtime]" in first.splitlines()[1]
    third = next(b for b in blocks if b.startswith("Which environment variable"))
    assert "Configuration reference [Worker settings]" in third.splitlines()[1]
    assert "where audience = dev: [('Getting started with Harbor Queue', 'dev'), ('Getting started with Harbor Queue', 'dev')]" in out
    assert "prompt context:" in out and "of 600 tokens" in out
    assert "HTTP: [" in out and "LangChain: [" in out


def _readme_commands() -> list[list[str]]:
    """The `spectrag ...` lines of examples/README.md's shell block, minus serve (a server)."""
    text = (EXAMPLES / "README.md").read_text()
    block = text.split("## On the command line", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    return [shlex.split(line.split("#", 1)[0].rstrip(" &")) for line in block.splitlines()
            if line.startswith("spectrag ") and not line.startswith("spectrag serve")]


def test_readme_command_lines(tmp_path, embed_cache):
    env = {**os.environ, "SPECTRAG_CACHE_DIR": embed_cache}
    commands = _readme_commands()
    assert [c[1] for c in commands] == ["index", "retrieve", "retrieve", "view"]
    for argv in commands:
        argv = [a.replace("examples/docs", str(EXAMPLES / "docs")) for a in argv]
        done = subprocess.run([sys.executable, "-m", "spectrag", *argv[1:], "--quiet"], capture_output=True, text=True,
                              timeout=600, env=env, cwd=tmp_path)
        assert done.returncode == 0 and done.stderr == "", (argv, done.stderr[-2000:])
    rows = [json.loads(line) for line in (tmp_path / "answers.jsonl").read_text().splitlines()]
    assert rows[0]["budget"] == 600 and rows[0]["used_tokens"] <= 600 and rows[0]["hits"][0]["text"]
    assert (tmp_path / "harbor.html").stat().st_size > 10_000
