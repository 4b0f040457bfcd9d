"""Synthetic corpus for scale benchmarks: Markdown documents whose sections are one chunk each,
clustered embeddings for those chunks, and a query set, written streaming with a fixed seed.

    python bench/make_synthetic.py --n 1000000 --out /tmp/spectrag-synth-corpus-1e6

``--n`` counts **chunks**: documents of 1-7 sections (mean 4), each section 45-105 words
(about 80-200 cl100k tokens), so every section is exactly one chunk under the default chunking
(1,200 / 100 tokens, min 32) and chunk ``i`` is the ``i``-th section in corpus order.

**Text.** A document is ``# Title`` + an intro section, then ``## H2`` / ``### Part k``
sections. Words: about 75 % common English words (Zipf-weighted) and 25 % the document topic's
own pseudo-words (BM25 material). Inserted mid-sentence: 2-4 named entities of the section's
topic (Zipf-weighted within the topic, about one name per 8 chunks of a topic), a year (10 %
of sections), one of 300 corpus-wide popular names (20 %; frequent, so the entity signal's
document-frequency cap has something to drop), a mention of another document's title (10 %,
80 % of them within the topic: title-mention citations and entity edges), a Markdown link to
another document (2 %) and a bare URL of one (1 %).

**Embeddings** (float32, L2-normalized, ``d = --dim``): topic centre + 0.7 x a per-document
offset + 0.6 x noise (offset and noise ~ N(0, I / d)): cosine about 0.8 within a document,
0.55 within a topic, 0 +- 0.09 across topics. Topics: ``max(2, n // 400)`` with log-normal
sizes; 85 % of a document's sections are in its topic, the rest in random topics.

**Queries** (``--queries``, default 1,024): a topic, a vector near its centre
(centre + 0.9 x noise), and a text of two topic words and a topic name.

Files under ``--out``: ``corpus.jsonl`` (the ``jsonl`` corpus format: id, title, url, text),
``embeddings.npy`` ``[n, d]`` (written block by block through a memory map),
``topics.npy`` int32 ``[n]``, ``queries.jsonl`` (text, topic), ``queries.npy`` ``[Q, d]``,
and ``meta.json`` (parameters and counts; written last, so a folder with it is complete and
is reused by :func:`ensure` when the parameters match).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np
from _common import ensure_spectrag

ensure_spectrag()
from spectrag.extract.titles import COMMON_WORDS  # noqa: E402
from spectrag.types import Chunk  # noqa: E402

VERSION = 1  # bump when the output changes for the same parameters
SECTIONS = (1, 7)  # sections per document (inclusive)
WORDS = (45, 105)  # words per section before inserted entities (inclusive)
CHUNKS_PER_TOPIC = 400
POPULAR = 300

SYLLABLES = "ka lo mer vin tas dor el ran sov bri quel nor fa ith gul pen tor wy sam ost ul hav zil cas".split()
_TOPIC_SYL = (
    "ab ad af ag al am an ap ar as at av ba be bo bu da de di do du fe fi fo ga ge gi go "
    "ha he hi ja je ko ku la le li lu ma me mi mo mu na ne ni no nu pa"
).split()  # 48: 48^3 = 110,592 distinct 3-syllable topic words (24 per topic -> 4,608 topics)
_H2 = ("History", "Design", "Operations", "Legacy", "Reception", "Geography", "Economy", "Culture", "Governance", "Research")
_NAME_SUFFIX = ("Institute", "Company", "Bridge", "Observatory", "Society", "Railway", "Abbey", "Harbour", "Council")
_TITLE_SUFFIX = ("Affair", "Treaty", "Expedition", "Charter", "Festival", "Survey", "Accord", "Uprising")
TOPIC_WORDS = 24


def pseudo_word(i: int, syllables: list[str], length: int) -> str:
    """A pseudo-word from the base-``len(syllables)`` digits of ``i`` (unique below len**length)."""
    parts = []
    for _ in range(length):
        i, r = divmod(i, len(syllables))
        parts.append(syllables[r])
    return "".join(parts)


def _scramble(i: int, modulus: int) -> int:
    """A bijection of ``[0, modulus)`` (7919 is prime to 2 and 3), so consecutive ids give
    unrelated-looking words."""
    return (i * 7919 + 4321) % modulus


def _name(e: int) -> str:
    """Named entity ``e``: two capitalized words encoding ``e`` (unique below 24^5), a third of
    them with an institution suffix."""
    s = _scramble(e, 24**5)
    first, second = pseudo_word(s % 576, SYLLABLES, 2).capitalize(), pseudo_word(s // 576, SYLLABLES, 3).capitalize()
    return f"{first} {second} {_NAME_SUFFIX[e % len(_NAME_SUFFIX)]}" if e % 3 == 2 else f"{first} {second}"


def title(doc: int) -> str:
    """Title of document ``doc`` (unique below 24^6 documents)."""
    s = _scramble(doc, 24**6)
    return f"{pseudo_word(s % 13824, SYLLABLES, 3).capitalize()} {pseudo_word(s // 13824, SYLLABLES, 3).capitalize()} {_TITLE_SUFFIX[doc % 8]}"


def doc_id(doc: int) -> str:
    return f"doc{doc:07d}"


def url(doc: int) -> str:
    return f"https://wiki.example.org/{doc_id(doc)}"


def topic_words(t: int) -> list[str]:
    return [pseudo_word(_scramble(t * TOPIC_WORDS + j, 48**3), _TOPIC_SYL, 3) for j in range(TOPIC_WORDS)]


class Plan:
    """The corpus structure, drawn up front (O(n) small arrays): documents, topics, names."""

    def __init__(self, n: int, seed: int) -> None:
        if n < 2:
            raise ValueError(f"n must be >= 2 chunks, got {n}")
        rng = np.random.default_rng([seed, 0])
        self.n = n
        self.n_topics = max(2, n // CHUNKS_PER_TOPIC)
        weights = rng.lognormal(0.0, 0.5, self.n_topics)
        self.topic_p = weights / weights.sum()
        sections = rng.integers(SECTIONS[0], SECTIONS[1] + 1, size=n // 2 + 2)
        ends = np.cumsum(sections)
        self.n_docs = int(np.searchsorted(ends, n)) + 1
        sections = sections[: self.n_docs].copy()
        sections[-1] -= int(ends[self.n_docs - 1] - n)  # trim the last document to n chunks
        self.doc_ptr = np.zeros(self.n_docs + 1, dtype=np.int64)
        np.cumsum(sections, out=self.doc_ptr[1:])
        self.doc_of = np.repeat(np.arange(self.n_docs), sections)
        self.doc_topic = rng.choice(self.n_topics, size=self.n_docs, p=self.topic_p)
        self.topic = self.doc_topic[self.doc_of].astype(np.int32)  # [n]
        off = rng.random(n) < 0.15
        self.topic[off] = rng.choice(self.n_topics, size=int(off.sum()), p=self.topic_p)
        # about one name per 8 chunks of a topic, at least 4
        per_topic = np.maximum(4, np.bincount(self.topic, minlength=self.n_topics) // 8)
        self.name_ptr = np.zeros(self.n_topics + 1, dtype=np.int64)
        np.cumsum(per_topic, out=self.name_ptr[1:])
        # documents of each topic (for within-topic title mentions)
        self.by_topic = np.argsort(self.doc_topic, kind="stable")
        self.topic_doc_ptr = np.zeros(self.n_topics + 1, dtype=np.int64)
        np.cumsum(np.bincount(self.doc_topic, minlength=self.n_topics), out=self.topic_doc_ptr[1:])


# ------------------------------------------------------------------------------------------
# text
# ------------------------------------------------------------------------------------------


class _Text:
    """Draws and renders the sections of a block of documents (one generator, in order)."""

    def __init__(self, plan: Plan, seed: int) -> None:
        self.plan = plan
        self.rng = np.random.default_rng([seed, 2])
        common = sorted(COMMON_WORDS - {"i"})
        self.common = common
        zipf = 1.0 / np.arange(1, len(common) + 1) ** 0.8
        self.common_cdf = np.cumsum(zipf / zipf.sum())
        self.popular = [_name(10_000_000 + p) for p in range(POPULAR)]
        self._topic_words: dict[int, list[str]] = {}

    def words_of(self, t: int) -> list[str]:
        got = self._topic_words.get(t)
        if got is None:
            got = self._topic_words[t] = topic_words(t)
        return got

    def documents(self, lo: int, hi: int) -> list[dict]:
        """Records of documents ``lo .. hi - 1`` (the ``jsonl`` corpus format)."""
        return [{"id": doc_id(doc), "title": title(doc), "url": url(doc), "text": text}
                for doc, text, _ in self._render(lo, hi)]

    def chunks(self, lo: int, hi: int) -> list[Chunk]:
        """The chunks of documents ``lo .. hi - 1``, one per section, as the default chunking
        cuts them (section path = the headings above, ``n_tokens`` = words), without chunking."""
        return [Chunk(doc_id(doc), title(doc), path, url(doc), text[start:end], len(text[start:end].split()), start, end)
                for doc, text, spans in self._render(lo, hi) for path, start, end in spans]

    def _render(self, lo: int, hi: int):
        """``(doc, Markdown text, [(section path, start, end)])`` per document ``lo .. hi - 1``;
        a span covers its heading and its paragraph."""
        p, rng = self.plan, self.rng
        c0, c1 = int(p.doc_ptr[lo]), int(p.doc_ptr[hi])
        m = c1 - c0
        n_words = rng.integers(WORDS[0], WORDS[1] + 1, size=m)
        is_topic = rng.random(int(n_words.sum())) < 0.25
        common_ids = np.searchsorted(self.common_cdf, rng.random(is_topic.size))
        common_ids = np.minimum(common_ids, len(self.common) - 1)
        topic_ids = rng.integers(0, TOPIC_WORDS, size=is_topic.size)
        sent_len = rng.integers(8, 17, size=m)
        n_names = rng.integers(2, 5, size=m)
        name_u = rng.random((m, 4))
        year = np.where(rng.random(m) < 0.10, rng.integers(1500, 2021, size=m), 0)
        pop = np.where(rng.random(m) < 0.20, rng.integers(0, POPULAR, size=m), -1)
        mention = rng.random(m) < 0.10
        local = rng.random(m) < 0.8
        mention_u = rng.random(m)
        mention_any = rng.integers(0, p.n_docs, size=m)
        link = np.where(rng.random(m) < 0.02, rng.integers(0, p.n_docs, size=m), -1)
        bare = np.where(rng.random(m) < 0.01, rng.integers(0, p.n_docs, size=m), -1)
        head_u = rng.random(m)
        head_h2 = rng.integers(0, len(_H2), size=m)

        cursor = 0
        for doc in range(lo, hi):
            t_doc = int(p.doc_topic[doc])
            path, head = (title(doc),), f"# {title(doc)}"
            h2 = None
            part = 0
            sections = []  # (section path, heading line, paragraph)
            for i in range(int(p.doc_ptr[doc]), int(p.doc_ptr[doc + 1])):
                k = i - c0
                if i > p.doc_ptr[doc]:  # a new section: "## H2" (70 %, or when none is open) or "### Part k"
                    if h2 is None or head_u[k] < 0.7:
                        h2, part = _H2[int(head_h2[k])], 0
                        path, head = (title(doc), h2), f"## {h2}"
                    else:
                        part += 1
                        path, head = (title(doc), h2, f"Part {part}"), f"### Part {part}"
                t = int(p.topic[i])
                tw = self.words_of(t)
                nw = int(n_words[k])
                words = [tw[int(topic_ids[j])] if is_topic[j] else self.common[int(common_ids[j])]
                         for j in range(cursor, cursor + nw)]
                cursor += nw
                a, b = int(p.name_ptr[t]), int(p.name_ptr[t + 1])
                inserts = [_name(a + int((b - a) * name_u[k, s] ** 2)) for s in range(int(n_names[k]))]
                if year[k]:
                    inserts.append(f"in {int(year[k])}")
                if pop[k] >= 0:
                    inserts.append(self.popular[int(pop[k])])
                if mention[k]:
                    lo_t, hi_t = int(p.topic_doc_ptr[t_doc]), int(p.topic_doc_ptr[t_doc + 1])
                    target = int(p.by_topic[lo_t + int(mention_u[k] * (hi_t - lo_t))]) if local[k] else int(mention_any[k])
                    if target != doc:
                        inserts.append(f"the {title(target)}")
                if link[k] >= 0 and link[k] != doc:
                    inserts.append(f"[see also]({doc_id(int(link[k]))})")
                if bare[k] >= 0 and bare[k] != doc:
                    inserts.append(f"({url(int(bare[k]))})")
                sections.append((path, head, _paragraph(words, inserts, int(sent_len[k]))))
            yield (doc, *_markdown(sections))


def _markdown(sections: list[tuple[tuple[str, ...], str, str]]) -> tuple[str, list[tuple[tuple[str, ...], int, int]]]:
    """A document's text (heading, blank line, paragraph, blank line per section) and the span
    of each section in it."""
    spans, pos = [], 0
    for path, head, paragraph in sections:
        spans.append((path, pos, pos + len(head) + 2 + len(paragraph)))
        pos = spans[-1][2] + 2
    return "".join(f"{head}\n\n{paragraph}\n\n" for _, head, paragraph in sections).rstrip() + "\n", spans


def _paragraph(words: list[str], inserts: list[str], sent_len: int) -> str:
    """Sentences of ``sent_len`` words; inserts go after the second word of successive sentences
    (never sentence-initial, so the entity extractor keeps single names too)."""
    out = []
    k = 0
    for s in range(0, len(words), sent_len):
        sent = words[s : s + sent_len]
        if k < len(inserts) and len(sent) >= 3:
            sent = sent[:2] + [inserts[k]] + sent[2:]
            k += 1
        out.append(sent[0].capitalize() + " " + " ".join(sent[1:]) + ".")
    if k < len(inserts):
        out.append("It also mentions " + ", ".join(inserts[k:]) + ".")
    return " ".join(out)


# ------------------------------------------------------------------------------------------
# embeddings and queries
# ------------------------------------------------------------------------------------------


def _centres(plan: Plan, dim: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng([seed, 1])
    centres = rng.standard_normal((plan.n_topics, dim)).astype(np.float32)
    return centres / np.linalg.norm(centres, axis=1, keepdims=True)


def embedding_blocks(plan: Plan, centres: np.ndarray, seed: int, block: int = 65_536):
    """centre[topic] + 0.7 offset[doc] + 0.6 noise, normalized, ``block`` rows at a time (peak
    memory ~ one block). Yields ``(lo, hi, vectors [hi - lo, d] float32)``."""
    dim = centres.shape[1]
    rng = np.random.default_rng([seed, 3])
    offsets = (rng.standard_normal((plan.n_docs, dim)) / math.sqrt(dim)).astype(np.float32)
    for lo in range(0, plan.n, block):
        hi = min(plan.n, lo + block)
        noise = (rng.standard_normal((hi - lo, dim)) / math.sqrt(dim)).astype(np.float32)
        vec = centres[plan.topic[lo:hi]] + 0.7 * offsets[plan.doc_of[lo:hi]] + 0.6 * noise  # (block, d)
        yield lo, hi, vec / np.linalg.norm(vec, axis=1, keepdims=True)


def write_embeddings(path: Path, plan: Plan, centres: np.ndarray, seed: int) -> None:
    """:func:`embedding_blocks` written through a memory map. Shapes: -> ``[n, d]`` float32."""
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(plan.n, centres.shape[1]))
    for lo, hi, vec in embedding_blocks(plan, centres, seed):
        out[lo:hi] = vec
    out.flush()
    del out


def make_queries(plan: Plan, centres: np.ndarray, n_queries: int, seed: int) -> tuple[list[dict], np.ndarray]:
    """Query records ``{text, topic}`` and vectors ``[Q, d]`` near their topic centres."""
    rng = np.random.default_rng([seed, 4])
    dim = centres.shape[1]
    topics = rng.choice(plan.n_topics, size=n_queries, p=plan.topic_p)
    vec = centres[topics] + 0.9 * (rng.standard_normal((n_queries, dim)) / math.sqrt(dim)).astype(np.float32)
    vec /= np.linalg.norm(vec, axis=1, keepdims=True)
    records = []
    for q, t in enumerate(topics.tolist()):
        words = topic_words(t)
        a, b = int(plan.name_ptr[t]), int(plan.name_ptr[t + 1])
        picks = rng.choice(TOPIC_WORDS, size=2, replace=False)
        name = _name(a + int((b - a) * rng.random() ** 2))
        records.append({"text": f"{words[picks[0]]} {words[picks[1]]} {name}", "topic": t})
    return records, vec.astype(np.float32)


# ------------------------------------------------------------------------------------------
# the corpus folder
# ------------------------------------------------------------------------------------------


def _params(n: int, dim: int, seed: int, n_queries: int) -> dict:
    return {"version": VERSION, "n_chunks": n, "dim": dim, "seed": seed, "queries": n_queries}


def generate(out: str | Path, n: int, *, dim: int = 128, seed: int = 0, n_queries: int = 1024,
             block_docs: int = 8192, log=print) -> dict:
    """Write the corpus of ``n`` chunks under ``out`` (replacing what is there); returns meta."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "meta.json").unlink(missing_ok=True)  # incomplete until rewritten at the end
    t0 = time.perf_counter()
    plan = Plan(n, seed)
    centres = _centres(plan, dim, seed)
    np.save(out / "topics.npy", plan.topic)
    write_embeddings(out / "embeddings.npy", plan, centres, seed)
    t_emb = time.perf_counter() - t0
    text = _Text(plan, seed)
    n_bytes = 0
    with open(out / "corpus.jsonl", "w", encoding="utf-8") as fh:
        for lo in range(0, plan.n_docs, block_docs):
            hi = min(plan.n_docs, lo + block_docs)
            block = "".join(json.dumps(r) + "\n" for r in text.documents(lo, hi))
            n_bytes += len(block)
            fh.write(block)
            if log and (lo // block_docs) % 16 == 15:
                log(f"  generated {hi:,} / {plan.n_docs:,} documents ({time.perf_counter() - t0:.0f} s)")
    records, qvec = make_queries(plan, centres, n_queries, seed)
    with open(out / "queries.jsonl", "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in records)
    np.save(out / "queries.npy", qvec)
    meta = {
        **_params(n, dim, seed, n_queries),
        "documents": plan.n_docs,
        "topics": plan.n_topics,
        "entity_names": int(plan.name_ptr[-1]),
        "corpus_bytes": n_bytes,
        "seconds": {"embeddings": round(t_emb, 2), "total": round(time.perf_counter() - t0, 2)},
        "format": "jsonl",
    }
    (out / "meta.json").write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
    return meta


def ensure(out: str | Path, n: int, *, dim: int = 128, seed: int = 0, n_queries: int = 1024, log=print) -> tuple[dict, bool]:
    """The corpus under ``out``: reused when its ``meta.json`` has these parameters, else
    generated. Returns ``(meta, reused)``."""
    path = Path(out) / "meta.json"
    if path.exists():
        meta = json.loads(path.read_text(encoding="utf-8"))
        if all(meta.get(k) == v for k, v in _params(n, dim, seed, n_queries).items()):
            return meta, True
    return generate(out, n, dim=dim, seed=seed, n_queries=n_queries, log=log), False


def chunk_corpus(n: int, *, dim: int = 32, seed: int = 0, block_docs: int = 8192) -> tuple[list[Chunk], np.ndarray, dict]:
    """The corpus of :func:`generate` in memory, as the chunks of its default chunking: for the
    graph benchmarks, which start after chunking. Returns ``(chunks, embeddings [n, dim], facts)``."""
    plan = Plan(n, seed)
    centres = _centres(plan, dim, seed)
    emb = np.empty((n, dim), dtype=np.float32)
    for lo, hi, vec in embedding_blocks(plan, centres, seed):
        emb[lo:hi] = vec
    text = _Text(plan, seed)
    chunks = [c for lo in range(0, plan.n_docs, block_docs) for c in text.chunks(lo, min(plan.n_docs, lo + block_docs))]
    facts = {"chunks": n, "dim": dim, "topics": plan.n_topics, "documents": plan.n_docs,
             "entity_names": int(plan.name_ptr[-1]), "mean_words": round(float(np.mean([c.n_tokens for c in chunks])), 1)}
    return chunks, emb, facts


def load_queries(folder: str | Path) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Query texts, vectors ``[Q, d]`` and topics ``[Q]`` of a generated corpus folder."""
    folder = Path(folder)
    records = [json.loads(line) for line in (folder / "queries.jsonl").read_text(encoding="utf-8").splitlines()]
    return [r["text"] for r in records], np.load(folder / "queries.npy"), np.array([r["topic"] for r in records])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000, help="chunks (default: 1000000)")
    ap.add_argument("--dim", type=int, default=128, help="embedding dimension (default: 128)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--queries", type=int, default=1024, help="queries (default: 1024)")
    ap.add_argument("--out", default=None, help="folder (default: /tmp/spectrag-synth-corpus-<n>)")
    args = ap.parse_args(argv)
    out = args.out or f"/tmp/spectrag-synth-corpus-{args.n}"
    meta = generate(out, args.n, dim=args.dim, seed=args.seed, n_queries=args.queries)
    print(json.dumps(meta, indent=1))
    print(f"written to {out}")


if __name__ == "__main__":
    main()
