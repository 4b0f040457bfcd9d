"""CPU kernels compiled to machine code (numba), for the ragged per-query loops of the online
pipeline: expansion over CSR frontiers, induced blocks, PPR per block, bridging and greedy
selection. Each has a torch version (the reference and the GPU path) that the tests hold it to.

numba is an optional dependency in the sense that the torch path always works; ``available()``
says whether the compiled path can run, and the pipeline's ``backend = "auto"`` chooses it on the
CPU when it can. Parallelism: each kernel processes a range of queries with the GIL released, and
:func:`spectrag.kernels.compiled.runtime.parallel_rows` splits the batch over a thread pool of
``torch.get_num_threads()`` workers. numba's own threading layers are not used: its workqueue
layer aborts on concurrent calls from two Python threads (a server does that), and its OpenMP
layer would share the OpenMP runtime whose thread count torch sets.
"""

from spectrag.kernels.compiled.runtime import available, parallel_rows, require

__all__ = ["available", "parallel_rows", "require"]
