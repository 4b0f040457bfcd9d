"""Plain per-query references (oracles) of the batched stages, for the tests and the benchmarks:
``select`` (the budget selection), ``pipeline`` (the whole online pipeline, networkx / scipy /
Python loops), ``activation`` (spreading activation, sequential) and ``index_format`` (the value
invariants an index folder must hold, for the load-time checks). Not used by the engine."""
