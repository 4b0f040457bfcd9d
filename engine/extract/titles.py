"""Title matching shared by the citation signal (a chunk mentions another document's title), the
entity extractor (the corpus's own titles are entities) and the OpenIE reader (passages are
matched to chunks by title)."""

from __future__ import annotations

import re
from collections.abc import Sequence

# Common English words: a title that is one of these alone (``Time``, ``Water``, ``Evening``)
# would match nearly every text, so TitleMatcher ignores it. Also used by the entity extractor
# to reject capitalized common words. Lower case; compared after casefolding.
COMMON_WORDS = frozenset(
    """
    a about above across act action actually add after again against age ago air all almost
    alone along already also although always am among an and animal another answer any anyone
    anything are area areas around art as ask at away back bad base be became because become
    been before began begin being below best better between big bill black blue body book both
    bring brought build building built business but by call called came can car care case
    cause center central century certain change child children city class clear close cold
    come common company country course cover current cut dark data day days dead deal death
    decision deep did different do does doing done door down draw during each early earth east
    easy economic education effect eight either else end enough entire even evening event ever
    every example eye face fact fall family far father feel few field fight figure final find
    fire first five follow food for force form former found four free friend from front full
    game gave general get give go going gold good got government great green ground group grow
    growth had half hand happy hard has have he head health hear heart heavy help her here high
    him his history hold home hope hot hour house how however human hundred i idea if image
    important in include including increase information inside instead interest into is issue
    it its itself just keep kind king knew know land language large last late later law lead
    learn least leave left less let letter level life light like line list little live local
    long look lost lot love low made main major make man many market matter may me mean measure
    member men might mind miss money month more morning most mother move movement much music
    must my name national nature near need never new news next night nine no none north not note
    nothing now number occupied of off office often oil old on once one only open or order other
    our out outside over own page paper part party pass past pay peace people per perhaps period
    person picture place plan plant play point police political poor popular position possible
    power present president press problem process program public put question quite race rather
    read ready real reason record red report rest result right river road rock role room round
    rule run said same saw say school science sea second see seem seen self sense service set
    seven several shall she short should show side since single six size small so social some
    someone something song sound south space special stand star start state states still stop
    story street strong study such summer sun support sure system table take taken talk team
    tell ten than that the their them then there these they thing think third this those though
    thought three through time to today together told too took top toward town trade tree true
    try turn two type under until up upon us use used very voice want war was watch water way we
    week well went were west what when where whether which while white who whole why will win
    winter with within without woman women word words work world would write year years yes yet
    you young your
    """.split()
)

_WORD_CHARS = re.compile(r"\w")


def _is_word(ch: str) -> bool:
    return ch.isalnum() or ch == "_"


def title_key(title: str) -> str:
    """The matching key of a title: casefolded, whitespace collapsed."""
    return " ".join(title.casefold().split())


class TitleMatcher:
    """Which of a fixed list of titles each text mentions (Aho-Corasick, pyahocorasick).

    * Titles and texts are compared casefolded with whitespace runs collapsed to one space, so
      matching is case-insensitive and survives line breaks inside a title.
    * Whole words only: a match must not be preceded or followed by a letter, digit or ``_``
      (checked on the side where the title itself starts / ends with such a character), so
      ``Skarholt`` matches in ``Skarholt's`` and ``Skarholt-based`` but not in ``Skarholters``.
    * Ignored titles: shorter than ``min_chars`` (default 4) characters, or a common English word
      alone (:data:`COMMON_WORDS`), or with no letter or digit at all.
    * A match lying inside a longer match (``Skarholt`` inside ``University of Skarholt``) is
      dropped unless ``keep_nested``: the text names the longer title.
    * Equal titles (after casefolding) all match together; each title index is reported at most
      once per text, in increasing order.

    Cost: building is linear in the total title length; ``find`` is linear in the text length
    plus the number of matches.
    """

    def __init__(self, titles: Sequence[str], *, min_chars: int = 4, keep_nested: bool = False) -> None:
        self.titles = list(titles)
        self.keep_nested = keep_nested
        groups: dict[str, list[int]] = {}
        for i, title in enumerate(self.titles):
            key = title_key(title)
            if len(key) < min_chars or key in COMMON_WORDS or not _WORD_CHARS.search(key):
                continue
            groups.setdefault(key, []).append(i)
        self.n_patterns = len(groups)
        import ahocorasick  # on use: a GPU machine scoring queries may not have pyahocorasick

        self._automaton = ahocorasick.Automaton()
        for key, ids in groups.items():
            self._automaton.add_word(key, (len(key), _is_word(key[0]), _is_word(key[-1]), tuple(ids)))
        if groups:
            self._automaton.make_automaton()

    def find(self, texts: Sequence[str]) -> list[list[int]]:
        """Sorted indices of the titles mentioned in each text. Shapes: ``[T]`` -> ``[T][*]``."""
        if not self.n_patterns:
            return [[] for _ in texts]
        return [self._find_one(text) for text in texts]

    def _find_one(self, text: str) -> list[int]:
        found: set[int] = set()
        for _, _, ids in self.spans(text)[1]:
            found.update(ids)
        return sorted(found)

    def spans(self, text: str) -> tuple[str, list[tuple[int, int, tuple[int, ...]]]]:
        """The text casefolded with its whitespace collapsed (what is matched), and each match in
        it as ``(start, end, title indices)``, ``end`` exclusive, by start; a match inside an
        earlier-starting (or same-start longer) one is left out unless ``keep_nested``."""
        t = " ".join(text.casefold().split())
        if not self.n_patterns:
            return t, []
        last = len(t) - 1
        hits = []
        for end, (n, check_left, check_right, ids) in self._automaton.iter(t):
            start = end - n + 1
            if check_left and start > 0 and _is_word(t[start - 1]):
                continue
            if check_right and end < last and _is_word(t[end + 1]):
                continue
            hits.append((start, -end, ids))
        hits.sort()
        kept, reach = [], -1
        for start, neg_end, ids in hits:
            if self.keep_nested or -neg_end > reach:  # not inside an earlier-starting (or same-start longer) match
                reach = max(reach, -neg_end)
                kept.append((start, -neg_end + 1, ids))
        return t, kept
