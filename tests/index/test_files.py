"""Which files of a corpus folder are read: hidden and vendor folders skipped, include / exclude
globs with .gitignore semantics, and the tally of what was left out, by reason."""

from __future__ import annotations

import pytest

from spectrag.config import CorpusConfig, load_config
from spectrag.errors import ConfigError, CorpusError
from spectrag.index.files import VENDOR_FOLDERS, SkipTally, describe
from spectrag.index.load import iter_documents, load_documents


def _tree(root, files):
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


@pytest.fixture
def corpus(tmp_path):
    return _tree(tmp_path / "c", {
        "docs/a.md": "# A\nAlpha.\n",
        "docs/drafts/b.md": "# B\nBeta.\n",
        "docs/conf.py": "print(1)\n",
        "docs/logo.png": "png",
        "Makefile": "all:\n",
        "src/s.txt": "Source notes.\n",
        ".git/HEAD.md": "# not docs\n",
        ".hidden.md": "# hidden\n",
        ".venv/lib/site-packages/pkg/README.md": "# vendored\n",
        "node_modules/x/README.md": "# vendored\n",
        "docs/_build/html/index.md": "# built\n",
        "sub/dist/out.md": "# built deep\n",
        "pkg/__pycache__/x.md": "# cache\n",
    })


def _read(root, **rules):
    tally = SkipTally()
    docs = list(iter_documents(root, "folder", rules=CorpusConfig(**rules), tally=tally))
    return [d.doc_id for d in docs], tally.to_dict()


def test_hidden_and_vendor_folders_are_skipped_by_default_and_counted(corpus):
    ids, skipped = _read(corpus)
    assert ids == ["docs/a.md", "docs/drafts/b.md", "src/s.txt"]
    assert skipped["hidden"]["count"] == 3  # .git/, .venv/, .hidden.md
    assert set(skipped["hidden"]["examples"]) == {".git/", ".venv/", ".hidden.md"}
    assert sorted(skipped["vendor/build folder"]["examples"]) == ["docs/_build/", "node_modules/", "pkg/__pycache__/",
                                                                 "sub/dist/"]
    unsupported = skipped["unsupported file type"]
    assert unsupported["count"] == 3 and unsupported["types"] == {".py": 1, ".png": 1, "Makefile": 1}


def test_skipping_can_be_turned_off(corpus):
    ids, skipped = _read(corpus, skip_hidden=False, skip_vendor=False)
    assert {".git/HEAD.md", ".hidden.md", "node_modules/x/README.md", "docs/_build/html/index.md",
            ".venv/lib/site-packages/pkg/README.md", "sub/dist/out.md", "pkg/__pycache__/x.md"} <= set(ids)
    assert "hidden" not in skipped and "vendor/build folder" not in skipped
    ids, _ = _read(corpus, skip_hidden=False)  # .venv is hidden, and a vendor folder too
    assert ".git/HEAD.md" in ids and not any(i.startswith((".venv/", "node_modules/")) for i in ids)


@pytest.mark.parametrize("exclude, expected", [
    (["drafts/"], ["docs/a.md", "src/s.txt"]),                   # a folder at any depth
    (["/docs/drafts/"], ["docs/a.md", "src/s.txt"]),             # anchored at the corpus root
    (["/drafts/"], ["docs/a.md", "docs/drafts/b.md", "src/s.txt"]),  # anchored: no top-level drafts/
    (["*.txt"], ["docs/a.md", "docs/drafts/b.md"]),
    (["docs/**/b.md"], ["docs/a.md", "src/s.txt"]),
    (["*.md", "!docs/a.md"], ["docs/a.md", "src/s.txt"]),        # ! re-includes, as in .gitignore
])
def test_exclude_globs_have_gitignore_semantics(corpus, exclude, expected):
    ids, skipped = _read(corpus, exclude=exclude)
    assert ids == expected
    assert skipped.get("excluded by glob", {}).get("count", 0) == 3 - len(expected)


def test_include_globs_select_and_the_rest_is_counted(corpus):
    ids, skipped = _read(corpus, include=["docs/"])
    assert ids == ["docs/a.md", "docs/drafts/b.md"]
    assert skipped["not matched by an include glob"]["examples"] == ["Makefile", "src/s.txt"]
    ids, _ = _read(corpus, include=["*.md"], exclude=["drafts/"])
    assert ids == ["docs/a.md"]  # exclude wins over include


def test_too_large_files_are_skipped(corpus):
    (corpus / "docs" / "big.md").write_text("# Big\n" + "word " * 3000, encoding="utf-8")
    ids, skipped = _read(corpus, max_file_mb=0.01)
    assert "docs/big.md" not in ids and skipped["too large"]["examples"] == ["docs/big.md"]


def test_a_folder_with_nothing_to_read_says_what_was_skipped(tmp_path):
    root = _tree(tmp_path / "c", {"node_modules/a.md": "# A\n", "conf.py": "x = 1\n"})
    with pytest.raises(CorpusError, match=r"holds no .md.*vendor/build folder: 1 \(node_modules/\).*unsupported file "
                                          r"type: 1 \(\.py 1\)"):
        load_documents(root)


def test_a_file_given_as_the_corpus_is_read_whatever_its_name(tmp_path):
    hidden = _tree(tmp_path, {"build/.notes.md": "# Notes\nText.\n"}) / "build" / ".notes.md"
    assert [d.doc_id for d in iter_documents(hidden)] == [".notes.md"]


def test_describe_lists_reasons_in_order_with_examples():
    tally = SkipTally()
    for i in range(6):
        tally.add("unsupported file type", f"f{i}.py", kind=".py")
    tally.add("hidden", ".git/")
    lines = describe(tally.to_dict())
    assert lines == ["hidden: 1 (.git/)", "unsupported file type: 6 (.py 6)"]
    assert len(tally.to_dict()["unsupported file type"]["examples"]) == 5  # the first few only


def test_corpus_settings_come_from_the_config_file_and_are_checked(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('[corpus]\ninclude = ["docs/**"]\nexclude = ["drafts/"]\nskip_hidden = false\n', encoding="utf-8")
    config = load_config(path)
    assert config.corpus.include == ("docs/**",) and config.corpus.exclude == ("drafts/",)
    assert config.corpus.skip_hidden is False and config.corpus.skip_vendor is True
    path.write_text('[corpus]\nexclude = "drafts/"\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"corpus.exclude must be a list of glob strings"):
        load_config(path)
    with pytest.raises(ConfigError, match=r"corpus.include must hold non-empty glob strings"):
        CorpusConfig(include=[""])


def test_the_vendor_list_names_the_usual_folders():
    assert {"node_modules", "_build", "build", "dist", "__pycache__", "site-packages", ".tox", ".venv"} <= set(VENDOR_FOLDERS)
