"""Plain per-query references (oracles) of the batched stages, for the tests and the benchmarks:
``select`` (the budget selection), ``pipeline`` (the whole online pipeline, networkx / scipy /
Python loops) and ``activation`` (spreading activation, sequential). Not used by the engine."""
