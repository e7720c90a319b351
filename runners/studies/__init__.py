"""Many-run studies: the grid, where runs execute (local or Ray), reading finished runs and their
aggregates, statistics, the paper's reference numbers, analyses, figures and the report
(``python -m runners.sweep``, ``python -m runners.reproduce``)."""
