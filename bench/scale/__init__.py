"""`make bench-scale`: kafka-py where its users take it — many partitions, connections, groups
and clients — each measured at 1x, 4x and 16x of a base size so costs that grow faster than the
work show (issue 19). Nothing here is asserted; tests/integration/test_scale_workloads.py runs
every workload small for correctness only."""
