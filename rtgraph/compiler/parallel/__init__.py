"""Many devices: a program's placement (``device[i]``) or data parallelism becomes one program
per rank with transfers between them (:mod:`.place`, :mod:`.replicate`,
:mod:`.expand_collectives`, :mod:`.transfers`), compiled rank by rank (:mod:`.compile_cluster`)."""
