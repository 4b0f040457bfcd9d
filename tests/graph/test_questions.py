"""Utility questions: the questions file, their embedding, per-chunk sums, storage."""

from __future__ import annotations

import json

import numpy as np
import pytest

from spectrag.errors import CorpusError, IndexFormatError
from spectrag.graph.questions import embed_questions, load_questions, read_questions_file, save_questions


def _encode(texts):
    v = np.array([[len(t), t.count("?") + 1.0] for t in texts], np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def test_file_embed_sums_and_storage(tmp_path):
    path = tmp_path / "q.json"
    path.write_text(json.dumps({"2": ["Who?", "Where is it?"], "0": ["When?", " "]}))
    questions = read_questions_file(path, 3)
    assert questions == {2: ["Who?", "Where is it?"], 0: ["When?", " "]}
    qs = embed_questions(questions, 3, _encode)
    assert qs.owners.tolist() == [0, 2, 2]  # chunk order; blank questions left out
    np.testing.assert_allclose(qs.vectors, _encode(["When?", "Who?", "Where is it?"]))
    sums, has = qs.chunk_sums(3)
    np.testing.assert_allclose(sums[2], qs.vectors[1] + qs.vectors[2], rtol=1e-6)
    assert has.tolist() == [True, False, True] and not sums[1].any()
    save_questions(tmp_path, qs)
    back = load_questions(tmp_path, n=3)
    assert back.owners.tolist() == [0, 2, 2] and np.array_equal(back.vectors, qs.vectors)
    assert load_questions(tmp_path / "none", n=3) is None
    with pytest.raises(IndexFormatError, match="questions.owners.npy"):  # an owner past the chunk table
        load_questions(tmp_path, n=2)
    np.save(tmp_path / "questions.vectors.npy", np.full((3, qs.vectors.shape[1]), np.nan, dtype=np.float32))
    with pytest.raises(IndexFormatError, match="questions.vectors.npy"):
        load_questions(tmp_path, n=3)


@pytest.mark.parametrize("content, match", [
    ('{"7": ["Q?"]}', "key '7' is not a chunk id in"),
    ('{"0": "Q?"}', "value of '0' is not a list"),
    ('["Q?"]', "expected an object"),
    ('{"0": ["Q?"', "invalid JSON"),
])
def test_bad_files_name_the_problem(tmp_path, content, match):
    path = tmp_path / "q.json"
    path.write_text(content)
    with pytest.raises(CorpusError, match=match):
        read_questions_file(path, 3)
